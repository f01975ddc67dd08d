// Package resolver is Airlock's DNS server for sandboxes: the only resolver a sandbox can
// reach. nftables redirects every DNS packet a sandbox sends (UDP and TCP port 53, whatever
// address it was sent to) to one host port, where a Resolver listens on both protocols; DNS
// over TLS (853) and every other UDP is dropped by nftables, and public DNS-over-HTTPS
// services are refused by name here and in the proxy (policy.KnownDoHResolvers), so no name leaves a
// sandbox without this package's decision.
//
// Each query is judged in this order, and every refusal is a logged decision (kind "dns") in
// the sandbox's decision log:
//
//  1. The sandbox is found by the packet's source address (egress.Registry.BySource): the guest
//     end of its veth. A packet from an unknown source gets no reply at all (not REFUSED, not
//     FORMERR, not NOTIMP), and nothing in it is looked at: this check comes before every
//     other. Its UDP is dropped before miekg/dns parses it, its TCP connection is closed as
//     soon as it is accepted, and the handler checks again.
//  2. The question: one question of class IN, of a type a sandbox needs (A, AAAA, CNAME, HTTPS,
//     SVCB, MX, TXT, SRV, NS, SOA, CAA; ANY, PTR, NULL, transfers are refused), whose name is a
//     host name (normalized: lower case, no trailing dot, as the policy and the bindings use).
//  3. Exfiltration limits on the name (NameLimits: label and name length, label count, entropy
//     of long labels) and the DoH list: REFUSED whatever the policy says.
//  4. The policy (Sandbox.Decide, which logs): a name it refuses gets REFUSED and is never
//     forwarded, so a blocked zone's authoritative server never sees the query and cannot be
//     used to carry data out.
//  5. The query is forwarded, rebuilt (the guest's EDNS options, such as client subnet, are not
//     passed on), to the configured upstream over UDP, and over TCP when the answer is
//     truncated, with per-attempt and per-query timeouts and a bound on each sandbox's queries
//     in flight.
//  6. The answer is filtered (see Resolver.filter): every name of its CNAME chain must be
//     allowed by the policy too (else REFUSED); A/AAAA records (and SVCB/HTTPS address hints)
//     that point at always-denied addresses (policy.AlwaysDenied), the host's own addresses,
//     the sandbox pool or an address the policy denies are dropped and logged — the defence
//     against DNS rebinding to private addresses; when no address is left the answer is an
//     empty NOERROR. Glue and other extra records are dropped; every record is handed out with
//     the answer's shortest TTL, capped (an hour by default).
//  7. The queried name and every CNAME target are recorded as DNS bindings to the addresses
//     handed out (Sandbox.Bindings), which the proxy requires before it lets a connection by
//     name through to an address. A binding lives at least as long as the guest may cache the
//     answer.
//
// The guest's question is echoed as asked (its ID, case and flags); nothing in the records
// handed back is rewritten except TTLs. The resolver keeps no cache: the upstream does.
//
// Bounds: each sandbox has at most Config.MaxInflight queries at the upstream (and four times
// as many waiting), each source address at most Config.MaxTCPPerSource TCP connections, and
// every query an overall timeout. Serve owns every goroutine it starts: when its context ends
// it cancels the upstream exchanges, waits for the handlers and closes both sockets.
//
// The redirect delivers to the host end of each sandbox's veth, so in production the resolver
// listens on all addresses (":PORT"). It trusts a packet's source address to name the sandbox;
// nftrules makes that true: a packet from a sandbox's interface whose source address does not
// route back through that interface (a forged one: another sandbox's, or any address at all) is
// dropped before the redirect. Silence to unknown sources is the second lock: a reply to a
// forged address would leave the host for that address (conntrack reverses the redirect), an
// egress bypass and a reflector.
package resolver
