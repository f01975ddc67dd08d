package bindings

import (
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestTable(t *testing.T) {
	a := netip.MustParseAddr
	now := time.Unix(1000, 0)
	tb := NewTable(2)
	tb.Record("a.example", []netip.Addr{a("192.0.2.1"), a("192.0.2.2")}, time.Minute, now)
	tb.Record("b.example", []netip.Addr{a("::ffff:192.0.2.1")}, 2*time.Minute, now)
	for _, tc := range []struct {
		name string
		addr netip.Addr
		at   time.Duration
		want bool
	}{
		{"a.example", a("192.0.2.1"), 0, true},
		{"a.example", a("192.0.2.2"), 59 * time.Second, true},
		{"a.example", a("192.0.2.2"), time.Minute, false},
		{"a.example", a("192.0.2.3"), 0, false},
		{"b.example", a("192.0.2.1"), 90 * time.Second, true},
		{"c.example", a("192.0.2.1"), 0, false},
	} {
		if got := tb.Has(tc.name, tc.addr, now.Add(tc.at)); got != tc.want {
			t.Errorf("Has(%s, %s, +%v) = %v", tc.name, tc.addr, tc.at, got)
		}
	}
	names := tb.Names(a("192.0.2.1"), now)
	slices.Sort(names)
	if !slices.Equal(names, []string{"a.example", "b.example"}) {
		t.Fatalf("Names = %v", names)
	}
	if got := tb.Names(a("192.0.2.1"), now.Add(90*time.Second)); !slices.Equal(got, []string{"b.example"}) {
		t.Fatalf("Names later = %v", got)
	}
	// A shorter TTL never shortens a binding.
	tb.Record("a.example", []netip.Addr{a("192.0.2.1")}, time.Second, now)
	if !tb.Has("a.example", a("192.0.2.1"), now.Add(30*time.Second)) {
		t.Fatal("binding shortened")
	}
	// Full: the name expiring first goes.
	tb.Record("c.example", []netip.Addr{a("192.0.2.9")}, time.Hour, now)
	if tb.Len() != 2 || tb.Evicted() != 1 || tb.Has("a.example", a("192.0.2.1"), now) {
		t.Fatalf("len %d evicted %d", tb.Len(), tb.Evicted())
	}
	// Expired names are swept before anything live is evicted.
	tb.Record("d.example", []netip.Addr{a("192.0.2.10")}, time.Hour, now.Add(3*time.Minute))
	if tb.Evicted() != 1 || !tb.Has("c.example", a("192.0.2.9"), now.Add(3*time.Minute)) {
		t.Fatalf("evicted %d", tb.Evicted())
	}
	if got := tb.Addrs("c.example", now); !slices.Equal(got, []netip.Addr{a("192.0.2.9")}) {
		t.Fatalf("Addrs = %v", got)
	}
}

func TestTableConcurrent(t *testing.T) {
	tb := NewTable(16)
	now := time.Now()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 200 {
				addr := netip.AddrFrom4([4]byte{192, 0, 2, byte(j)})
				name := string(rune('a'+i)) + ".example"
				tb.Record(name, []netip.Addr{addr}, time.Minute, now)
				tb.Has(name, addr, now)
				tb.Names(addr, now)
			}
		}()
	}
	wg.Wait()
	if tb.Len() > 16 {
		t.Fatal("over capacity")
	}
}

// An answer of thousands of addresses binds the first MaxAddrsPerName; the rest are counted.
func TestTableAddrsPerName(t *testing.T) {
	now := time.Unix(1000, 0)
	tb := NewTable(8)
	var addrs []netip.Addr
	for i := range 4000 {
		addrs = append(addrs, netip.AddrFrom4([4]byte{198, 51, byte(i >> 8), byte(i)}))
	}
	tb.Record("many.example", addrs, time.Hour, now)
	if got := len(tb.Addrs("many.example", now)); got != MaxAddrsPerName {
		t.Fatalf("%d addresses bound, want %d", got, MaxAddrsPerName)
	}
	if tb.Dropped() != uint64(4000-MaxAddrsPerName) {
		t.Fatalf("dropped %d", tb.Dropped())
	}
	if !tb.Has("many.example", addrs[0], now) || tb.Has("many.example", addrs[3999], now) {
		t.Fatal("the first addresses must be the bound ones")
	}
	// A later answer refreshes the bound ones and still adds nothing beyond the bound.
	tb.Record("many.example", addrs[:MaxAddrsPerName+5], 2*time.Hour, now)
	if !tb.Has("many.example", addrs[0], now.Add(90*time.Minute)) || len(tb.Addrs("many.example", now)) != MaxAddrsPerName {
		t.Fatal("refresh")
	}
}
