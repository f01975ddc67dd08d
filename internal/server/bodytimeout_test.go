package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/api"
	"github.com/airlockdev/airlock/internal/connbudget"
)

// The attacker's side of --max-connections and --body-read-timeout
// together: a client that sends its headers and stalls its body holds a
// connection slot only until the body timeout, after which it gets 408 and
// its connection is closed, and the client waiting in the backlog is
// served.
func TestStalledBodyFreesItsConnection(t *testing.T) {
	const timeout = 300 * time.Millisecond
	a, adminKey := newTestAPI(t, api.Config{BodyReadTimeout: timeout})
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// One slot, and no per-address cap (both clients are on loopback).
	conns, err := connbudget.New(connbudget.Config{Max: 1, PerAddress: -1})
	if err != nil {
		t.Fatal(err)
	}
	ln := conns.Listener(inner)
	srv := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 10 * time.Second, ConnState: conns.ConnState, ConnContext: conns.ConnContext}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	defer func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	}()
	addr := inner.Addr().String()

	attacker, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer attacker.Close()
	_ = attacker.SetDeadline(time.Now().Add(20 * time.Second))
	start := time.Now()
	fmt.Fprintf(attacker, "POST /v1/admin/projects HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"na", adminKey)

	// Once the attacker's request was authenticated, the only slot is
	// taken by an authenticated connection: this client waits in the
	// backlog (a slot held by an unauthenticated one would be refused).
	for c := conns.Counts(); c.Total != 1 || c.Unauthenticated != 0; c = conns.Counts() {
		time.Sleep(time.Millisecond)
	}
	waited := make(chan time.Duration, 1)
	go func() {
		c := http.Client{Timeout: 20 * time.Second}
		res, err := c.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Errorf("healthz: %v", err)
			waited <- 0
			return
		}
		res.Body.Close()
		waited <- time.Since(start)
	}()

	br := bufio.NewReader(attacker)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body) // to the end: the server closes the connection after it
	res.Body.Close()
	if res.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), `"request_timeout"`) {
		t.Fatalf("answer %d %s, want 408 request_timeout", res.StatusCode, body)
	}
	if rest, err := io.ReadAll(br); len(rest) != 0 || err != nil {
		t.Fatalf("after the answer: %q, %v; want the connection closed", rest, err)
	}
	if took := time.Since(start); took < timeout || took > timeout+5*time.Second {
		t.Fatalf("the stalled connection was closed after %s (timeout %s)", took, timeout)
	}
	if w := <-waited; w < timeout || w > timeout+5*time.Second {
		t.Fatalf("the waiting client was served after %s", w)
	}
}
