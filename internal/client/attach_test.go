package client

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
)

func out(id int, kind, text string) string {
	return fmt.Sprintf("id: %d\nevent: %s\ndata: {\"data\":%q}\n\n", id, kind, base64.StdEncoding.EncodeToString([]byte(text)))
}

func sseHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
}

// collect reads a stream to its end.
func collect(t *testing.T, s *Stream) (stdout, stderr string, last Event, err error) {
	t.Helper()
	var o, e strings.Builder
	for {
		ev, err := s.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return o.String(), e.String(), last, nil
			}
			return o.String(), e.String(), last, err
		}
		switch ev.Kind {
		case apiv1.EventStdout:
			o.Write(ev.Data)
		case apiv1.EventStderr:
			e.Write(ev.Data)
		}
		last = ev
	}
}

func TestAttachReconnectsWithLastEventID(t *testing.T) {
	var mu sync.Mutex
	var lastIDs []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/data/v1/processes/proc_x/attach" {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("Authorization") != "Bearer att-token" || r.Header.Get("Accept") != "text/event-stream" {
			t.Errorf("headers %v", r.Header)
		}
		mu.Lock()
		lastIDs = append(lastIDs, r.Header.Get("Last-Event-ID"))
		n := len(lastIDs)
		mu.Unlock()
		sseHeaders(w)
		f := w.(http.Flusher)
		switch n {
		case 1:
			_, _ = io.WriteString(w, ": keep-alive\n\n"+out(1, "stdout", "hel")+out(2, "stderr", "warn\n")+"id: 3\nevent: stdout\ndata: {\"da")
			f.Flush()
			hijackClose(t, w) // dropped mid-event: event 3 must not count
		case 2:
			// A server that resends a little: event 2 again, then new ones.
			_, _ = io.WriteString(w, out(2, "stderr", "warn\n")+out(3, "stdout", "lo\n")+"event: future\ndata: {}\n\n")
			f.Flush()
			// a clean close before the exit event is a drop too
		default:
			_, _ = io.WriteString(w, out(4, "stdout", "bye\n")+"id: 5\nevent: exit\ndata: {\"exit_code\":3}\n\n")
		}
	}))
	defer srv.Close()
	c := newTestClient(t, srv.URL, WithRetries(4, time.Millisecond))
	s, err := c.Attach(context.Background(), "/data/v1/processes/proc_x/attach", "att-token")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	stdout, stderr, last, err := collect(t, s)
	if err != nil {
		t.Fatal(err)
	}
	if stdout != "hello\nbye\n" || stderr != "warn\n" {
		t.Errorf("stdout %q stderr %q", stdout, stderr)
	}
	if last.Kind != apiv1.EventExit || last.ExitCode != 3 || last.ID != "5" {
		t.Errorf("last event %+v", last)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(lastIDs, ",") != ",2,3" {
		t.Errorf("Last-Event-ID headers %q, want [\"\" 2 3]", lastIDs)
	}
	// After the exit event the stream is over.
	if _, err := s.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("Next after exit = %v", err)
	}
}

