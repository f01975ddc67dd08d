package policy

import "strings"

// KnownDoHResolvers are the names of public DNS-over-HTTPS (and DNS-over-TLS) services. A
// sandbox that reached one could resolve names outside Airlock's resolver, so no binding would
// be recorded and no query logged; worse, a DoH server is a general-purpose tunnel for data
// hidden in queries. The resolver refuses these names and their subdomains whatever the policy
// says (rule "doh-resolver"), and the proxy refuses connections to them by name (IsDoHResolver).
// Port 853 (DNS over TLS) is dropped by nftables and needs no name.
var KnownDoHResolvers = []string{
	"dns.google",
	"dns.google.com",
	"8888.google",
	"cloudflare-dns.com", // also mozilla., security., family., chrome. … subdomains
	"one.one.one.one",
	"1dot1dot1dot1.cloudflare-dns.com",
	"quad9.net", // dns., dns9., dns10., dns11. …
	"doh.opendns.com",
	"dns.opendns.com",
	"doh.familyshield.opendns.com",
	"dns.umbrella.com",
	"nextdns.io", // dns., per-profile subdomains
	"doh.cleanbrowsing.org",
	"dns.adguard.com",
	"dns-unfiltered.adguard.com",
	"adguard-dns.com", // dns., unfiltered., family. …
	"doh.mullvad.net",
	"dns.mullvad.net",
	"doh.dns.sb",
	"dns.alidns.com",
	"doh.pub",
	"dns.twnic.tw",
	"doh.libredns.gr",
	"controld.com", // dns., freedns., per-profile subdomains
	"dns0.eu",
	"doh.ffmuc.net",
	"ordns.he.net",
	"dns.switch.ch",
	"doh.applied-privacy.net",
	"dns.digitale-gesellschaft.ch",
	"odvr.nic.cz",
	"dns.brahma.world",
	"private.canadianshield.cira.ca",
	"doh.xfinity.com",
	"dns.comss.one",
}

// IsDoHResolver reports whether name (any case, with or without its trailing dot) is one of
// KnownDoHResolvers or a subdomain of one.
func IsDoHResolver(name string) bool {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	for _, d := range KnownDoHResolvers {
		if name == d || strings.HasSuffix(name, "."+d) {
			return true
		}
	}
	return false
}
