package resolver

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/miekg/dns"

	"github.com/airlockdev/airlock/internal/egress"
	"github.com/airlockdev/airlock/internal/egress/bindings"
	"github.com/airlockdev/airlock/internal/egress/decisionlog"
	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/textclip"
)

// Rules of the decisions the resolver takes itself (the policy's own rules come from policy).
const (
	RuleDoH     = "doh-resolver"   // a known DNS-over-HTTPS service, refused whatever the policy
	RuleExfil   = "dns-exfil"      // the name exceeds NameLimits
	RuleQType   = "dns-qtype"      // a query type or class the resolver does not answer
	RuleBadName = "invalid-name"   // not a host name
	RuleChain   = "dns-cname-loop" // a CNAME chain too long or looping
	RuleDenied  = "always-denied"  // an answer address of the host or of a sandbox
)

// answeredTypes are the query types forwarded. Everything else (ANY, zone transfers, PTR,
// NULL, DNSSEC internals, obsolete types) is refused: a sandbox needs addresses, aliases and
// service metadata; PTR of private ranges would reveal internal names, and NULL/ANY are the
// record types DNS tunnels use to get large answers back.
var answeredTypes = map[uint16]bool{
	dns.TypeA: true, dns.TypeAAAA: true, dns.TypeCNAME: true, dns.TypeHTTPS: true, dns.TypeSVCB: true,
	dns.TypeMX: true, dns.TypeTXT: true, dns.TypeSRV: true, dns.TypeNS: true, dns.TypeSOA: true,
	dns.TypeCAA: true,
}

// answer is the whole decision for one query from src; nil means send nothing: to a source
// that is no sandbox (checked first, before anything in the message is looked at), and to a
// response. tcp says which transport the reply goes back on (for its size limit).
func (r *Resolver) answer(ctx context.Context, src netip.Addr, tcp bool, req *dns.Msg) *dns.Msg {
	// The sockets' readers drop unknown sources already; this is the second check.
	sb, ok := r.sandbox(src)
	if !ok {
		return nil
	}
	if req.Response {
		return nil
	}
	resp := new(dns.Msg)
	resp.SetReply(req) // id, opcode, RD, the question as asked (0x20 case kept)
	resp.RecursionAvailable = true
	if req.Opcode != dns.OpcodeQuery {
		resp.Rcode = dns.RcodeNotImplemented
		return r.finish(req, resp, tcp)
	}
	if len(req.Question) != 1 {
		resp.Rcode = dns.RcodeFormatError
		return r.finish(req, resp, tcp)
	}
	q := req.Question[0]
	refuse := func(host, rule, reason string) *dns.Msg {
		sb.Log.Append(decisionlog.Event{Kind: decisionlog.KindDNS, Host: host, Rule: rule, Reason: reason})
		resp.Rcode = dns.RcodeRefused
		return r.finish(req, resp, tcp)
	}
	name, err := policy.NormalizeName(q.Name)
	if err != nil {
		return refuse(textclip.Bytes(q.Name, maxEcho), RuleBadName, err.Error())
	}
	if q.Qclass != dns.ClassINET || !answeredTypes[q.Qtype] {
		return refuse(name, RuleQType, fmt.Sprintf("queries of class %s type %s are not answered", dns.Class(q.Qclass), dns.Type(q.Qtype)))
	}
	if err := r.cfg.Limits.Check(name); err != nil {
		return refuse(name, RuleExfil, err.Error())
	}
	if policy.IsDoHResolver(name) {
		return refuse(name, RuleDoH, name+" is a public DNS-over-HTTPS service, which would bypass Airlock's resolver")
	}
	if d := sb.Decide(decisionlog.KindDNS, name, netip.Addr{}, 0); !d.Allowed {
		resp.Rcode = dns.RcodeRefused
		return r.finish(req, resp, tcp)
	}

	qctx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
	defer cancel()
	release, err := r.inflight.acquire(qctx, sb)
	if err != nil {
		r.log.Warn("dns query dropped", "sandbox", sb.ID, "name", name, "err", err)
		resp.Rcode = dns.RcodeServerFailure
		return r.finish(req, resp, tcp)
	}
	up, err := r.forward(qctx, name, q.Qtype)
	release()
	if err != nil {
		r.log.Warn("dns upstream failed", "sandbox", sb.ID, "name", name, "err", err)
		resp.Rcode = dns.RcodeServerFailure
		return r.finish(req, resp, tcp)
	}
	r.filter(sb, name, q.Qtype, up, resp)
	return r.finish(req, resp, tcp)
}