func TestAttachEvents(t *testing.T) {
	tests := []struct {
		name string
		body string
		want Event
	}{
		{"signal", "id: 1\nevent: exit\ndata: {\"exit_code\":-1,\"signal\":\"KILL\"}\n\n", Event{Kind: "exit", ID: "1", ExitCode: -1, Signal: "KILL"}},
		{"error", "event: error\ndata: {\"code\":\"exec_failed\",\"message\":\"no such file\"}\n\n",
			Event{Kind: "error", Err: &apiv1.Error{Code: "exec_failed", Message: "no such file"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				sseHeaders(w)
				_, _ = io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			s, err := newTestClient(t, srv.URL).Attach(context.Background(), srv.URL+"/a", "t")
			if err != nil {
				t.Fatal(err)
			}
			ev, err := s.Next()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(ev, tt.want) {
				t.Errorf("got %+v, want %+v", ev, tt.want)
			}
			if _, err := s.Next(); !errors.Is(err, io.EOF) {
				t.Errorf("after %s: %v, want EOF", tt.name, err)
			}
		})
	}
}

func TestAttachRefused(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		switch {
		case r.URL.Path == "/html":
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, "<html>")
		case r.URL.Path == "/expire" && n > 1:
			writeJSON(w, 401, apiv1.Error{Code: apiv1.CodeTokenExpired, Message: "attachment token expired"})
		case r.URL.Path == "/expire":
			sseHeaders(w)
			_, _ = io.WriteString(w, out(1, "stdout", "x"))
		default:
			writeJSON(w, 401, apiv1.Error{Code: apiv1.CodeUnauthenticated, Message: "invalid attachment token"})
		}
	}))
	defer srv.Close()
	c := newTestClient(t, srv.URL)
	ctx := context.Background()
	if _, err := c.Attach(ctx, "/bad", "t"); !IsCode(err, apiv1.CodeUnauthenticated) {
		t.Errorf("bad token: %v", err)
	}
	if _, err := c.Attach(ctx, "/html", "t"); err == nil || !strings.Contains(err.Error(), "not text/event-stream") {
		t.Errorf("html: %v", err)
	}
	mu.Lock()
	calls = 0
	mu.Unlock()
	s, err := c.Attach(ctx, "/expire", "t")
	if err != nil {
		t.Fatal(err)
	}
	stdout, _, _, err := collect(t, s)
	if stdout != "x" || !IsCode(err, apiv1.CodeTokenExpired) {
		t.Errorf("stdout %q, err %v; want x then token_expired", stdout, err)
	}
	if _, err := c.Attach(ctx, "ftp://x/", "t"); err == nil {
		t.Error("ftp attach URL accepted")
	}
	if _, err := c.Attach(ctx, "/a", ""); err == nil {
		t.Error("empty token accepted")
	}
}

func TestAttachGivesUp(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		mu.Unlock()
		sseHeaders(w)
		_, _ = io.WriteString(w, "retry: 1\n: nothing useful\n\n")
	}))
	defer srv.Close()
	c := newTestClient(t, srv.URL, WithReconnects(3))
	s, err := c.Attach(context.Background(), "/a", "t")
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Next()
	if err == nil || !strings.Contains(err.Error(), "before the exit event") || !strings.Contains(err.Error(), "3 reconnect attempts") {
		t.Fatalf("err = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 4 {
		t.Errorf("%d connections, want 4", calls)
	}
}

func TestAttachCloseUnblocksNext(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sseHeaders(w)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	s, err := newTestClient(t, srv.URL).Attach(context.Background(), "/a", "t")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Next()
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	s.Close()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Next after Close = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Next")
	}
}

func TestAttachMalformedEvent(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sseHeaders(w)
		_, _ = io.WriteString(w, "id: 1\nevent: stdout\ndata: not json\n\n")
	}))
	defer srv.Close()
	s, err := newTestClient(t, srv.URL).Attach(context.Background(), "/a", "t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(); err == nil || !strings.Contains(err.Error(), "malformed stdout event 1") {
		t.Fatalf("err = %v", err)
	}
}

func FuzzDecodeEvent(f *testing.F) {
	f.Add("stdout", `{"data":"aGk="}`)
	f.Add("exit", `{"exit_code":-1,"signal":"KILL"}`)
	f.Add("error", `{"code":"exec_failed","message":"x"}`)
	f.Add("future", `{}`)
	f.Add("stderr", `{"data":null}`)
	f.Fuzz(func(t *testing.T, typ, data string) {
		ev, ok, err := decodeEvent(SSEEvent{Type: typ, Data: data, ID: "1", HasID: true})
		if err != nil {
			if ok {
				t.Fatal("error and ok")
			}
			return
		}
		known := typ == apiv1.EventStdout || typ == apiv1.EventStderr || typ == apiv1.EventExit || typ == apiv1.EventError
		if ok != known {
			t.Fatalf("type %q: ok %v", typ, ok)
		}
		if ok && (ev.Kind != typ || ev.ID != "1") {
			t.Fatalf("event %+v", ev)
		}
		if typ == apiv1.EventError && ok && ev.Err == nil {
			t.Fatal("error event without error")
		}
	})
}
