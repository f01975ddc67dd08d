package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

const testBodyTimeout = 300 * time.Millisecond

// rawConn dials the test server for requests written by hand.
func rawConn(t *testing.T, url string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second)) // the test's own bound
	return c
}

// waitLog waits for the access log line of a request that answered status,
// which withRequestContext writes once the handler has returned.
func waitLog(t *testing.T, logs logCapture, path string, status int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-logs.records:
			if r.Message != "http request" {
				continue
			}
			var p string
			var s int64
			r.Attrs(func(a slog.Attr) bool {
				switch a.Key {
				case "path":
					p = a.Value.String()
				case "status":
					s = a.Value.Int64()
				}
				return true
			})
			if p == path && s == int64(status) {
				return
			}
		case <-deadline:
			t.Fatalf("no access log line for %s with status %d: the handler did not return", path, status)
		}
	}
}

// A client that sends the headers and then stalls, or trickles its body a
// byte at a time, gets 408 request_timeout after the timeout and its
// connection closed; the handler returns; nothing is written.
func TestBodyReadTimeout(t *testing.T) {
	t.Parallel()
	logs := logCapture{records: make(chan slog.Record, 10000)}
	e := newEnv(t, func(c *envConfig) { c.BodyReadTimeout = testBodyTimeout; c.Logger = slog.New(logs) })
	body := `{"name": "slowpoke"}`
	head := fmt.Sprintf("POST /v1/admin/projects HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n", e.admin, len(body))
	before := e.dump()
	for _, trickle := range []bool{false, true} {
		t.Run(fmt.Sprintf("trickle=%v", trickle), func(t *testing.T) {
			c := rawConn(t, e.srv.URL)
			start := time.Now()
			if _, err := io.WriteString(c, head+body[:3]); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			defer close(stop)
			if trickle { // one byte every 50 ms: progress, but not enough
				go func() {
					for i := 3; i < len(body)-1; i++ {
						select {
						case <-stop:
							return
						case <-time.After(50 * time.Millisecond):
						}
						if _, err := c.Write([]byte{body[i]}); err != nil {
							return
						}
					}
				}()
			}
			br := bufio.NewReader(c)
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no response: %v", err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			took := time.Since(start)
			var apiErr apiv1.Error
			if res.StatusCode != http.StatusRequestTimeout || json.Unmarshal(b, &apiErr) != nil || apiErr.Code != apiv1.CodeRequestTimeout {
				t.Fatalf("answer %d %s, want 408 request_timeout", res.StatusCode, b)
			}
			if took < testBodyTimeout || took > testBodyTimeout+5*time.Second {
				t.Fatalf("answered after %s, timeout %s", took, testBodyTimeout)
			}
			if !res.Close {
				t.Error("the 408 does not close the connection")
			}
			// Closed: EOF, or a reset when the server closed with bytes
			// of the body still unread in its receive buffer.
			if n, err := br.Read(make([]byte, 1)); n != 0 || (err != io.EOF && !errors.Is(err, syscall.ECONNRESET)) {
				t.Fatalf("after the 408 the connection gave %d bytes, %v; want EOF or a reset (closed)", n, err)
			}
			waitLog(t, logs, "/v1/admin/projects", http.StatusRequestTimeout)
		})
	}
	if e.dump() != before {
		t.Fatal("a timed-out request changed the store")
	}
}

// A body that arrives in time is served, and the deadline it armed does
// not outlive it: the same keep-alive connection serves a next request
// after more than the timeout, and a long-poll after a body is not cut.
func TestBodyReadTimeoutSpares(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *envConfig) { c.BodyReadTimeout = testBodyTimeout })
	c := rawConn(t, e.srv.URL)
	br := bufio.NewReader(c)
	roundTrip := func(method, path, body string) *http.Response {
		t.Helper()
		req := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n", method, path, e.keyA)
		if body != "" {
			req += fmt.Sprintf("Content-Type: application/json\r\nContent-Length: %d\r\n", len(body))
		}
		if _, err := io.WriteString(c, req+"\r\n"+body); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		res.Body = io.NopCloser(bytes.NewReader(b))
		return res
	}
	res := roundTrip("POST", "/v1/sandboxes", `{}`)
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("create: %d", res.StatusCode)
	}
	var out apiv1.SandboxWithOperation
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * testBodyTimeout)
	// A long-poll on the same connection, longer than the body timeout.
	start := time.Now()
	res = roundTrip("GET", "/v1/operations/"+out.Operation.ID+"?wait=1s", "")
	if res.StatusCode != http.StatusOK || time.Since(start) < 900*time.Millisecond {
		t.Fatalf("long-poll after a body: %d after %s", res.StatusCode, time.Since(start))
	}
	if res = roundTrip("POST", "/v1/sandboxes", `{"cpus": 1}`); res.StatusCode != http.StatusAccepted {
		t.Fatalf("second create on the connection: %d", res.StatusCode)
	}

	// A handler that works on after reading its whole body: the deadline
	// is gone with the body, so net/http's watch for the client going away
	// does not time out and cancel the request.
	srv := httptest.NewServer(e.api.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		select {
		case <-time.After(3 * testBodyTimeout):
			w.WriteHeader(http.StatusNoContent)
		case <-r.Context().Done():
			w.WriteHeader(http.StatusInternalServerError)
		}
	})))
	defer srv.Close()
	res, err := srv.Client().Post(srv.URL, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNoContent {
		t.Fatalf("a handler working after its body: %d (its request was cancelled)", res.StatusCode)
	}

	// The same with reads past the body's end (an HTTP transport streaming
	// the body on to an agent may make them): they must not arm the
	// deadline again, or net/http's watch of the idle connection times out
	// and cancels the request.
	past := httptest.NewServer(e.api.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if n, err := r.Body.Read(make([]byte, 8)); n != 0 || err != io.EOF {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		select {
		case <-time.After(3 * testBodyTimeout):
			w.WriteHeader(http.StatusNoContent)
		case <-r.Context().Done():
			w.WriteHeader(http.StatusInternalServerError)
		}
	})))
	defer past.Close()
	res, err = past.Client().Post(past.URL, "application/octet-stream", io.MultiReader(strings.NewReader(`{}`)))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNoContent {
		t.Fatalf("a handler that read past its body's end: %d (its request was cancelled)", res.StatusCode)
	}
}