// filter copies into resp what the sandbox may see of the upstream's answer up:
//
//   - the CNAME chain from the queried name, every name of which the policy must allow
//     (else REFUSED: an allowed name must not alias its way into a blocked zone);
//   - the records of the chain's last name of the queried type, where an A or AAAA record
//     whose address is always denied, the host's or a sandbox's, or denied by an address rule
//     is dropped and logged (DNS rebinding); when none is left the answer is an empty NOERROR
//     (NODATA): "this name has no usable address" fails fast in the guest, where REFUSED would
//     make stub resolvers retry and programs report a temporary failure;
//   - the SOA of the authority section (negative caching); nothing else of the authority and
//     additional sections (glue for names the policy never judged).
//
// Every record of the answer is handed out with the shortest TTL among them, capped at MaxTTL.
// The queried name and every CNAME target are bound to the addresses left for that TTL, raised
// to MinBindingTTL (30 s by default: Java caches answers for 30 s whatever their TTL), plus
// BindingGrace, so that a binding outlives the guest's cached copy of the answer.
func (r *Resolver) filter(sb *egress.Sandbox, name string, qtype uint16, up *dns.Msg, resp *dns.Msg) {
	maxTTL := uint32(r.cfg.MaxTTL / time.Second)
	chain := []string{name}
	minTTL := maxTTL
	var answer []dns.RR
	cur := name
	for {
		cn := findCNAME(up.Answer, cur)
		if cn == nil {
			break
		}
		if len(chain) > maxChain {
			sb.Log.Append(decisionlog.Event{Kind: decisionlog.KindDNS, Host: name, Rule: RuleChain,
				Reason: fmt.Sprintf("the answer for %s has a CNAME chain longer than %d or a loop", name, maxChain)})
			resp.Rcode = dns.RcodeServerFailure
			return
		}
		target, err := policy.NormalizeName(cn.Target)
		if err != nil {
			sb.Log.Append(decisionlog.Event{Kind: decisionlog.KindDNS, Host: textclip.Bytes(cn.Target, maxEcho), Rule: RuleBadName,
				Reason: fmt.Sprintf("%s is an alias of an invalid name: %s", cur, err)})
			resp.Rcode = dns.RcodeRefused
			return
		}
		if slices.Contains(chain, target) {
			sb.Log.Append(decisionlog.Event{Kind: decisionlog.KindDNS, Host: name, Rule: RuleChain,
				Reason: fmt.Sprintf("the answer for %s has a CNAME loop through %s", name, target)})
			resp.Rcode = dns.RcodeServerFailure
			return
		}
		if policy.IsDoHResolver(target) {
			sb.Log.Append(decisionlog.Event{Kind: decisionlog.KindDNS, Host: target, Rule: RuleDoH,
				Reason: fmt.Sprintf("%s is an alias of %s, a public DNS-over-HTTPS service", cur, target)})
			resp.Rcode = dns.RcodeRefused
			return
		}
		if d := sb.Decide(decisionlog.KindDNS, target, netip.Addr{}, 0); !d.Allowed {
			resp.Rcode = dns.RcodeRefused
			return
		}
		minTTL = min(minTTL, cn.Hdr.Ttl)
		answer = append(answer, cn)
		chain = append(chain, target)
		cur = target
	}

	var addrs []netip.Addr
	for _, rr := range up.Answer {
		h := rr.Header()
		if h.Rrtype != qtype || h.Rrtype == dns.TypeCNAME || h.Class != dns.ClassINET {
			continue
		}
		owner, err := policy.NormalizeName(h.Name)
		if err != nil || owner != cur {
			continue
		}
		switch rr := rr.(type) {
		case *dns.A:
			a, ok := netip.AddrFromSlice(rr.A.To4())
			if !ok || len(addrs) >= bindings.MaxAddrsPerName || !r.answerAddrAllowed(sb, cur, a) {
				continue // beyond what a name may bind: the guest gets only addresses it may use
			}
			addrs = append(addrs, a)
		case *dns.AAAA:
			a, ok := netip.AddrFromSlice(rr.AAAA.To16())
			if !ok || len(addrs) >= bindings.MaxAddrsPerName || !r.answerAddrAllowed(sb, cur, a) {
				continue
			}
			addrs = append(addrs, a)
		case *dns.SVCB:
			rr.Value = r.filterHints(sb, cur, rr.Value)
		case *dns.HTTPS:
			rr.Value = r.filterHints(sb, cur, rr.Value)
		}
		minTTL = min(minTTL, h.Ttl)
		answer = append(answer, rr)
	}
	for _, rr := range up.Ns {
		if rr.Header().Rrtype == dns.TypeSOA {
			resp.Ns = append(resp.Ns, rr)
		}
	}
	// One TTL for the whole answer: a guest that caches (nscd, systemd-resolved, a language
	// runtime) must ask for the whole chain again, not only for its shortest-lived part, or
	// the bindings of the names ahead in the chain would expire while it still uses them.
	for _, rr := range answer {
		rr.Header().Ttl = minTTL
	}
	for _, rr := range resp.Ns {
		rr.Header().Ttl = min(rr.Header().Ttl, maxTTL)
	}
	resp.Answer = answer
	resp.Rcode = up.Rcode
	if resp.Rcode > 0xF { // an extended rcode belongs to the upstream's EDNS exchange, not ours
		resp.Rcode = dns.RcodeServerFailure
	}
	if len(addrs) == 0 || up.Rcode != dns.RcodeSuccess {
		return
	}
	ttl := max(time.Duration(minTTL)*time.Second, r.cfg.MinBindingTTL) + r.cfg.BindingGrace
	now := r.cfg.Now()
	for _, n := range chain {
		sb.Bindings.Record(n, addrs, ttl, now)
	}
}

