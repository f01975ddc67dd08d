package bench

import (
	"context"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/egress/fakenet"
)

// TestEgressProbe runs the probe against the fake internet from its host
// namespace (the benchmark's direct baseline), over HTTP and HTTPS.
func TestEgressProbe(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	n, err := fakenet.New(fakenet.Config{Zone: fakenet.NewZone(map[string]fakenet.Record{
		"probe.example": {Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.10")}},
	})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	resolver := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return n.DialHost(ctx, network, netip.AddrPortFrom(fakenet.DNSAddr, 53).String())
	}}
	pn := probeNet{dial: n.DialHost, resolver: resolver}
	for _, tc := range []struct {
		name string
		cfg  EgressProbeConfig
		err  bool
	}{
		{"https", EgressProbeConfig{Name: "probe.example", Port: 443, Runs: 5, Download: 1 << 20}, false},
		{"http", EgressProbeConfig{Name: "probe.example", Port: 80, Runs: 3, Download: 1 << 20}, false},
		{"unknown name", EgressProbeConfig{Name: "nope.example", Port: 443, Runs: 1}, true},
		{"bad port", EgressProbeConfig{Name: "probe.example", Port: 22, Runs: 1}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := runEgressProbe(ctx, pn, tc.cfg)
			if tc.err {
				if err == nil {
					t.Fatal("no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(res.ConnectNs) != tc.cfg.Runs || res.DownloadBytes != tc.cfg.Download || res.DownloadNs <= 0 {
				t.Fatalf("result %+v", res)
			}
		})
	}
	if got := len(n.RequestsTo(netip.MustParseAddr("192.0.2.10"))); got != 5+1+3+1 {
		t.Errorf("the fake server saw %d requests, want 10", got)
	}
}
