package resolver

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/miekg/dns"

	"github.com/airlockdev/airlock/internal/egress"
	"github.com/airlockdev/airlock/internal/egress/netnstest"
	"github.com/airlockdev/airlock/internal/egress/nftrules"
	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
)

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
	host, guestNS := netnstest.New(t), netnstest.New(t)
	hostAddr, guestAddr := netip.MustParseAddr("10.232.0.1"), netip.MustParseAddr("10.232.0.2")
	host.IP(t, nil, "link", "set", "lo", "up")
	host.IP(t, []*os.File{guestNS.F}, "link", "add", hostIf, "type", "veth", "peer", "name", guestIf, "netns", "/proc/self/fd/3")
	host.IP(t, nil, "addr", "add", hostAddr.String()+"/30", "dev", hostIf)
	host.IP(t, nil, "link", "set", hostIf, "up")
	guestNS.IP(t, nil, "link", "set", "lo", "up")
	guestNS.IP(t, nil, "addr", "add", guestAddr.String()+"/30", "dev", guestIf)
	guestNS.IP(t, nil, "link", "set", guestIf, "up")
	guestNS.IP(t, nil, "route", "add", "default", "via", hostAddr.String())

	const resolverPort = 5354
	c, err := nftables.New(nftables.WithNetNSFd(int(host.F.Fd())))
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
	reg := egress.NewRegistry(egress.RegistryConfig{Denied: func(a netip.Addr) bool { return a == hostAddr }})
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
	host.Do(t, func() {
		r, err = New(Config{Listen: fmt.Sprintf("0.0.0.0:%d", resolverPort), Upstream: up.addr, Registry: reg,
			Logger: slog.New(slog.DiscardHandler)})
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
			guestNS.Do(t, func() {
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
