package runtimetest

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// testAgentSocketSymlinkRefused plays a hostile guest: it replaces the agent
// socket in its (host-backed) run directory with a symlink to a Unix socket
// elsewhere on the host. The host must refuse to follow it — otherwise a
// guest could point the server at any socket on the host, such as another
// sandbox's agent.
func testAgentSocketSymlinkRefused(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	spec := s.spec(defaultResources, nil)
	s.started(t, rt, spec)

	// A host socket the guest cannot reach by itself (short path: sun_path).
	dir, err := os.MkdirTemp("", "rtt-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	target := filepath.Join(dir, "victim.sock")
	ln, err := net.Listen("unix", target)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()

	c := client(t, rt, spec.ID)
	// The agent keeps serving connections it already accepted; the planted
	// link only affects new dials.
	sh(t, c, "rm -f /.airlock/run/agent.sock && ln -s "+target+" /.airlock/run/agent.sock && ls -l /.airlock/run/")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := newRuntime(t).DialAgent(ctx, spec.ID)
	if err == nil {
		conn.Close()
		t.Fatal("DialAgent followed a symlink the guest planted")
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("DialAgent kept retrying a planted symlink instead of refusing it: %v", err)
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("the host connected to the symlink's target %d times", n)
	}
}
