package runtimetest

import (
	"bufio"
	"crypto/rand"
	"fmt"
	"net"
	"net/netip"
	"os"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/egress/sandboxnet"
	"github.com/airlockdev/airlock/internal/runtime"
)

// testCACert is a stand-in for the deployment CA's certificate: the runtime
// copies it without parsing it.
const testCACert = "-----BEGIN CERTIFICATE-----\nMIIBairlocktestcertificate\n-----END CERTIFICATE-----\n"

// testPreparedNetwork gives a sandbox a network made by sandboxnet (its own
// netns with eth0 wired to a host veth): the guest sees eth0 with its
// address and a default route, its /etc/resolv.conf names the gateway, the
// CA is in its trust store (read-only), and it reaches a listener on the
// host end. Delete leaves the netns to its owner: the network is detached
// afterwards and nothing of it remains. (Filtering is nftables' job, tested
// with the server.)
func testPreparedNetwork(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	if !rt.Info().Capabilities.Has(runtime.CapNetwork) {
		t.Skipf("%s does not claim %s", rt.Info().Name, runtime.CapNetwork)
	}
	spec := s.spec(defaultResources, nil)
	att := attachNetwork(t, &spec)
	gw := att.HostAddr.Addr()

	// The host end moves into a "host" namespace of the test's own, so
	// the machine's ruleset (an Airlock server's nftables table confines
	// every sandbox veth) never sees the test's traffic.
	ln := hostEndListener(t, att)
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		c, err := ln.AcceptTCP()
		if err != nil {
			got <- "accept: " + err.Error()
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			line += " (" + err.Error() + ")"
		}
		got <- line
		fmt.Fprintf(c, "pong\n")
	}()

	s.started(t, rt, spec)
	c := client(t, rt, spec.ID)
	addrs := sh(t, c, "ip -4 addr show dev eth0")
	if !strings.Contains(addrs, "inet "+att.GuestAddr.String()) {
		t.Errorf("eth0 addresses:\n%s\nwant %s", addrs, att.GuestAddr)
	}
	if routes := sh(t, c, "ip -4 route"); !strings.Contains(routes, "default via "+gw.String()) {
		t.Errorf("routes:\n%s\nwant default via %s", routes, gw)
	}
	if rc := sh(t, c, "cat /etc/resolv.conf"); !strings.Contains(rc, "nameserver "+gw.String()+"\n") || strings.Count(rc, "nameserver") != 1 {
		t.Errorf("/etc/resolv.conf:\n%s\nwant only nameserver %s", rc, gw)
	}
	if ca := sh(t, c, "cat /etc/airlock/ca.crt"); ca != testCACert {
		t.Errorf("/etc/airlock/ca.crt = %q", ca)
	}
	if b := sh(t, c, "cat /etc/ssl/certs/ca-certificates.crt"); !strings.HasSuffix(b, testCACert) {
		t.Errorf("the CA bundle does not end with the CA: %q", b)
	}
	if isVM(rt) {
		// Guest root holds every capability of its own kernel: it could
		// undo any read-only mount, so none is promised.
		t.Log("a VM's trust store and resolv.conf are not checked read-only")
	} else if res := run(t, c, "sh", "-c", "echo x >> /etc/ssl/certs/ca-certificates.crt || exit 3; echo y >> /etc/resolv.conf || exit 3"); res.ExitCode != 3 {
		t.Errorf("the guest could write its trust store or resolv.conf (exit %d)", res.ExitCode)
	}
	out := sh(t, c, fmt.Sprintf("echo ping | nc -w 10 %s %d", gw, ln.Addr().(*net.TCPAddr).Port))
	select {
	case line := <-got:
		if line != "ping\n" {
			t.Errorf("the host end received %q", line)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the host end received nothing")
	}
	if strings.TrimSpace(out) != "pong" {
		t.Errorf("the guest received %q", out)
	}
}

// hostEndListener moves the attachment's host end into a network
// namespace the test makes (destroyed at cleanup), configures it there as
// sandboxnet had, and returns a TCP listener on its address in that
// namespace.
func hostEndListener(t *testing.T, a sandboxnet.Attachment) *net.TCPListener {
	t.Helper()
	type result struct {
		f   *os.File
		ln  *net.TCPListener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// Never unlocked: the thread leaves with the goroutine, so its
		// namespace cannot leak into other goroutines.
		goruntime.LockOSThread()
		var r result
		defer func() { ch <- r }()
		hostNs, err := netns.Get()
		if err != nil {
			r.err = err
			return
		}
		defer hostNs.Close()
		if r.err = unix.Unshare(unix.CLONE_NEWNET); r.err != nil {
			return
		}
		if r.f, r.err = os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())); r.err != nil {
			return
		}
		h, err := netlink.NewHandleAt(netns.NsHandle(r.f.Fd()))
		if err != nil {
			r.err = err
			return
		}
		defer h.Close()
		// Moved by the host's handle (the host end is in the host netns).
		host, err := netlink.NewHandleAt(hostNs)
		if err != nil {
			r.err = err
			return
		}
		defer host.Close()
		l, err := host.LinkByName(a.HostIf)
		if err != nil {
			r.err = err
			return
		}
		if r.err = host.LinkSetNsFd(l, int(r.f.Fd())); r.err != nil {
			return
		}
		if l, r.err = h.LinkByName(a.HostIf); r.err != nil {
			return
		}
		ipn := &net.IPNet{IP: a.HostAddr.Addr().AsSlice(), Mask: net.CIDRMask(a.HostAddr.Bits(), 32)}
		if r.err = h.AddrAdd(l, &netlink.Addr{IPNet: ipn}); r.err != nil {
			return
		}
		if r.err = h.LinkSetUp(l); r.err != nil {
			return
		}
		r.ln, r.err = net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(netip.AddrPortFrom(a.HostAddr.Addr(), 0)))
	}()
	r := <-ch
	if r.f != nil {
		t.Cleanup(func() { r.f.Close() })
	}
	if r.err != nil {
		t.Fatalf("move the host end into the test's namespace: %v", r.err)
	}
	return r.ln
}

// testPool returns a sandbox network pool of its own for the test, in a
// random /28 of 10.252.0.0/16 (the daemon's default pool stays untouched).
func testPool(t *testing.T) (*sandboxnet.Pool, netip.Prefix) {
	t.Helper()
	for range 20 {
		var b [2]byte
		rand.Read(b[:])
		prefix := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 252, b[0], b[1] &^ 0x0f}), 28)
		pool, err := sandboxnet.NewPool(prefix, t.TempDir())
		if err == nil {
			return pool, prefix
		}
		t.Logf("pool %s: %v", prefix, err)
	}
	t.Fatal("found no free test pool")
	return nil, netip.Prefix{}
}

// assertNoNetwork fails if the attachment's netns file or host veth is left.
func assertNoNetwork(t *testing.T, a sandboxnet.Attachment) {
	t.Helper()
	if _, err := os.Lstat(a.NetnsPath); err == nil {
		t.Errorf("netns %s left", a.NetnsPath)
	}
	if _, err := netlink.LinkByName(a.HostIf); err == nil {
		t.Errorf("veth %s left", a.HostIf)
	}
}
