package control

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/egress/policy"
)

// E2B's egress rules and Airlock's policies.
//
// E2B decides a destination by allowOut (CIDRs, addresses, names) and
// denyOut (CIDRs and addresses only): an allowOut match wins over a
// denyOut match, and what neither names is allowed, unless
// allow_internet_access is false, which is denyOut 0.0.0.0/0. Names in
// allowOut filter only when all other traffic is denied (E2B's documented
// "domain filtering needs denyOut all traffic"); otherwise the address
// decides. Airlock decides deny, then allow, then its default, and its
// default "public" allows names, never a bare address.
//
// e2bEgress gives an Airlock policy that decides as E2B does:
//
//   - denyOut covers all traffic (or allow_internet_access is false):
//     default none, allow = allowOut (names and CIDRs), no deny rule;
//     allowOut naming all traffic makes it the open case below.
//   - otherwise (the open case): default public, allow 0.0.0.0/0 (so that
//     bare public addresses are reachable, as on E2B) plus allowOut, and
//     deny = denyOut minus every allowOut CIDR (CIDR subtraction), so that
//     Airlock's deny-first order cannot deny what allowOut allows.
//
// Airlock's always-denied addresses (loopback, private ranges, link-local
// and metadata, the host's and other sandboxes' addresses) stay denied
// whatever the rules say: they are checked before any rule.

// allTrafficV4 is E2B's ALL_TRAFFIC.
const allTrafficV4 = "0.0.0.0/0"

// e2bRules is E2B's egress statement: nil internet when not given.
type e2bRules struct {
	internet *bool
	allowOut []string
	denyOut  []string
}

// maxE2BRules bounds allowOut and denyOut each (Airlock's per-list limit).
const maxE2BRules = policy.MaxRules

// e2bEntry is one parsed allowOut/denyOut entry: a prefix, or a name rule.
type e2bEntry struct {
	prefix netip.Prefix // valid for an address or CIDR
	rule   string       // the Airlock rule text
}

func parseE2BEntry(field, s string, names bool) (e2bEntry, error) {
	s = strings.TrimSpace(s)
	r, err := policy.ParseRule(s)
	if err != nil {
		return e2bEntry{}, badRequest("network.%s: %v", field, err)
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return e2bEntry{}, badRequest("network.%s: %q is not a CIDR prefix", field, s)
		}
		p = p.Masked()
		return e2bEntry{prefix: p, rule: p.String()}, nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		a = a.Unmap()
		return e2bEntry{prefix: netip.PrefixFrom(a, a.BitLen()), rule: a.String()}, nil
	}
	if strings.Contains(strings.TrimPrefix(s, "["), ":") {
		return e2bEntry{}, badRequest("network.%s: %q has a port; E2B entries are addresses, CIDRs or names", field, s)
	}
	if !names {
		return e2bEntry{}, badRequest("network.%s: %q is a name; denyOut takes IP addresses and CIDR blocks only, as on E2B", field, s)
	}
	return e2bEntry{rule: r.String()}, nil
}

// isAll reports whether p is every address of its family.
func isAll(p netip.Prefix) bool { return p.IsValid() && p.Bits() == 0 }

// e2bEgress translates E2B's egress statement (see above). With nothing
// stated it returns nil: the sandbox gets the server's default.
func e2bEgress(in e2bRules) (*apiv1.EgressPolicy, error) {
	if in.internet == nil && in.allowOut == nil && in.denyOut == nil {
		return nil, nil
	}
	if len(in.allowOut) > maxE2BRules || len(in.denyOut) > maxE2BRules {
		return nil, badRequest("network.allowOut and network.denyOut take at most %d entries each", maxE2BRules)
	}
	var allow, deny []e2bEntry
	allowAll, denyAll := false, in.internet != nil && !*in.internet
	for _, s := range in.allowOut {
		e, err := parseE2BEntry("allowOut", s, true)
		if err != nil {
			return nil, err
		}
		allowAll = allowAll || isAll(e.prefix)
		allow = append(allow, e)
	}
	for _, s := range in.denyOut {
		e, err := parseE2BEntry("denyOut", s, false)
		if err != nil {
			return nil, err
		}
		// The guest has no IPv6: 0.0.0.0/0 is all of its traffic.
		denyAll = denyAll || (isAll(e.prefix) && e.prefix.Addr().Is4())
		deny = append(deny, e)
	}
	pol := &apiv1.EgressPolicy{}
	add := func(dst *[]string, rule string) {
		if !slices.Contains(*dst, rule) {
			*dst = append(*dst, rule)
		}
	}
	if denyAll && !allowAll {
		pol.Default = string(policy.None)
		for _, e := range allow {
			add(&pol.Allow, e.rule)
		}
		return pol, nil
	}
	pol.Default = string(policy.Public)
	add(&pol.Allow, allTrafficV4)
	var allowed []netip.Prefix
	for _, e := range allow {
		if !isAll(e.prefix) {
			add(&pol.Allow, e.rule)
		}
		if e.prefix.IsValid() {
			allowed = append(allowed, e.prefix)
		}
	}
	for _, e := range deny {
		for _, p := range subtractPrefixes(e.prefix, allowed) {
			add(&pol.Deny, p.String())
		}
	}
	if len(pol.Deny) > maxE2BRules {
		return nil, badRequest("network.denyOut minus network.allowOut is %d CIDR blocks, more than %d", len(pol.Deny), maxE2BRules)
	}
	return pol, nil
}

