package client

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// scriptedReader yields its chunks, each after its pause, then io.EOF.
type scriptedReader struct {
	chunks []string
	pauses []time.Duration
}

func (s *scriptedReader) Read(p []byte) (int, error) {
	if len(s.chunks) == 0 {
		return 0, io.EOF
	}
	time.Sleep(s.pauses[0])
	n := copy(p, s.chunks[0])
	s.chunks, s.pauses = s.chunks[1:], s.pauses[1:]
	return n, nil
}

// Stdin holds a request open only while its reader has data: after the
// idle stretch it ends the request (the server writes what came) and the
// next data opens a new one, so an interactive reader that is quiet does
// not hold a stdin stream until the server's stdin idle timeout cuts it.
// The bytes arrive in order, and stdin is closed at the end.
func TestStdinEndsQuietRequests(t *testing.T) {
	t.Parallel()
	const idle = 100 * time.Millisecond
	type post struct {
		body      string
		close     bool
		heldAfter time.Duration // how long the request stayed open after its last byte
	}
	var mu sync.Mutex
	var posts []post
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/data/v1/processes/proc_x/stdin" {
			http.NotFound(w, r)
			return
		}
		var body []byte
		last := time.Now()
		buf := make([]byte, 1024)
		for {
			n, err := r.Body.Read(buf)
			if n > 0 {
				body = append(body, buf[:n]...)
				last = time.Now()
			}
			if err != nil {
				break
			}
		}
		mu.Lock()
		posts = append(posts, post{body: string(body), close: r.URL.Query().Get("close") == "1", heldAfter: time.Since(last)})
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	c := newTestClient(t, srv.URL)
	dp, err := c.DataPlane(srv.URL+"/data/v1/processes/proc_x/attach", "att-token")
	if err != nil {
		t.Fatal(err)
	}
	in := &scriptedReader{chunks: []string{"a", "b", "c"}, pauses: []time.Duration{0, 10 * time.Millisecond, 5 * idle}}
	if err := dp.stdinIdle(context.Background(), in, true, idle); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []post{{body: "ab"}, {body: "c"}, {body: "", close: true}}
	if len(posts) != len(want) {
		t.Fatalf("posts %+v, want bodies %+v", posts, want)
	}
	for i, p := range posts {
		if p.body != want[i].body || p.close != want[i].close {
			t.Errorf("post %d: %q close=%v, want %q close=%v", i, p.body, p.close, want[i].body, want[i].close)
		}
		if p.heldAfter > idle+time.Second {
			t.Errorf("post %d stayed open %s after its last byte (idle %s)", i, p.heldAfter, idle)
		}
	}
}
