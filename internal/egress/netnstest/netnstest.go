// Package netnstest gives tests network namespaces of their own, so that network tests touch
// nothing of the machine's: a namespace is held only by an open file, and closing it at
// cleanup lets the kernel destroy it with everything in it (veths, addresses, routes,
// nftables tables).
package netnstest

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

// Netns is a network namespace a test made.
type Netns struct {
	// F holds the namespace (/proc/<tid>/ns/net); pass it to children as an extra file to
	// name the namespace (e.g. `ip link … netns /proc/self/fd/3`).
	F *os.File
}

// New makes a fresh network namespace, closed at the test's cleanup, or skips the test when
// this process may not make one.
func New(t testing.TB) *Netns {
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
	ns := &Netns{F: r.f}
	t.Cleanup(func() { ns.F.Close() })
	return ns
}

// Do runs fn on a thread that has entered the namespace. Sockets fn opens stay in the
// namespace and may be used from anywhere afterwards.
func (ns *Netns) Do(t testing.TB, fn func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked, see New
		if err := unix.Setns(int(ns.F.Fd()), unix.CLONE_NEWNET); err != nil {
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

// IP runs iproute2's ip inside the namespace (a child forked from a thread inherits its
// namespace); extra files become the child's fd 3, 4, ...
func (ns *Netns) IP(t testing.TB, extra []*os.File, args ...string) {
	t.Helper()
	var out []byte
	var err error
	ns.Do(t, func() {
		cmd := exec.Command("ip", args...)
		cmd.ExtraFiles = extra
		out, err = cmd.CombinedOutput()
	})
	if err != nil {
		t.Fatalf("ip %v: %v: %s", args, err, out)
	}
}

// Conn is an nftables connection bound to the namespace.
func (ns *Netns) Conn(t testing.TB) *nftables.Conn {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns.F.Fd())))
	if err != nil {
		t.Fatalf("nftables conn: %v", err)
	}
	return c
}
