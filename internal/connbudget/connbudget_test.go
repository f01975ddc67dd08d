package connbudget

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
)

// testServer is an http.Server over a real loopback listener with a
// budget: GET /healthz is anonymous; a request with "Authorization:
// Bearer <project>" is authenticated as that project (as the API does
// after it verified a key).
type testServer struct {
	b    *Budget
	addr string
}

func newTestServer(t *testing.T, cfg Config) *testServer {
	t.Helper()
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			if err := Authenticated(r.Context(), p); err != nil {
				w.Header().Set("Connection", "close")
				w.WriteHeader(http.StatusTooManyRequests)
				_ = json.NewEncoder(w).Encode(apiv1.Error{Code: apiv1.CodeTooManyConnections, Message: err.Error()})
				return
			}
		}
		_, _ = io.WriteString(w, "ok")
	})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second,
		ConnState: b.ConnState, ConnContext: b.ConnContext}
	done := make(chan error, 1)
	ln := b.Listener(inner)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return &testServer{b: b, addr: inner.Addr().String()}
}

// idleConn opens a connection that sends one request (with authz, if set)
// and reads its answer, then idles; it returns the connection and the
// answer's status.
func (s *testServer) idleConn(t *testing.T, authz string) (net.Conn, int) {
	t.Helper()
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	req := "GET /healthz HTTP/1.1\r\nHost: x\r\n"
	if authz != "" {
		req += "Authorization: Bearer " + authz + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return c, 0 // closed before answering
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return c, res.StatusCode
}

// closed reports whether the server closed c (within wait).
func closed(c net.Conn, wait time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err := c.Read(make([]byte, 1))
	return err != nil && !errors.Is(err, net.ErrClosed) && !isTimeout(err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// get makes one request on a new connection (no keep-alive) and returns
// its status and how long it took.
func (s *testServer) get(t *testing.T, authz string) (int, string, time.Duration) {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := http.Client{Transport: tr, Timeout: 10 * time.Second}
	req, _ := http.NewRequest(http.MethodGet, "http://"+s.addr+"/v1/sandboxes", nil)
	if authz != "" {
		req.Header.Set("Authorization", "Bearer "+authz)
	}
	start := time.Now()
	res, err := c.Do(req)
	if err != nil {
		return 0, err.Error(), time.Since(start)
	}
	defer res.Body.Close()
	var e apiv1.Error
	body, _ := io.ReadAll(res.Body)
	_ = json.Unmarshal(body, &e)
	return res.StatusCode, e.Code, time.Since(start)
}

// The attacks of issue 27, scaled down to a budget of 64 connections in
// the same proportions (4,100 idle connections against 4,096): while the
// flood holds its connections open, another project's request is
// answered within a second, and the flood is refused at its cap with
// too_many_connections or has its idle connections closed.
func TestFloodLeavesRoomForOthers(t *testing.T) {
	t.Parallel()
	const max = 64
	tests := []struct {
		name  string
		cfg   Config
		authz string // the flood's credential; "": anonymous
		flood int
		// The flood's connections the server may keep at most.
		keepAtMost int
	}{
		{name: "anonymous idle keep-alives from one address", cfg: Config{Max: max}, flood: max + 4, keepAtMost: max / 4},
		{name: "anonymous idle keep-alives, no per-address cap (many addresses)", cfg: Config{Max: max, PerAddress: -1}, flood: max + 4, keepAtMost: max / 2},
		{name: "one project's idle connections", cfg: Config{Max: max, PerAddress: -1}, authz: "flooder", flood: max + 4, keepAtMost: max / 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newTestServer(t, tc.cfg)
			refused := 0
			var flood []net.Conn
			for range tc.flood {
				c, status := s.idleConn(t, tc.authz)
				flood = append(flood, c)
				if status != http.StatusOK {
					refused++
				}
			}
			open := 0
			for _, c := range flood {
				if !closed(c, 50*time.Millisecond) {
					open++
				}
			}
			if open > tc.keepAtMost {
				t.Errorf("the flood holds %d connections open, want at most %d", open, tc.keepAtMost)
			}
			// Another project gets in, quickly, while the flood holds
			// what it was allowed to keep.
			for i := range 5 {
				status, code, took := s.get(t, "other")
				if status != http.StatusOK || took > time.Second {
					t.Fatalf("another project's request %d during the flood: %d %s after %s (flood: %d refused, %d open)", i, status, code, took, refused, open)
				}
			}
			// So does an anonymous client, during an anonymous flood
			// (the flood's oldest idle connections make room).
			if tc.authz == "" {
				status, code, took := s.get(t, "")
				if status != http.StatusOK || took > time.Second {
					t.Fatalf("an anonymous request during the flood: %d %s after %s", status, code, took)
				}
			}
		})
	}
}

// A project at its cap of connections is refused with too_many_connections
// on the connection that would pass it, which is closed; another project
// is not affected, and a closed connection gives its slot back.
func TestProjectCap(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Config{Max: 64, PerProject: 3, PerAddress: -1})
	var held []net.Conn
	for range 3 {
		c, status := s.idleConn(t, "p")
		if status != http.StatusOK {
			t.Fatalf("connection within the project's cap: %d", status)
		}
		held = append(held, c)
	}
	if status, code, _ := s.get(t, "p"); status != http.StatusTooManyRequests || code != apiv1.CodeTooManyConnections {
		t.Fatalf("a fourth connection of the project: %d %q, want 429 too_many_connections", status, code)
	}
	if status, _, _ := s.get(t, "q"); status != http.StatusOK {
		t.Fatalf("another project: %d", status)
	}
	held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		status, _, _ := s.get(t, "p")
		if status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a closed connection did not give its slot back: %d", status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A connection no credential came on is closed after the short idle
// limit (a fresh one that sends nothing too); an authenticated one stays
// open.
func TestUnauthenticatedIdleLimit(t *testing.T) {
	t.Parallel()
	const idle = 300 * time.Millisecond
	s := newTestServer(t, Config{Max: 64, UnauthenticatedIdle: idle})
	anon, status := s.idleConn(t, "")
	if status != http.StatusOK {
		t.Fatal(status)
	}
	authed, status := s.idleConn(t, "p")
	if status != http.StatusOK {
		t.Fatal(status)
	}
	silent, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	start := time.Now()
	if !closed(anon, 5*time.Second) {
		t.Fatal("an idle unauthenticated connection was not closed")
	}
	if took := time.Since(start); took > idle+2*time.Second {
		t.Fatalf("the idle unauthenticated connection was closed after %s, limit %s", took, idle)
	}
	if !closed(silent, 5*time.Second) {
		t.Fatal("a connection that never sent a request was not closed")
	}
	if closed(authed, 3*idle) {
		t.Fatal("an idle authenticated connection was closed at the unauthenticated limit")
	}
	if c := s.b.Counts(); c.Total != 1 || c.Unauthenticated != 0 || c.ByProject["p"] != 1 {
		t.Fatalf("counts after the idle closes: %+v", c)
	}
}

// The per-address cap: an address at its cap with no idle unauthenticated
// connection to give up is refused with a JSON 429; its count falls back
// as connections close.
func TestPerAddressCap(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Config{Max: 64, PerAddress: 2, PerProject: 64})
	a, _ := s.idleConn(t, "p")
	b, _ := s.idleConn(t, "p")
	status, code, _ := s.get(t, "p")
	if status != http.StatusTooManyRequests || code != apiv1.CodeTooManyConnections {
		t.Fatalf("a third connection from the address: %d %q, want 429 too_many_connections", status, code)
	}
	a.Close()
	b.Close()
	deadline := time.Now().Add(5 * time.Second)
	for s.b.Counts().Total != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("counts after the closes: %+v", s.b.Counts())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if status, _, _ := s.get(t, "p"); status != http.StatusOK {
		t.Fatalf("after the closes: %d", status)
	}
}

// A brand-new connection gets a moment to send its first request before
// it may be closed to make room: a flood of new connections does not
// close a client's connection before its request.
func TestNewConnectionGrace(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Config{Max: 8, PerAddress: -1, Unauthenticated: 1})
	first, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	waitCount(t, s.b, 1)
	// The unauthenticated share is full with a fresh connection: the next
	// is refused rather than closing the fresh one.
	if status, code, _ := s.get(t, ""); status != http.StatusTooManyRequests || code != apiv1.CodeTooManyConnections {
		t.Fatalf("while the only unauthenticated slot is fresh: %d %q", status, code)
	}
	if closed(first, 50*time.Millisecond) {
		t.Fatal("a fresh connection was closed to make room")
	}
	time.Sleep(newGrace)
	if status, _, _ := s.get(t, ""); status != http.StatusOK {
		t.Fatalf("after the grace: %d", status)
	}
	if !closed(first, time.Second) {
		t.Fatal("the connection that sent nothing for the grace was not closed to make room")
	}
}

