package policy

import "net/netip"

// AlwaysDeniedPrefixes are the destinations no sandbox may reach, whatever its policy says. Every
// decision checks them first (AlwaysDenied); the proxy and the resolver use the same list for
// their dial and answer checks, and internal/egress/nftrules builds its interval sets "denied4"
// and "denied6" from it, so the kernel's and the proxy's view cannot drift apart.
//
// The list is static. Two more kinds of destination are always denied but depend on the machine
// and are checked by their users, not here: the host's own addresses and other sandboxes' addresses.
//
// Deliberately absent: the documentation ranges (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24,
// 2001:db8::/32) and the benchmarking range 198.18.0.0/15. They are never routed on the internet,
// so they cost nothing to allow, and the tests' fake internet lives in them.
var AlwaysDeniedPrefixes = []netip.Prefix{
	// IPv4
	netip.MustParsePrefix("0.0.0.0/8"),      // "this network" (0.0.0.0 reaches the host itself)
	netip.MustParsePrefix("10.0.0.0/8"),     // RFC 1918
	netip.MustParsePrefix("100.64.0.0/10"),  // CGNAT, RFC 6598
	netip.MustParsePrefix("127.0.0.0/8"),    // loopback
	netip.MustParsePrefix("169.254.0.0/16"), // link-local, cloud metadata (169.254.169.254)
	netip.MustParsePrefix("172.16.0.0/12"),  // RFC 1918
	netip.MustParsePrefix("192.0.0.0/24"),   // IETF protocol assignments
	netip.MustParsePrefix("192.168.0.0/16"), // RFC 1918
	netip.MustParsePrefix("224.0.0.0/4"),    // multicast
	netip.MustParsePrefix("240.0.0.0/4"),    // reserved, incl. broadcast 255.255.255.255
	// IPv6
	netip.MustParsePrefix("::/127"),         // unspecified (::) and loopback (::1)
	netip.MustParsePrefix("::/96"),          // IPv4-compatible (deprecated, RFC 4291): ::a.b.c.d embeds any IPv4 address, private ones included
	netip.MustParsePrefix("::ffff:0:0/96"),  // IPv4-mapped: AlwaysDenied unmaps first; on the wire, always denied
	netip.MustParsePrefix("64:ff9b::/96"),   // NAT64 well-known prefix: would reach any IPv4 address, private ones included
	netip.MustParsePrefix("64:ff9b:1::/48"), // NAT64 local-use prefix
	netip.MustParsePrefix("100::/64"),       // discard-only
	netip.MustParsePrefix("2001::/32"),      // Teredo (RFC 4380): embeds a server's and a client's (obfuscated) IPv4 address
	netip.MustParsePrefix("2002::/16"),      // 6to4 (RFC 3056): 2002:AABB:CCDD:: embeds the IPv4 address A.B.C.D, private ones included
	netip.MustParsePrefix("fc00::/7"),       // unique local
	netip.MustParsePrefix("fe80::/10"),      // link-local
	netip.MustParsePrefix("fec0::/10"),      // site-local (deprecated)
	netip.MustParsePrefix("ff00::/8"),       // multicast
}

// AlwaysDenied reports whether addr is a destination no sandbox may reach (see
// AlwaysDeniedPrefixes). An IPv4-mapped IPv6 address is judged as the IPv4 address it carries; a
// zone is ignored; the zero (invalid) Addr is denied.
func AlwaysDenied(addr netip.Addr) bool {
	if !addr.IsValid() {
		return true
	}
	addr = addr.Unmap().WithZone("")
	for _, p := range AlwaysDeniedPrefixes {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}
