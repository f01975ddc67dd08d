package egress

import (
	"net/netip"
	"testing"

	"github.com/airlockdev/airlock/internal/model"
)

// TestGuestAddr: the guest address follows Add (and a re-Add that moves the
// sandbox) and is gone after Remove.
func TestGuestAddr(t *testing.T) {
	a := netip.MustParseAddr
	reg := NewRegistry(RegistryConfig{})
	id := model.SandboxID("sbx_guest")
	steps := []struct {
		name string
		do   func()
		want netip.Addr
		ok   bool
	}{
		{"unknown", func() {}, netip.Addr{}, false},
		{"added", func() { reg.Add(id, a("::ffff:10.213.0.2"), nil) }, a("10.213.0.2"), true},
		{"moved", func() { reg.Add(id, a("10.213.0.6"), nil) }, a("10.213.0.6"), true},
		{"removed", func() { reg.Remove(id) }, netip.Addr{}, false},
	}
	for _, s := range steps {
		s.do()
		if got, ok := reg.GuestAddr(id); got != s.want || ok != s.ok {
			t.Errorf("%s: GuestAddr = %v, %v; want %v, %v", s.name, got, ok, s.want, s.ok)
		}
	}
}
