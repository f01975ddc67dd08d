package server

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/egress/netnstest"
	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/egress/sandboxnet"
)

func TestParseEgressOptions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    Options
		want    egressConfig
		wantErr bool
	}{
		{"defaults", Options{EgressUpstreamDNS: "192.0.2.53"}, egressConfig{
			pool: sandboxnet.DefaultPrefix, defaultPolicy: policy.Public, upstreamDNS: netip.MustParseAddrPort("192.0.2.53:53"),
			proxyPort: DefaultEgressProxyPort, resolverPort: DefaultEgressResolverPort}, false},
		{"everything", Options{EgressPool: netip.MustParsePrefix("10.99.0.0/24"), EgressDefault: "none", EgressUpstreamDNS: "[2001:db8::53]:5353",
			EgressProxyPort: 1234, EgressResolverPort: -1}, egressConfig{
			pool: netip.MustParsePrefix("10.99.0.0/24"), defaultPolicy: policy.None, upstreamDNS: netip.MustParseAddrPort("[2001:db8::53]:5353"),
			proxyPort: 1234, resolverPort: 0}, false},
		{"bad default", Options{EgressDefault: "all", EgressUpstreamDNS: "192.0.2.53"}, egressConfig{}, true},
		{"bad dns", Options{EgressUpstreamDNS: "dns.example"}, egressConfig{}, true},
		{"bad port", Options{EgressUpstreamDNS: "192.0.2.53", EgressProxyPort: 70000}, egressConfig{}, true},
		{"same ports", Options{EgressUpstreamDNS: "192.0.2.53", EgressProxyPort: 5000, EgressResolverPort: 5000}, egressConfig{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseEgressOptions(tc.opts)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err == nil && got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestResolvConfNameserver(t *testing.T) {
	for _, tc := range []struct {
		name, conf, want string
	}{
		{"first", "# c\nsearch example\nnameserver 192.0.2.1\nnameserver 192.0.2.2\n", "192.0.2.1:53"},
		{"skips garbage", "nameserver bogus\nnameserver 2001:db8::1\n", "[2001:db8::1]:53"},
		{"zone dropped", "nameserver fe80::1%eth0\n", "[fe80::1]:53"},
		{"none", "search example\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "resolv.conf")
			if err := os.WriteFile(path, []byte(tc.conf), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := resolvConfNameserver(path)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("got %v, want an error", got)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Fatalf("got %v, %v; want %s", got, err, tc.want)
			}
		})
	}
}

func FuzzParseDNSServer(f *testing.F) {
	for _, s := range []string{"192.0.2.1", "192.0.2.1:5353", "[2001:db8::1]:53", "2001:db8::1", "[::1]", "", "host:53"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ap, err := parseDNSServer(s)
		if err != nil {
			return
		}
		if !ap.IsValid() {
			t.Fatalf("parseDNSServer(%q) = invalid %v without error", s, ap)
		}
		again, err := parseDNSServer(ap.String())
		if err != nil || again != ap {
			t.Fatalf("round trip of %q: %v → %v, %v", s, ap, again, err)
		}
	})
}

func TestHostAddrCacheDenied(t *testing.T) {
	host := &hostAddrCache{}
	denied := host.deniedWith(netip.MustParsePrefix("10.213.0.0/16"))
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"10.213.4.2", true},
		{"127.0.0.1", true},
		{"::ffff:10.213.0.1", true},
		{"203.0.113.7", false},
	} {
		if got := denied(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.addr, got, tc.want)
		}
	}
	own, _ := host.get()
	if len(own) == 0 {
		t.Fatal("no host address listed")
	}
	for a := range own {
		if !denied(a) {
			t.Errorf("the host's own address %s is not denied", a)
		}
	}
}

// One server per network namespace owns its egress; a second is refused with a clear error,
// and the claim is free again once released.
func TestClaimEgress(t *testing.T) {
	ns := netnstest.New(t)
	ns.Do(t, func() {
		first, err := claimEgress()
		if err != nil {
			t.Errorf("first claim: %v", err)
			return
		}
		if second, err := claimEgress(); err == nil {
			second.Close()
			t.Error("a second claim in one network namespace succeeded")
		} else if !strings.Contains(err.Error(), "another airlock server") {
			t.Errorf("second claim: %v", err)
		}
		first.Close()
		if left, _ := filepath.Glob(filepath.Join(egressClaimDir, "egress-net-*.lock")); len(left) > 0 {
			var st unix.Stat_t
			if err := unix.Stat("/proc/thread-self/ns/net", &st); err == nil {
				for _, l := range left {
					if strings.HasSuffix(l, fmt.Sprintf("-%d.lock", st.Ino)) {
						t.Errorf("the released claim left its lock file %s", l)
					}
				}
			}
		}
		again, err := claimEgress()
		if err != nil {
			t.Errorf("claim after release: %v", err)
			return
		}
		again.Close()
	})
}
