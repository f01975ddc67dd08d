package server

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
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/api"
	"github.com/airlockdev/airlock/internal/apiv1"
)

// connTestServer is the server's HTTP stack (newConnBudget, newHTTPServer)
// over the real API on a loopback listener, with two projects' keys.
type connTestServer struct {
	addr       string
	keyA, keyB string
}

func newConnTestServer(t *testing.T, opts Options) *connTestServer {
	t.Helper()
	ctx := context.Background()
	a, admin := newTestAPI(t, api.Config{})
	log := slog.New(slog.DiscardHandler)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns, err := newConnBudget(opts, log)
	if err != nil {
		t.Fatal(err)
	}
	srv := newHTTPServer(a.Handler(), conns, ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(conns.Listener(inner)) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	s := &connTestServer{addr: inner.Addr().String()}
	s.keyA = s.projectKey(t, admin, "a")
	s.keyB = s.projectKey(t, admin, "b")
	return s
}

// projectKey makes a project and a member key of it through the admin API.
func (s *connTestServer) projectKey(t *testing.T, admin, name string) string {
	t.Helper()
	var p apiv1.Project
	s.call(t, admin, "POST", "/v1/admin/projects", apiv1.CreateProjectRequest{Name: name}, &p)
	var k struct {
		Token string `json:"token"`
	}
	s.call(t, admin, "POST", "/v1/admin/keys", apiv1.CreateAPIKeyRequest{ProjectID: p.ID, Role: "member"}, &k)
	if k.Token == "" {
		t.Fatal("no key token")
	}
	return k.Token
}

func (s *connTestServer) call(t *testing.T, key, method, path string, in, out any) {
	t.Helper()
	b, _ := json.Marshal(in)
	req, _ := http.NewRequest(method, "http://"+s.addr+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode/100 != 2 {
		body, _ := io.ReadAll(res.Body)
		t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, body)
	}
	if err := json.NewDecoder(res.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}

// holdIdle opens a connection, sends one request on it (authorized with
// key, if set), reads the answer and leaves the connection idle.
func (s *connTestServer) holdIdle(t *testing.T, path, key string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: x\r\n", path)
	if key != "" {
		req += "Authorization: Bearer " + key + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	if res, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	return c
}

// The connection floods of issue 27 through the server's own HTTP stack
// and API, scaled down to --max-connections 64 in the same proportions
// (4,100 idle connections against 4,096): anonymous connections that each
// sent one GET /healthz and idle, and one project's idle connections.
// During each, another project's GET /v1/sandboxes answers within a
// second. Before the connection budget, the flood took every slot and the
// other project's request waited until the flood's connections closed.
func TestConnectionFloodLeavesOthersServed(t *testing.T) {
	t.Parallel()
	const maxConns = 64
	tests := []struct {
		name      string
		path, key func(s *connTestServer) string
	}{
		{name: "anonymous GET /healthz", path: func(*connTestServer) string { return "/healthz" }, key: func(*connTestServer) string { return "" }},
		{name: "one project's GET /v1/sandboxes", path: func(*connTestServer) string { return "/v1/sandboxes" }, key: func(s *connTestServer) string { return s.keyA }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newConnTestServer(t, Options{MaxConnections: maxConns})
			// Each of the attacker's connections waits at most 2 s for its
			// answer (without the fix, those past the budget wait in the
			// backlog).
			for range maxConns + 4 {
				s.holdIdle(t, tc.path(s), tc.key(s))
			}
			for i := range 3 {
				req, _ := http.NewRequest("GET", "http://"+s.addr+"/v1/sandboxes", nil)
				req.Header.Set("Authorization", "Bearer "+s.keyB)
				// From another client address than the flood's (all of
				// 127/8 is loopback).
				dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
				tr := &http.Transport{DisableKeepAlives: true, DialContext: dialer.DialContext}
				start := time.Now()
				res, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
				took := time.Since(start)
				if err != nil {
					t.Fatalf("another project's GET /v1/sandboxes %d during the flood: %v after %s", i, err, took)
				}
				res.Body.Close()
				tr.CloseIdleConnections()
				if res.StatusCode != http.StatusOK || took > time.Second {
					t.Fatalf("another project's GET /v1/sandboxes %d during the flood: %d after %s", i, res.StatusCode, took)
				}
			}
		})
	}
}

// The integration tests, the load tests and `airlock bench` all come from
// loopback, as one address and often one project: the default budget
// serves 200 concurrent clients of one project from 127.0.0.1, each on
// connections of its own, plus anonymous health checks, without a refusal.
func TestDefaultBudgetFitsLoopbackLoad(t *testing.T) {
	t.Parallel()
	const clients, requests = 200, 5
	s := newConnTestServer(t, Options{})
	errs := make(chan error, clients)
	var transports []*http.Transport
	for range clients {
		transports = append(transports, &http.Transport{MaxIdleConnsPerHost: 4})
	}
	defer func() {
		for _, tr := range transports {
			tr.CloseIdleConnections()
		}
	}()
	for i := range clients {
		go func() {
			c := &http.Client{Transport: transports[i], Timeout: 20 * time.Second}
			for j := range requests {
				path, key := "/v1/sandboxes", s.keyA
				if j == 0 && i%10 == 0 {
					path, key = "/healthz", ""
				}
				req, _ := http.NewRequest("GET", "http://"+s.addr+path, nil)
				if key != "" {
					req.Header.Set("Authorization", "Bearer "+key)
				}
				res, err := c.Do(req)
				if err != nil {
					errs <- err
					return
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					errs <- fmt.Errorf("client %d request %d: %d", i, j, res.StatusCode)
					return
				}
			}
			errs <- nil
		}()
	}
	for range clients {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
