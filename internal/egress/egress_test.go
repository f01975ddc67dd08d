package egress

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
)

func compile(t *testing.T, js string) *policy.Policy {
	t.Helper()
	s, err := policy.ParseSpec([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(s, nil, policy.Public)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDecide(t *testing.T) {
	a := netip.MustParseAddr
	now := time.Unix(5000, 0)
	host := a("192.0.2.200")
	reg := NewRegistry(RegistryConfig{Now: func() time.Time { return now }, Denied: func(x netip.Addr) bool { return x == host }})
	id := model.SandboxID("sbx_test")
	sb := reg.Add(id, a("10.213.0.2"), compile(t, `{"default":"none","allow":["ok.example","shared.example","198.51.100.0/24:22"]}`))
	if got, ok := reg.BySource(a("::ffff:10.213.0.2")); !ok || got != sb {
		t.Fatal("BySource")
	}
	sb.Bindings.Record("ok.example", []netip.Addr{a("203.0.113.10")}, time.Minute, now)
	sb.Bindings.Record("shared.example", []netip.Addr{a("203.0.113.20")}, time.Minute, now)
	sb.Bindings.Record("blocked.example", []netip.Addr{a("203.0.113.20")}, time.Minute, now)
	for _, tc := range []struct {
		name string
		host string
		addr netip.Addr
		port uint16
		want bool
		rule string
	}{
		{"resolve allowed", "ok.example", netip.Addr{}, 0, true, "allow ok.example"},
		{"resolve denied", "blocked.example", netip.Addr{}, 0, false, "default none"},
		{"bound", "ok.example", a("203.0.113.10"), 443, true, "allow ok.example"},
		{"not bound (spoofed address)", "ok.example", a("203.0.113.99"), 443, false, "no-binding"},
		{"blocked name on shared address", "blocked.example", a("203.0.113.20"), 443, false, "default none"},
		{"host address", "ok.example", host, 443, false, "always-denied"},
		{"metadata", "ok.example", a("169.254.169.254"), 80, false, "always-denied"},
		{"cidr", "", a("198.51.100.1"), 22, true, "allow 198.51.100.0/24:22"},
		{"bare address", "", a("203.0.113.10"), 443, false, "no-address-rule"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := sb.Decide("connect", tc.host, tc.addr, tc.port)
			if d.Allowed != tc.want || d.Rule != tc.rule {
				t.Fatalf("got %+v", d)
			}
		})
	}
	if ev, _ := sb.Log.Since(0); len(ev) != 9 || ev[3].Rule != "no-binding" || ev[3].Addr != "203.0.113.99" {
		t.Fatalf("log: %+v", ev)
	}
	// By address: an allowed name bound to it opens only the ports a rule names with it, and a
	// blocked name on the same address opens nothing.
	if d, _ := sb.DecideAddr("connect", a("203.0.113.20"), 8080); d.Allowed || d.Rule != "no-port-rule" {
		t.Fatalf("DecideAddr shared, port no rule names: %+v", d)
	}
	sb.SetPolicy(compile(t, `{"default":"none","allow":["ok.example","shared.example","shared.example:8080","198.51.100.0/24:22"]}`))
	if d, name := sb.DecideAddr("connect", a("203.0.113.20"), 8080); !d.Allowed || name != "shared.example" {
		t.Fatalf("DecideAddr shared: %+v %q", d, name)
	}
	if d, _ := sb.DecideAddr("connect", a("203.0.113.20"), 8443); d.Allowed {
		t.Fatalf("DecideAddr shared, other port: %+v", d)
	}
	if d, _ := sb.DecideAddr("connect", a("203.0.113.30"), 8080); d.Allowed {
		t.Fatalf("DecideAddr unbound: %+v", d)
	}
	if d := sb.Explain("ok.example", netip.Addr{}, 443); !d.Allowed {
		t.Fatalf("explain: %+v", d)
	}
}

func TestTrackAndCut(t *testing.T) {
	a := netip.MustParseAddr
	reg := NewRegistry(RegistryConfig{MaxConnsPerSandbox: 2})
	sb := reg.Add("sbx_cut", a("10.213.0.6"), compile(t, `{"allow":["a.example"]}`))
	closed := map[string]bool{}
	mk := func(host string) Conn {
		return Conn{Host: host, Addr: a("203.0.113.1"), Port: 443, Close: func() error { closed[host] = true; return nil }}
	}
	rel, err := sb.Track(mk("a.example"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Track(mk("b.example")); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Track(mk("c.example")); !errors.Is(err, ErrTooManyConns) {
		t.Fatalf("limit: %v", err)
	}
	rel()
	rel2, err := sb.Track(mk("a.example"))
	if err != nil {
		t.Fatal(err)
	}
	defer rel2()
	sb.SetPolicy(compile(t, `{"default":"none","allow":["a.example"]}`))
	if !closed["b.example"] || closed["a.example"] || sb.OpenConns() != 1 {
		t.Fatalf("cut: %v, open %d", closed, sb.OpenConns())
	}
	ev, _ := sb.Log.Since(0)
	if last := ev[len(ev)-1]; last.Kind != "cut" || last.Host != "b.example" {
		t.Fatalf("cut event: %+v", last)
	}
	reg.Remove("sbx_cut")
	if !closed["a.example"] {
		t.Fatal("remove did not close")
	}
	if _, ok := reg.BySource(a("10.213.0.6")); ok {
		t.Fatal("still registered")
	}
}
