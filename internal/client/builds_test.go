package client

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/airlockdev/airlock/internal/model"
)

// TestFollowBuildReconnects: a log stream cut before its done event is
// opened again, and the text already passed on is not passed twice.
func TestFollowBuildReconnects(t *testing.T) {
	id := model.NewBuildID()
	var conns atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/builds/"+id.String()+"/log" || r.Header.Get("Authorization") == "" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: log\ndata: {\"text\":\"one\\ntwo\\n\"}\n\n")
		if conns.Add(1) == 1 {
			fmt.Fprint(w, "event: progress\ndata: {\"state\":\"running\",\"steps_done\":1,\"steps_cached\":0,\"steps_total\":2,\"entries\":0,\"bytes\":0}\n\n")
			return // cut: no done event
		}
		fmt.Fprint(w, "event: log\ndata: {\"text\":\"three\\n\"}\n\n")
		fmt.Fprintf(w, "event: done\ndata: {\"id\":%q,\"kind\":\"recipe\",\"source\":\"default\",\"state\":\"succeeded\",\"attempts\":1,\"created_at\":\"2026-01-01T00:00:00Z\",\"updated_at\":\"2026-01-01T00:00:00Z\"}\n\n", id)
	}))
	defer srv.Close()
	c := newTestClient(t, srv.URL)
	var text strings.Builder
	progress := 0
	b, err := c.FollowBuild(context.Background(), id, true, func(ev BuildEvent) error {
		text.WriteString(ev.Log)
		if ev.Progress != nil {
			progress++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if b.State != "succeeded" || b.ID != id.String() || text.String() != "one\ntwo\nthree\n" || progress != 1 || conns.Load() != 2 {
		t.Fatalf("build %+v, text %q, %d progress events, %d connections", b, text.String(), progress, conns.Load())
	}
}
