package nftrules

import (
	"net/netip"
	"testing"
)

func TestDeniedElements(t *testing.T) {
	// IPv4: 0/8, 10/8, 100.64/10, 127/8, 169.254/16, 172.16/12, 192.0.0/24, 192.168/16 and
	// 224/4 + 240/4 merged into one range that runs to the end (no end element).
	v4 := deniedElements(false)
	if len(v4) != 8*2+1 {
		t.Fatalf("%d IPv4 elements: %v", len(v4), v4)
	}
	first, last := v4[0], v4[len(v4)-1]
	if netip.AddrFrom4([4]byte(first.Key)) != netip.MustParseAddr("0.0.0.0") || first.IntervalEnd {
		t.Errorf("first element %v", first)
	}
	if end := v4[1]; netip.AddrFrom4([4]byte(end.Key)) != netip.MustParseAddr("1.0.0.0") || !end.IntervalEnd {
		t.Errorf("end of 0.0.0.0/8: %v", end)
	}
	if netip.AddrFrom4([4]byte(last.Key)) != netip.MustParseAddr("224.0.0.0") || last.IntervalEnd {
		t.Errorf("last element %v", last)
	}
	// IPv6: ::/96 (holding ::/127) and ::ffff:0:0/96 stay apart; fe80::/10, fec0::/10 and ff00::/8 merge and run
	// to the end.
	v6 := deniedElements(true)
	// ::/127 lies inside ::/96: one range, :: up to ::1:0:0.
	if len(v6) < 2 || netip.AddrFrom16([16]byte(v6[0].Key)) != netip.MustParseAddr("::") || v6[0].IntervalEnd ||
		netip.AddrFrom16([16]byte(v6[1].Key)) != netip.MustParseAddr("::1:0:0") || !v6[1].IntervalEnd {
		t.Errorf("first IPv6 range %v", v6[:min(2, len(v6))])
	}
	last = v6[len(v6)-1]
	if netip.AddrFrom16([16]byte(last.Key)) != netip.MustParseAddr("fe80::") || last.IntervalEnd {
		t.Errorf("last IPv6 element %v", last)
	}
	for i := 1; i < len(v6); i++ {
		a, b := netip.AddrFrom16([16]byte(v6[i-1].Key)), netip.AddrFrom16([16]byte(v6[i].Key))
		if !a.Less(b) || v6[i-1].IntervalEnd == v6[i].IntervalEnd {
			t.Errorf("elements %d and %d out of order or not alternating: %v %v", i-1, i, v6[i-1], v6[i])
		}
	}
}