func waitCount(t *testing.T, b *Budget, total int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for b.Counts().Total != total {
		if time.Now().After(deadline) {
			t.Fatalf("counts %+v, want total %d", b.Counts(), total)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Counts stay exact under concurrent connects, requests and closes.
func TestCountsUnderChurn(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Config{Max: 32, PerAddress: -1, UnauthenticatedIdle: 50 * time.Millisecond})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			for range 20 {
				authz := ""
				if i%2 == 0 {
					authz = fmt.Sprintf("p%d", i%4)
				}
				_, _, _ = s.get(t, authz)
			}
		})
	}
	wg.Wait()
	waitCount(t, s.b, 0)
	if c := s.b.Counts(); c.Unauthenticated != 0 || len(c.ByAddress) != 0 || len(c.ByProject) != 0 {
		t.Fatalf("counts after everything closed: %+v", c)
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      Config
		want    Config
		wantErr bool
	}{
		{in: Config{}, want: Config{Max: 4096, PerAddress: 1024, Unauthenticated: 2048, PerProject: 1024, UnauthenticatedIdle: 5 * time.Second}},
		{in: Config{Max: 64, PerAddress: -1}, want: Config{Max: 64, PerAddress: -1, Unauthenticated: 32, PerProject: 16, UnauthenticatedIdle: 5 * time.Second}},
		{in: Config{Max: 2}, want: Config{Max: 2, PerAddress: 1, Unauthenticated: 1, PerProject: 1, UnauthenticatedIdle: 5 * time.Second}},
		{in: Config{Max: 10, Unauthenticated: 11}, wantErr: true},
		{in: Config{Max: -1}, wantErr: true},
		{in: Config{UnauthenticatedIdle: -time.Second}, wantErr: true},
	}
	for _, tc := range tests {
		got, err := tc.in.withDefaults()
		if (err != nil) != tc.wantErr {
			t.Errorf("%+v: err %v", tc.in, err)
			continue
		}
		if err != nil {
			continue
		}
		got.Logger = nil
		if got != tc.want {
			t.Errorf("%+v: got %+v, want %+v", tc.in, got, tc.want)
		}
	}
}
