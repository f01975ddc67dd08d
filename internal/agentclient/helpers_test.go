package agentclient_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agent"
	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/model"
)

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// newServer starts an in-process agent Server (per-pid waits: it must not
// reap other children of the test binary) and stops it when the test ends.
func newServer(t testing.TB, opts agent.Options) *agent.Server {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t).With("side", "agent")
	}
	if opts.Env == nil {
		opts.Env = []string{"PATH=/usr/bin:/bin", "AGENT_VAR=from-agent", "HOME=/root"}
	}
	if opts.DrainTimeout == 0 {
		opts.DrainTimeout = 500 * time.Millisecond
	}
	srv, err := agent.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return srv
}

// socketPath returns a short socket path (sun_path is 108 bytes).
func socketPath(t testing.TB) string {
	dir, err := os.MkdirTemp("", "agt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "sub", "agent.sock")
}

// connRecorder is a Dialer that remembers every connection it made.
type connRecorder struct {
	mu    sync.Mutex
	conns []net.Conn
	dial  agentclient.Dialer
}

func (r *connRecorder) Dial(ctx context.Context) (net.Conn, error) {
	c, err := r.dial(ctx)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.conns = append(r.conns, c)
	r.mu.Unlock()
	return c, nil
}

func (r *connRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.conns)
}

// closeAll breaks every connection made so far.
func (r *connRecorder) closeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		c.Close()
	}
}

// unixDialer serves srv on a fresh Unix socket and returns a Dialer for it.
func unixDialer(t testing.TB, srv *agent.Server) (*connRecorder, string) {
	t.Helper()
	path := socketPath(t)
	addr, err := agentproto.ParseListenAddr("unix:" + path)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := agent.Listen(addr, agent.ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	rec := &connRecorder{dial: func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}
	return rec, path
}

// pipeDialer serves srv over net.Pipe: every dial makes a new pipe and
// serves its far end.
func pipeDialer(t testing.TB, srv *agent.Server) *connRecorder {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return &connRecorder{dial: func(context.Context) (net.Conn, error) {
		a, b := net.Pipe()
		wg.Add(1)
		go func() {
			defer wg.Done()
			srv.ServeConn(ctx, b)
		}()
		return a, nil
	}}
}

func newClient(t testing.TB, dial agentclient.Dialer) *agentclient.Client {
	c := agentclient.New(dial, testLogger(t).With("side", "host"))
	t.Cleanup(func() { c.Close() })
	return c
}

// transports runs fn once over a Unix socket and once over net.Pipe.
func transports(t *testing.T, opts agent.Options, fn func(t *testing.T, c *agentclient.Client, srv *agent.Server)) {
	t.Run("unix", func(t *testing.T) {
		t.Parallel()
		srv := newServer(t, opts)
		rec, _ := unixDialer(t, srv)
		fn(t, newClient(t, rec.Dial), srv)
	})
	t.Run("pipe", func(t *testing.T) {
		t.Parallel()
		srv := newServer(t, opts)
		fn(t, newClient(t, pipeDialer(t, srv).Dial), srv)
	})
}

func newID() string { return model.NewProcessID().String() }

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func sh(id, script string) agentproto.StartRequest {
	return agentproto.StartRequest{ID: id, Args: []string{"/bin/sh", "-c", script}}
}

// collect reads a stream to its end.
func collect(t testing.TB, s *agentclient.OutputStream) []agentproto.Event {
	t.Helper()
	defer s.Close()
	var evs []agentproto.Event
	for {
		ev, err := s.Next()
		if errors.Is(err, io.EOF) {
			return evs
		}
		if err != nil {
			t.Fatalf("Next after %d events: %v", len(evs), err)
		}
		evs = append(evs, ev)
	}
}

// waitExited polls Status until the process has exited.
func waitExited(t testing.TB, c *agentclient.Client, id string) agentproto.ProcessStatus {
	t.Helper()
	ctx := ctxT(t)
	for {
		st, err := c.Status(ctx, id)
		if err != nil {
			t.Fatalf("Status: %v", err)
		}
		if !st.Running {
			return st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("process %s still running", id)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
