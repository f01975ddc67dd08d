package agent_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agent"
	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
)

// TestReleaseListenerRequest: the host's POST /v1/listener/release (what
// replaced SIGUSR1, which the workload could send too) answers and then
// lets go of the socket; the host's trigger file brings it back. An agent
// serving no Unix socket says not_supported.
func TestReleaseListenerRequest(t *testing.T) {
	srv, err := agent.New(agent.Options{Env: []string{"PATH=/usr/bin:/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	dir := filepath.Join(t.TempDir(), "run")
	sock := filepath.Join(dir, "agent.sock")
	ln, err := agent.Listen(agentproto.ListenAddr{Scheme: agentproto.SchemeUnix, Path: sock}, agent.ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	newClient := func() *agentclient.Client {
		c := agentclient.New(func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}, nil)
		t.Cleanup(func() { c.Close() })
		return c
	}
	c := newClient()
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	if _, err := c.Info(rctx); err != nil {
		t.Fatal(err)
	}
	if err := c.ReleaseListener(rctx); err != nil {
		t.Fatalf("ReleaseListener: %v", err)
	}
	// The socket goes once the asking connection is closed (the host
	// closes it having read the answer), not before: then the agent holds
	// no connection of the host's.
	if _, err := os.Lstat(sock); err != nil {
		t.Fatalf("socket while the asking connection is open: %v", err)
	}
	closed := time.Now()
	c.Close()
	for {
		if _, err := os.Lstat(sock); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Since(closed) > time.Second {
			t.Fatal("the socket is still there a second after the host closed its connection")
		}
		time.Sleep(time.Millisecond)
	}
	short, scancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer scancel()
	if _, err := newClient().Info(short); err == nil {
		t.Fatal("a released agent answered")
	}
	if err := os.WriteFile(filepath.Join(dir, agentproto.RelistenTrigger), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ictx, icancel := context.WithTimeout(context.Background(), time.Second)
		_, err := newClient().Info(ictx)
		icancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not listen again after the trigger: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}

}

// TestReleaseListenerNotSupported: an agent that serves only connections
// handed to it (ServeConn: a VM's serial port) has nothing to release.
func TestReleaseListenerNotSupported(t *testing.T) {
	srv, err := agent.New(agent.Options{Env: []string{"PATH=/usr/bin:/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	c := pipeClient(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var aerr *agentclient.Error
	if err := c.ReleaseListener(ctx); !errors.As(err, &aerr) || aerr.Code != agentproto.CodeNotSupported {
		t.Fatalf("ReleaseListener without a Unix listener = %v, want not_supported", err)
	}
	if _, err := c.Info(ctx); err != nil {
		t.Fatalf("the agent after a refused release: %v", err)
	}
}
