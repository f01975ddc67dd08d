package nftrules

import (
	"net/netip"
	"testing"
)

func TestAlwaysDenied(t *testing.T) {
	for _, tc := range []struct {
		addr   string
		denied bool
	}{
		{"0.0.0.0", true},
		{"10.1.2.3", true},
		{"100.64.0.1", true},
		{"100.127.255.255", true},
		{"100.128.0.0", false},
		{"127.0.0.1", true},
		{"127.255.255.254", true},
		{"169.254.169.254", true}, // cloud metadata
		{"172.16.0.1", true},
		{"172.31.255.255", true},
		{"172.32.0.0", false},
		{"192.0.0.8", true},
		{"192.168.1.1", true},
		{"224.0.0.1", true},
		{"239.255.255.250", true},
		{"255.255.255.255", true},
		{"1.1.1.1", false},
		{"8.8.8.8", false},
		{"203.0.113.5", false}, // TEST-NET-3: the tests' fake internet
		{"198.18.0.1", false},  // benchmarking range: the tests' fake internet
		{"::", true},
		{"::1", true},
		{"::ffff:127.0.0.1", true},
		{"::ffff:10.0.0.1", true},
		{"::ffff:8.8.8.8", false}, // judged as the IPv4 address it carries
		{"64:ff9b::a00:1", true},
		// Transition prefixes that embed an IPv4 address: denied whatever the address.
		{"::a00:1", true},                  // IPv4-compatible 10.0.0.1
		{"::808:808", true},                // IPv4-compatible 8.8.8.8
		{"::1:0:0", false},                 // just past ::/96
		{"2002:a00:1::1", true},            // 6to4 of 10.0.0.1
		{"2002:a9fe:a9fe::1", true},        // 6to4 of 169.254.169.254
		{"2002:808:808::1", true},          // 6to4 of 8.8.8.8
		{"2001:0:4136:e378:8000::1", true}, // Teredo
		{"2001:1::1", false},               // past Teredo's /32
		{"2003::1", false},
		{"fc00::1", true},
		{"fd12:3456::1", true},
		{"fe80::1", true},
		{"fe80::1%eth0", true},
		{"fec0::1", true},
		{"ff02::1", true},
		{"2001:4860:4860::8888", false},
		{"2606:4700::1111", false},
		{"2001:db8::1", false}, // documentation: the tests' fake internet
	} {
		a := netip.MustParseAddr(tc.addr)
		if got := AlwaysDenied(a); got != tc.denied {
			t.Errorf("AlwaysDenied(%s) = %v, want %v", tc.addr, got, tc.denied)
		}
	}
	if !AlwaysDenied(netip.Addr{}) {
		t.Error("the zero Addr must be denied")
	}
}

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