// slowReader yields chunk bytes every gap, n times.
type slowReader struct {
	chunk, n int
	gap      time.Duration
	stall    chan struct{} // non-nil: after n chunks, block until closed
}

func (s *slowReader) Read(p []byte) (int, error) {
	if s.n == 0 {
		if s.stall != nil {
			<-s.stall
		}
		return 0, io.EOF
	}
	time.Sleep(s.gap)
	s.n--
	k := min(len(p), s.chunk)
	for i := range p[:k] {
		p[i] = 'x'
	}
	return k, nil
}

// File uploads are timed by progress, not in total: a slow upload that
// takes several timeouts but never pauses for one succeeds; one that
// stalls is cut after the timeout and its handler returns.
func TestUploadBodyTimeoutIsProgressBased(t *testing.T) {
	t.Parallel()
	logs := logCapture{records: make(chan slog.Record, 10000)}
	f := newFilesEnv(t, func(c *envConfig) { c.BodyReadTimeout = testBodyTimeout; c.Logger = slog.New(logs) })
	sb := f.createSandbox(f.keyA, `{}`).Sandbox.ID
	f.finishCreate(model.SandboxID(sb))

	up := f.transfer(f.keyA, sb, "/slow.bin", apiv1.DirectionUpload)
	slow := &slowReader{chunk: 16 << 10, n: 12, gap: testBodyTimeout / 3} // about 4 timeouts in all
	start := time.Now()
	b := wantDP(t, f.send("PUT", up.URL, up.Token, slow, "application/octet-stream"), http.StatusOK, "")
	var fi apiv1.FileInfo
	if err := json.Unmarshal(b, &fi); err != nil || fi.Size != 12*16<<10 {
		t.Fatalf("slow upload → %s", b)
	}
	if time.Since(start) < 2*testBodyTimeout {
		t.Fatalf("the slow upload took only %s", time.Since(start))
	}

	up = f.transfer(f.keyA, sb, "/stalled.bin", apiv1.DirectionUpload)
	stall := make(chan struct{})
	defer close(stall)
	start = time.Now()
	req, err := http.NewRequest("PUT", up.URL, &slowReader{chunk: 4 << 10, n: 1, stall: stall})
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+up.Token)
	req.Header.Set("Content-Type", "application/octet-stream")
	res, err := f.dp.Client().Do(req)
	if err == nil {
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			t.Fatal("a stalled upload succeeded")
		}
	}
	if took := time.Since(start); took > testBodyTimeout+5*time.Second {
		t.Fatalf("the stalled upload was cut after %s", took)
	}
	u := strings.TrimPrefix(up.URL, f.dp.URL)
	u, _, _ = strings.Cut(u, "?")
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-logs.records:
			if r.Message != "http request" {
				continue
			}
			done := false
			r.Attrs(func(a slog.Attr) bool {
				done = done || a.Key == "path" && a.Value.String() == u
				return true
			})
			if done {
				return // the upload's handler returned
			}
		case <-deadline:
			t.Fatal("the stalled upload's handler did not return")
		}
	}
}

// TestBodyDeadlineIsTheContextCause: a handler that streams its body
// elsewhere (as stdin goes to an agent) and watches only its context
// learns from context.Cause that the body's deadline passed, whichever
// ends first (net/http cancels the request's own context inside the read
// that failed); a client that goes away before the deadline is not taken
// for one.
func TestBodyDeadlineIsTheContextCause(t *testing.T) {
	t.Parallel()
	const idle = 200 * time.Millisecond
	causes := make(chan error, 4)
	a := &API{cfg: Config{BodyReadTimeout: time.Minute, StdinIdleTimeout: idle}}
	srv := httptest.NewServer(a.withBodyDeadline(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		go io.Copy(io.Discard, r.Body) // the reader is not the handler
		<-r.Context().Done()
		causes <- context.Cause(r.Context())
	})))
	defer srv.Close()
	path := strings.Replace(apiv1.StdinRoute, "{process_id}", model.NewProcessID().String(), 1)
	head := "POST " + path + " HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"

	c := rawConn(t, srv.URL)
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-causes:
		if !errors.Is(err, apiv1.ErrBodyTimeout) {
			t.Fatalf("cause after an idle stdin body: %v, want ErrBodyTimeout", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context did not end after the deadline")
	}

	c = rawConn(t, srv.URL)
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	time.Sleep(idle / 4)
	c.Close()
	select {
	case err := <-causes:
		if err == nil || errors.Is(err, apiv1.ErrBodyTimeout) {
			t.Fatalf("cause after the client went away: %v, want not ErrBodyTimeout", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context did not end when the client went away")
	}
}