// subtractPrefixes returns the prefixes covering p without any address of
// minus: p itself when nothing overlaps, nothing when one covers it, else
// the subtraction from each half.
func subtractPrefixes(p netip.Prefix, minus []netip.Prefix) []netip.Prefix {
	overlap := false
	for _, m := range minus {
		if m.Addr().BitLen() != p.Addr().BitLen() || !m.Overlaps(p) {
			continue
		}
		if m.Bits() <= p.Bits() {
			return nil // m covers p
		}
		overlap = true
	}
	if !overlap {
		return []netip.Prefix{p}
	}
	lo, hi := splitPrefix(p)
	return append(subtractPrefixes(lo, minus), subtractPrefixes(hi, minus)...)
}

// splitPrefix returns the two halves of p (p has fewer bits than its
// address: a prefix some longer prefix overlaps).
func splitPrefix(p netip.Prefix) (netip.Prefix, netip.Prefix) {
	bits := p.Bits() + 1
	lo := netip.PrefixFrom(p.Addr(), bits)
	b := p.Addr().AsSlice()
	i := p.Bits()
	b[i/8] |= 0x80 >> (i % 8)
	a, _ := netip.AddrFromSlice(b)
	return lo, netip.PrefixFrom(a, bits)
}

// MaskKey is the reserved native metadata key that keeps an E2B sandbox's
// network.maskRequestHost: the Host its guest's servers see on requests
// to its ports (the gateway sets it; "${PORT}" is the guest port).
const MaskKey = "e2b.airlock/mask-request-host"

// maxMaskLen bounds maskRequestHost.
const maxMaskLen = 256 // a native metadata value's limit

// parseMask checks a maskRequestHost: a host name or address with an
// optional port, where "${PORT}" may stand for the guest port.
func parseMask(s string) (string, error) {
	if s == "" || len(s) > maxMaskLen {
		return "", badRequest("network.maskRequestHost must be 1 to %d bytes", maxMaskLen)
	}
	if _, err := MaskedHost(s, 65535); err != nil {
		return "", badRequest("network.maskRequestHost: %v", err)
	}
	return s, nil
}

// MaskedHost is the Host a guest's server sees for a request to port
// under maskRequestHost mask: "${PORT}" replaced by port, checked to be a
// host with an optional numeric port.
func MaskedHost(mask string, port int) (string, error) {
	h := strings.ReplaceAll(mask, "${PORT}", strconv.Itoa(port))
	if h == "" || len(h) > maxMaskLen {
		return "", fmt.Errorf("%q is not a host", h)
	}
	host, p := h, ""
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.HasSuffix(h, "]") {
		host, p = h[:i], h[i+1:]
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != p {
			return "", fmt.Errorf("%q: the port must be a number from 1 to 65535 (or ${PORT})", h)
		}
	}
	if a, ok := strings.CutPrefix(host, "["); ok {
		if ip, err := netip.ParseAddr(strings.TrimSuffix(a, "]")); err != nil || !ip.Is6() || !strings.HasSuffix(a, "]") {
			return "", fmt.Errorf("%q is not a bracketed IPv6 address", host)
		}
		return h, nil
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return h, nil
	}
	if _, err := policy.ParseRule(host); err != nil || strings.HasPrefix(host, "*.") || strings.Contains(host, "/") {
		return "", fmt.Errorf("%q is not a host name", host)
	}
	return h, nil
}

// networkUpdateIn is SandboxNetworkUpdateConfig: the whole egress
// statement, replacing the last one (omitted fields are cleared).
type networkUpdateIn struct {
	AllowInternetAccess *bool           `json:"allow_internet_access"`
	AllowOut            []string        `json:"allowOut"`
	DenyOut             []string        `json:"denyOut"`
	Rules               json.RawMessage `json:"rules"`
	EgressProxy         json.RawMessage `json:"egressProxy"`
}

