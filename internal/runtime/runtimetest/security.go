package runtimetest

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// testAgentSocketSymlinkRefused plays a hostile guest: it replaces the agent
// socket in its (host-backed) run directory with a symlink to a Unix socket
// elsewhere on the host (from the host side, since the guest cannot). The host must refuse to follow it — otherwise a
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
	// The guest cannot change its run directory (the agent sealed it:
	// AgentOutOfWorkloadReach). The host must not depend on that: the link
	// is planted from the host side, as a guest of a runtime without the
	// seal would. The agent keeps serving connections it already accepted;
	// the planted link only affects new dials.
	plant := "rm -f /.airlock/run/agent.sock && ln -s " + target + " /.airlock/run/agent.sock"
	if res := run(t, c, "sh", "-c", plant); res.ExitCode == 0 {
		t.Errorf("the guest replaced its agent's socket with a symlink")
	}
	sock := inspector(t, rt).Artifacts(spec.ID).AgentSocket
	if sock == "" {
		t.Skip("the runtime does not report the host path of the agent's socket")
	}
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, sock); err != nil {
		t.Fatal(err)
	}

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

// testSeccomp checks from inside the sandbox that the guest runs under a
// seccomp filter that refuses, with EPERM, kernel attack surface a sandbox
// does not need (io_uring, keyrings, perf events, bpf, userfaultfd) and new
// user namespaces.
func testSeccomp(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	iso, ok := rt.(Isolation)
	if !ok {
		t.Skipf("%T does not implement runtimetest.Isolation", rt)
	}
	if !iso.SeccompFiltered() {
		t.Skip("this runtime filters the guest's system calls by its own means (gVisor's sentry implements them); there is no host seccomp filter to check from inside")
	}
	spec := s.spec(defaultResources, nil)
	s.started(t, rt, spec)
	c := client(t, rt, spec.ID)

	// Mode 2 is SECCOMP_MODE_FILTER; the agent (pid 1) and what it starts.
	for _, pid := range []string{"self", "1"} {
		out := sh(t, c, "grep '^Seccomp:' /proc/"+pid+"/status")
		if strings.TrimSpace(out) != "Seccomp:\t2" {
			t.Errorf("/proc/%s/status: %q, want \"Seccomp:\\t2\"", pid, out)
		}
	}

	out := sh(t, c, "/"+syscallProbe)
	got := map[string]string{}
	for _, l := range lines(out) {
		name, result, _ := strings.Cut(l, ": ")
		got[name] = result
	}
	var allowed []string
	for _, name := range []string{
		"io_uring_setup", "keyctl", "add_key", "perf_event_open", "bpf", "userfaultfd",
		"unshare(CLONE_NEWUSER)", "clone(CLONE_NEWUSER)",
	} {
		if got[name] != "EPERM" {
			allowed = append(allowed, name+" → "+got[name])
		}
	}
	if len(allowed) > 0 {
		t.Errorf("not refused with EPERM inside the sandbox: %q (probe output:\n%s)", allowed, out)
	}

	res := run(t, c, "unshare", "-U", "true")
	if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "Operation not permitted") {
		t.Errorf("unshare -U true: exit %d, stderr %q; want it refused with EPERM", res.ExitCode, res.Stderr)
	}
}
