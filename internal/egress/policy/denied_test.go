package policy

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