// updateNetworkPolicy translates an update: an update that states
// nothing clears every rule, which on E2B is full internet access, so it
// is E2B's open case (not the server's default, which a create without
// network settings keeps).
func updateNetworkPolicy(in networkUpdateIn) (apiv1.EgressPolicy, error) {
	if present(in.EgressProxy) {
		return apiv1.EgressPolicy{}, errEgressProxy
	}
	var headers []apiv1.HeaderRule
	if present(in.Rules) {
		var err error
		if headers, err = parseRules(in.Rules); err != nil {
			return apiv1.EgressPolicy{}, err
		}
	}
	r := e2bRules{internet: in.AllowInternetAccess, allowOut: in.AllowOut, denyOut: in.DenyOut}
	if r.internet == nil && r.allowOut == nil && r.denyOut == nil {
		t := true
		r.internet = &t
	}
	pol, err := e2bEgress(r)
	if err != nil {
		return apiv1.EgressPolicy{}, err
	}
	pol.Headers = headers
	return *pol, nil
}

var errEgressProxy = notImplemented("network.egressProxy is not supported by Airlock's E2B API: a sandbox's traffic leaves only through Airlock's egress proxy")

// E2B's network.rules: {host: [{transform: {headers: {name: value}}}]}.
// Each host's rules become one Airlock header rule (a later rule's header
// wins over an earlier one's, as E2B applies them in order); a rule
// without a transform adds nothing. Header values keep E2B's secret
// placeholders, "${e2b.secrets.NAME}", as Airlock's "${secrets.NAME}"
// (names lower-cased, as E2B stores them), resolved by the proxy from the
// sandbox's project's secrets when it injects the header. The native API
// checks the rest (host patterns, header names and values, the bounds).
type e2bRule struct {
	Transform *struct {
		Headers map[string]string `json:"headers"`
	} `json:"transform"`
}

// e2bPlaceholder opens an E2B placeholder in a header value.
const e2bPlaceholder = "${e2b."

func parseRules(raw json.RawMessage) ([]apiv1.HeaderRule, error) {
	var in map[string][]e2bRule
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, badRequest("network.rules: %v", err)
	}
	hosts := make([]string, 0, len(in))
	for h := range in {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	var out []apiv1.HeaderRule
	for _, host := range hosts {
		if _, err := netip.ParsePrefix(host); err == nil || isRuleAddr(host) {
			return nil, notImplemented("network.rules[%q]: rules for addresses or CIDR blocks are not supported by Airlock: HTTPS to a bare address is relayed, never intercepted; name the host", host)
		}
		headers := map[string]string{}
		for _, r := range in[host] {
			if r.Transform == nil {
				continue
			}
			for name, v := range r.Transform.Headers {
				nv, err := translatePlaceholders(v)
				if err != nil {
					return nil, err
				}
				for k := range headers {
					if strings.EqualFold(k, name) {
						delete(headers, k)
					}
				}
				headers[name] = nv
			}
		}
		if len(headers) > 0 {
			out = append(out, apiv1.HeaderRule{Host: host, Headers: headers})
		}
	}
	return out, nil
}

func isRuleAddr(s string) bool {
	_, err := netip.ParseAddr(strings.Trim(s, "[]"))
	return err == nil
}

// translatePlaceholders rewrites E2B's secret placeholders as Airlock's;
// any other E2B placeholder (workload identity tokens) is refused.
func translatePlaceholders(v string) (string, error) {
	var b strings.Builder
	for rest := v; ; {
		i := strings.Index(rest, e2bPlaceholder)
		if i < 0 {
			b.WriteString(rest)
			return b.String(), nil
		}
		b.WriteString(rest[:i])
		rest = rest[i:]
		j := strings.IndexByte(rest, '}')
		if j < 0 {
			return "", badRequest("network.rules: an unterminated %s…} placeholder", e2bPlaceholder)
		}
		ref := rest[len(e2bPlaceholder):j]
		name, ok := strings.CutPrefix(ref, "secrets.")
		if !ok {
			return "", notImplemented("network.rules: the placeholder ${e2b.%s} is not supported by Airlock (workload identity tokens are not); ${e2b.secrets.NAME} is", ref)
		}
		b.WriteString("${secrets." + strings.ToLower(name) + "}")
		rest = rest[j+1:]
	}
}

// updateNetwork: PUT /sandboxes/{id}/network → 204. The sandbox's
// policy is replaced through the native API, which applies it to the
// running sandbox at once (open connections it now denies are cut).
func (h *Handler) updateNetwork(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	id, err := parseID(r)
	if err != nil {
		return err
	}
	var in networkUpdateIn
	if err := decodeBody(r, &in); err != nil {
		return err
	}
	pol, err := updateNetworkPolicy(in)
	if err != nil {
		return err
	}
	if _, err := c.SetSandboxEgress(ctx, id, pol); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
