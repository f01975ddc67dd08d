package nftrules

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

// netns is a network namespace the test made, held only by an open file: closing it (at cleanup)
// lets the kernel destroy the namespace with everything in it (veths, rules, sockets' routes).
type netns struct{ f *os.File }

// newNetns makes a fresh network namespace, or skips the test when this process may not.
func newNetns(t *testing.T) *netns {
	t.Helper()
	type result struct {
		f   *os.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread is never unlocked: it exits with the goroutine, so its changed namespace
		// cannot leak into other goroutines.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ch <- result{err: err}
			return
		}
		f, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		ch <- result{f, err}
	}()
	r := <-ch
	if errors.Is(r.err, unix.EPERM) {
		t.Skipf("needs CAP_NET_ADMIN (and CAP_SYS_ADMIN) to make a network namespace: %v", r.err)
	}
	if r.err != nil {
		t.Fatalf("new network namespace: %v", r.err)
	}
	ns := &netns{r.f}
	t.Cleanup(func() { ns.f.Close() })
	return ns
}

// do runs fn on a thread that has entered the namespace. Sockets fn opens stay in the namespace
// and may be used from anywhere afterwards.
func (ns *netns) do(t *testing.T, fn func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked, see newNetns
		if err := unix.Setns(int(ns.f.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- err
			return
		}
		defer func() { done <- nil }()
		fn()
	}()
	if err := <-done; err != nil {
		t.Fatalf("setns: %v", err)
	}
}

// ip runs iproute2's ip inside the namespace (a child forked from a thread inherits its
// namespace); extra files become the child's fd 3, 4, ...
func (ns *netns) ip(t *testing.T, extra []*os.File, args ...string) {
	t.Helper()
	var out []byte
	var err error
	ns.do(t, func() {
		cmd := exec.Command("ip", args...)
		cmd.ExtraFiles = extra
		out, err = cmd.CombinedOutput()
	})
	if err != nil {
		t.Fatalf("ip %v: %v: %s", args, err, out)
	}
}

// conn is an nftables connection bound to the namespace.
func (ns *netns) conn(t *testing.T) *nftables.Conn {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns.f.Fd())))
	if err != nil {
		t.Fatalf("nftables conn: %v", err)
	}
	return c
}
