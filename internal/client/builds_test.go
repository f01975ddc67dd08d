package client

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// TestFollowBuildReconnects: a log stream cut before its done event (after
// an unfinished event, cleanly or by a broken connection) is opened again
// from the offset of the last log event received, so the text passed on
// is the log exactly: nothing dropped, nothing repeated.
func TestFollowBuildReconnects(t *testing.T) {
	id := model.NewBuildID()
	log := []byte(strings.Repeat("step 1/3 größe ✓ 𝄞 naïve\nI: ünïcödé 日本語 partial", 4) + " end\n")
	var (
		mu       sync.Mutex
		conns    int
		resumes  []string // Last-Event-ID of each connection
		lastSent []int64  // the offset of the last whole log event of each connection
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/builds/"+id.String()+"/log" || r.Header.Get("Authorization") == "" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		off := 0
		if h := r.Header.Get("Last-Event-ID"); h != "" {
			n, err := strconv.Atoi(h)
			if err != nil || n < 0 || n > len(log) {
				http.Error(w, "bad Last-Event-ID", http.StatusBadRequest)
				return
			}
			off = n
		}
		mu.Lock()
		conns++
		conn := conns
		resumes = append(resumes, r.Header.Get("Last-Event-ID"))
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		for events := 0; off < len(log); events++ {
			if events == 3 && conn < 8 {
				mu.Lock()
				lastSent = append(lastSent, int64(off))
				mu.Unlock()
				// An unfinished event, then the stream drops.
				fmt.Fprintf(w, "id: %d\nevent: log\ndata: {\"text\":\"zz", off+2)
				w.(http.Flusher).Flush()
				if conn%2 == 0 {
					panic(http.ErrAbortHandler) // a broken connection
				}
				return
			}
			n := min(len(log)-off, 5+conn%3)
			for off+n < len(log) && !utf8.RuneStart(log[off+n]) {
				n-- // never inside a character
			}
			d, _ := json.Marshal(apiv1.BuildLogEventData{Text: string(log[off : off+n]), Offset: int64(off + n)})
			fmt.Fprintf(w, "id: %d\nevent: log\ndata: %s\n\n", off+n, d)
			if events == 1 {
				fmt.Fprint(w, "event: progress\ndata: {\"state\":\"running\",\"steps_done\":1,\"steps_cached\":0,\"steps_total\":2,\"entries\":0,\"bytes\":0}\n\n")
			}
			off += n
		}
		fmt.Fprintf(w, "event: done\ndata: {\"id\":%q,\"kind\":\"recipe\",\"source\":\"default\",\"state\":\"succeeded\",\"attempts\":1,\"created_at\":\"2026-01-01T00:00:00Z\",\"updated_at\":\"2026-01-01T00:00:00Z\"}\n\n", id)
	}))
	defer srv.Close()
	c := newTestClient(t, srv.URL)
	var (
		text     strings.Builder
		progress int
		last     int64
	)
	b, err := c.FollowBuild(context.Background(), id, true, func(ev BuildEvent) error {
		if ev.Progress != nil {
			progress++
			return nil
		}
		if ev.Offset <= last {
			t.Errorf("log event at offset %d after %d", ev.Offset, last)
		}
		last = ev.Offset
		text.WriteString(ev.Log)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if b.State != "succeeded" || b.ID != id.String() || last != int64(len(log)) {
		t.Fatalf("build %+v, last offset %d of %d", b, last, len(log))
	}
	if sha256.Sum256([]byte(text.String())) != sha256.Sum256(log) {
		t.Fatalf("text passed on:\n%q\nwant:\n%q", text.String(), log)
	}
	mu.Lock()
	defer mu.Unlock()
	if conns != 8 || progress != 8 {
		t.Fatalf("%d connections, %d progress events; want 8 of each", conns, progress)
	}
	for i, sent := range lastSent {
		if want := strconv.FormatInt(sent, 10); resumes[i+1] != want {
			t.Errorf("connection %d resumed at %q, want %q (the last whole event before the drop)", i+2, resumes[i+1], want)
		}
	}
}

// TestFollowBuildRefusesABackwardOffset: a log event that does not move
// past where the stream resumed is an error, not text passed on twice.
func TestFollowBuildRefusesABackwardOffset(t *testing.T) {
	id := model.NewBuildID()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "id: 4\nevent: log\ndata: {\"text\":\"one\\n\",\"offset\":4}\n\n")
		fmt.Fprint(w, "id: 4\nevent: log\ndata: {\"text\":\"one\\n\",\"offset\":4}\n\n")
	}))
	defer srv.Close()
	c := newTestClient(t, srv.URL)
	var text strings.Builder
	_, err := c.FollowBuild(context.Background(), id, true, func(ev BuildEvent) error {
		text.WriteString(ev.Log)
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "not after 4") || text.String() != "one\n" {
		t.Fatalf("err %v, text %q", err, text.String())
	}
}
