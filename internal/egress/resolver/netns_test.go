package resolver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/egress"
	"github.com/airlockdev/airlock/internal/egress/nftrules"
	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
)

// netns is a network namespace the test made, held only by an open file: closing it (at
// cleanup) lets the kernel destroy it with everything in it.
type netns struct{ f *os.File }

func newNetns(t *testing.T) *netns {
	t.Helper()
	type result struct {
		f   *os.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with its changed namespace
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ch <- result{err: err}
			return
		}
		f, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		ch <- result{f, err}
	}()
	r := <-ch
	if errors.Is(r.err, unix.EPERM) {
		t.Skipf("needs CAP_NET_ADMIN and CAP_SYS_ADMIN to make a network namespace: %v", r.err)
	}
	if r.err != nil {
		t.Fatalf("new network namespace: %v", r.err)
	}
	ns := &netns{r.f}
	t.Cleanup(func() { ns.f.Close() })
	return ns
}

// do runs fn on a thread inside the namespace; sockets fn opens stay in it.
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

// TestRedirectedSandbox is the production path: a sandbox in its own namespace sends DNS to
// whatever server it likes, Airlock's nftables table (in a "host" namespace the test made)
// redirects it to the resolver, which finds the sandbox by its source address and answers as
// that server. The upstream is the fake one on the test's loopback; no packet leaves the
// machine.
func TestRedirectedSandbox(t *testing.T) {
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2's ip to make the test veth")
	}
	const hostIf, guestIf = "alkrestest-h", "alkrestest-g"
	t.Cleanup(func() {
		// Runs last: the machine's own namespace never saw the veth.
		for _, name := range []string{hostIf, guestIf} {
			if _, err := net.InterfaceByName(name); err == nil {
				t.Errorf("interface %s exists outside the test's namespaces", name)
			}
		}
	})
	host, guestNS := newNetns(t), newNetns(t)
	hostAddr, guestAddr := netip.MustParseAddr("10.232.0.1"), netip.MustParseAddr("10.232.0.2")
	host.ip(t, nil, "link", "set", "lo", "up")
	host.ip(t, []*os.File{guestNS.f}, "link", "add", hostIf, "type", "veth", "peer", "name", guestIf, "netns", "/proc/self/fd/3")
	host.ip(t, nil, "addr", "add", hostAddr.String()+"/30", "dev", hostIf)
	host.ip(t, nil, "link", "set", hostIf, "up")
	guestNS.ip(t, nil, "link", "set", "lo", "up")
	guestNS.ip(t, nil, "addr", "add", guestAddr.String()+"/30", "dev", guestIf)
	guestNS.ip(t, nil, "link", "set", guestIf, "up")
	guestNS.ip(t, nil, "route", "add", "default", "via", hostAddr.String())

	const resolverPort = 5354
	c, err := nftables.New(nftables.WithNetNSFd(int(host.f.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	if err := nftrules.Ensure(c, nftrules.Config{ProxyPort: 8080, ResolverPort: resolverPort}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nftrules.Remove(c) })
	if err := nftrules.AddSandbox(c, hostIf); err != nil {
		t.Fatal(err)
	}

	up := newFakeUpstream(t, zone)
	reg := egress.NewRegistry(egress.RegistryConfig{})
	spec, err := policy.ParseSpec([]byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(spec, nil, policy.Public)
	if err != nil {
		t.Fatal(err)
	}
	sb := reg.Add(model.SandboxID("sbx_netns_test"), guestAddr, p)
	var r *Resolver
	host.do(t, func() {
		r, err = New(Config{Listen: fmt.Sprintf("0.0.0.0:%d", resolverPort), Upstream: up.addr, Registry: reg,
			HostAddrs: func() []netip.Addr { return []netip.Addr{hostAddr} }, Logger: slog.New(slog.DiscardHandler)})
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})

	for _, tc := range []struct {
		server, netw, name string
		rcode              int
	}{
		{"198.51.100.1:53", "udp", "ok.example.", dns.RcodeSuccess},
		{"198.51.100.1:53", "tcp", "ok.example.", dns.RcodeSuccess},
		{"203.0.113.53:53", "udp", "blocked.example.", dns.RcodeRefused},
		{hostAddr.String() + ":53", "udp", "ok.example.", dns.RcodeSuccess},
		{"[2001:db8::53]:53", "udp", "ok.example.", -1}, // no IPv6 route in the guest: an error, nothing leaks
	} {
		t.Run(tc.netw+" "+tc.server+" "+tc.name, func(t *testing.T) {
			m := new(dns.Msg)
			m.SetQuestion(tc.name, dns.TypeA)
			var in *dns.Msg
			var err error
			guestNS.do(t, func() {
				cl := &dns.Client{Net: tc.netw, Timeout: 3 * time.Second}
				in, _, err = cl.Exchange(m, tc.server)
			})
			if tc.rcode < 0 {
				if err == nil {
					t.Fatalf("answered: %v", in)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if in.Rcode != tc.rcode {
				t.Fatalf("rcode %s, want %s", dns.RcodeToString[in.Rcode], dns.RcodeToString[tc.rcode])
			}
		})
	}
	if !sb.Bindings.Has("ok.example", netip.MustParseAddr("203.0.113.10"), time.Now()) {
		t.Error("no binding recorded for the sandbox")
	}
	if up.count("blocked.example") != 0 {
		t.Error("the upstream saw the blocked name")
	}
}