func findCNAME(rrs []dns.RR, owner string) *dns.CNAME {
	for _, rr := range rrs {
		cn, ok := rr.(*dns.CNAME)
		if !ok || cn.Hdr.Class != dns.ClassINET {
			continue
		}
		if n, err := policy.NormalizeName(cn.Hdr.Name); err == nil && n == owner {
			return cn
		}
	}
	return nil
}

// answerAddrAllowed reports whether a sandbox may be told that name has address a; a refusal
// is logged.
func (r *Resolver) answerAddrAllowed(sb *egress.Sandbox, name string, a netip.Addr) bool {
	a = a.Unmap()
	rule, reason := "", ""
	if p := sb.Policy(); p == nil {
		rule, reason = "no-policy", "the sandbox has no egress policy"
	} else if d := p.Dest(name, a, 0); !d.Allowed {
		rule, reason = d.Rule, d.Reason
	} else if r.cfg.Registry.Denied(a) {
		rule, reason = RuleDenied, fmt.Sprintf("%s is an address of this host or of a sandbox", a)
	} else {
		return true
	}
	sb.Log.Append(decisionlog.Event{Kind: decisionlog.KindDNS, Host: name, Addr: a.String(), Rule: rule,
		Reason: "address dropped from the answer (DNS rebinding defence): " + reason})
	return false
}

// filterHints drops the ipv4hint/ipv6hint addresses of an SVCB or HTTPS record that the
// sandbox may not be told, and the hint itself when none is left.
func (r *Resolver) filterHints(sb *egress.Sandbox, name string, kvs []dns.SVCBKeyValue) []dns.SVCBKeyValue {
	out := kvs[:0]
	for _, kv := range kvs {
		switch kv := kv.(type) {
		case *dns.SVCBIPv4Hint:
			kv.Hint = slices.DeleteFunc(kv.Hint, func(ip net.IP) bool {
				a, ok := netip.AddrFromSlice(ip)
				return !ok || !r.answerAddrAllowed(sb, name, a)
			})
			if len(kv.Hint) == 0 {
				continue
			}
		case *dns.SVCBIPv6Hint:
			kv.Hint = slices.DeleteFunc(kv.Hint, func(ip net.IP) bool {
				a, ok := netip.AddrFromSlice(ip)
				return !ok || !r.answerAddrAllowed(sb, name, a)
			})
			if len(kv.Hint) == 0 {
				continue
			}
		}
		out = append(out, kv)
	}
	return out
}

// finish sizes resp for its transport: EDNS echoed when the query had it, and over UDP
// truncated to what the client can take (512 bytes without EDNS).
func (r *Resolver) finish(req, resp *dns.Msg, tcp bool) *dns.Msg {
	size := dns.MinMsgSize
	if opt := req.IsEdns0(); opt != nil {
		size = max(int(opt.UDPSize()), dns.MinMsgSize)
		resp.SetEdns0(min(uint16(size), upstreamUDPSize), false)
	}
	if tcp {
		size = dns.MaxMsgSize
	}
	resp.Truncate(size)
	return resp
}

// maxEcho is how many bytes of a name an error message or log quotes (textclip.Bytes).
const maxEcho = 80
