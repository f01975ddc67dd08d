// Package policy is the egress policy of a sandbox: allow and deny rules by DNS name (exact or
// "*.suffix"), by CIDR prefix and by port, operator-defined profiles merged into it, a default
// for everything no rule names ("public" or "none"), and the TLS interception exemptions.
//
// A Spec is what clients send and the store keeps; Compile merges its profiles and the server's
// default into an immutable Policy, which answers the questions the resolver and the proxy ask:
//
//   - Name: may this name be resolved (port 0) or connected to on a port?
//   - Addr: may a connection with no name (a direct IP connect) reach this address and port?
//   - Dest: may a connection by name reach this address and port?
//   - Exempt: is a TLS connection relayed without interception?
//
// Every decision is taken in one order: the always-denied addresses (AlwaysDenied:
// loopback, RFC 1918, link-local and metadata, CGNAT, the IPv6 equivalents), then the deny
// rules, then the allow rules, then the default. The default "public" allows every name that no
// rule denies (its addresses must still be public); a bare address is allowed only by an
// address rule, never by the default, so that every connection is tied to a name the policy
// judged or to an address range the operator wrote down. The caller adds what the policy cannot
// know: the host's own addresses, other sandboxes' addresses, and whether a name really resolved
// to the address the guest dialled (the DNS bindings).
package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"

	"github.com/airlockdev/airlock/internal/model"
)

// Default decides what no rule names.
type Default string

// Defaults.
const (
	// Public: every name no rule denies; its addresses must be public (never the always-denied
	// ranges). Bare addresses still need an address rule.
	Public Default = "public"
	// None: only what an allow rule names.
	None Default = "none"
)

// ParseDefault parses "public" or "none". Errors wrap model.ErrInvalid.
func ParseDefault(s string) (Default, error) {
	switch Default(s) {
	case Public, None:
		return Default(s), nil
	}
	return "", fmt.Errorf("%w: egress default %q must be public or none", model.ErrInvalid, clip(s))
}

// UnmarshalText implements encoding.TextUnmarshaler ("" stays "": the server's default).
func (d *Default) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*d = ""
		return nil
	}
	v, err := ParseDefault(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// ProfileName names an operator-defined egress profile.
type ProfileName string

var profileNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ParseProfileName parses a profile name: 1-63 of a-z, 0-9, '.', '_' and '-', starting with a
// letter or digit. Errors wrap model.ErrInvalid.
func ParseProfileName(s string) (ProfileName, error) {
	if !profileNameRE.MatchString(s) {
		return "", fmt.Errorf("%w: egress profile name %q must be 1-63 of a-z, 0-9, '.', '_', '-', starting with a letter or digit", model.ErrInvalid, clip(s))
	}
	return ProfileName(s), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (n *ProfileName) UnmarshalText(b []byte) error {
	v, err := ParseProfileName(string(b))
	if err != nil {
		return err
	}
	*n = v
	return nil
}

// Spec is a policy as clients write it and the store keeps it.
type Spec struct {
	Default   Default       `json:"default,omitempty"` // "": the server's --egress-default
	Allow     []Rule        `json:"allow,omitempty"`
	Deny      []Rule        `json:"deny,omitempty"`
	Profiles  []ProfileName `json:"profiles,omitempty"`
	TLSExempt []Rule        `json:"tls_exempt,omitempty"` // SNI names or CIDRs relayed without interception
	// Headers are the sandbox's own request header rules (headers.go):
	// kept sealed, carried through Compile for the proxy, never decided on.
	Headers *Headers `json:"sealed_headers,omitempty"`
}

// Limits on a Spec, so that a policy stays small enough to evaluate on every connection.
const (
	MaxRules    = 1000 // per list
	MaxProfiles = 32
)

// ParseSpec decodes a Spec from JSON strictly (unknown fields are refused) and checks it.
// Errors wrap model.ErrInvalid.
func ParseSpec(data []byte) (Spec, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s Spec
	if err := dec.Decode(&s); err != nil {
		if errors.Is(err, model.ErrInvalid) {
			return Spec{}, err
		}
		return Spec{}, fmt.Errorf("%w: egress policy: %v", model.ErrInvalid, err)
	}
	if dec.More() {
		return Spec{}, fmt.Errorf("%w: egress policy: trailing data after the JSON object", model.ErrInvalid)
	}
	if err := s.Check(); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// Check reports what is wrong with a Spec whose fields each parsed: lists too long, zero rules,
// TLS exemptions with ports. Errors wrap model.ErrInvalid.
func (s Spec) Check() error {
	for _, l := range []struct {
		name  string
		rules []Rule
	}{{"allow", s.Allow}, {"deny", s.Deny}, {"tls_exempt", s.TLSExempt}} {
		if len(l.rules) > MaxRules {
			return fmt.Errorf("%w: egress policy: %s has %d rules, at most %d", model.ErrInvalid, l.name, len(l.rules), MaxRules)
		}
		for _, r := range l.rules {
			if r.IsZero() {
				return fmt.Errorf("%w: egress policy: empty rule in %s", model.ErrInvalid, l.name)
			}
		}
	}
	for _, r := range s.TLSExempt {
		if r.port != 0 {
			return fmt.Errorf("%w: egress policy: tls_exempt rule %s has a port; exemptions apply to TLS on 443 only", model.ErrInvalid, r)
		}
	}
	if len(s.Profiles) > MaxProfiles {
		return fmt.Errorf("%w: egress policy: %d profiles, at most %d", model.ErrInvalid, len(s.Profiles), MaxProfiles)
	}
	if s.Default != "" {
		if _, err := ParseDefault(string(s.Default)); err != nil {
			return err
		}
	}
	return s.Headers.check()
}

// CheckProfile reports what is wrong with s as a profile's body: a profile adds rules only.
func (s Spec) CheckProfile() error {
	if err := s.Check(); err != nil {
		return err
	}
	if s.Default != "" || len(s.Profiles) > 0 || s.Headers != nil {
		return fmt.Errorf("%w: an egress profile holds allow, deny and tls_exempt rules only (no default, no profiles, no headers)", model.ErrInvalid)
	}
	return nil
}

// ErrUnknownProfile is wrapped when a Spec names a profile that does not exist.
var ErrUnknownProfile = errors.New("unknown egress profile")

// Policy is a compiled, immutable Spec.
type Policy struct {
	spec      Spec // effective: profiles merged in, default set
	allow     []Rule
	deny      []Rule
	tlsExempt []Rule
}

// Compile merges the profiles s names (looked up with profile) and the server's default into a
// Policy. A profile that does not exist is an error wrapping ErrUnknownProfile.
func Compile(s Spec, profile func(ProfileName) (Spec, bool), serverDefault Default) (*Policy, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	eff := Spec{Default: s.Default, Profiles: slices.Clone(s.Profiles), Headers: s.Headers.clone()}
	if eff.Default == "" {
		eff.Default = serverDefault
	}
	if _, err := ParseDefault(string(eff.Default)); err != nil {
		return nil, err
	}
	add := func(dst *[]Rule, rules []Rule) {
		for _, r := range rules {
			if !slices.Contains(*dst, r) {
				*dst = append(*dst, r)
			}
		}
	}
	add(&eff.Allow, s.Allow)
	add(&eff.Deny, s.Deny)
	add(&eff.TLSExempt, s.TLSExempt)
	for _, n := range s.Profiles {
		var ps Spec
		ok := false
		if profile != nil {
			ps, ok = profile(n)
		}
		if !ok {
			return nil, fmt.Errorf("%w: %w %q", model.ErrInvalid, ErrUnknownProfile, n)
		}
		add(&eff.Allow, ps.Allow)
		add(&eff.Deny, ps.Deny)
		add(&eff.TLSExempt, ps.TLSExempt)
	}
	return &Policy{spec: eff, allow: eff.Allow, deny: eff.Deny, tlsExempt: eff.TLSExempt}, nil
}

// Spec is the effective policy: the Spec compiled, its profiles' rules merged in and the
// default filled.
func (p *Policy) Spec() Spec { return p.spec }

// Decision is the answer to one question, with the rule that decided it.
type Decision struct {
	Allowed bool   `json:"allowed"`
	Rule    string `json:"rule"`   // e.g. "allow pypi.org", "deny *.evil.com:443", "default public", "always-denied"
	Reason  string `json:"reason"` // one sentence for a person
	// ByName is set when a name rule or the default allowed a connection by name: the caller
	// must then also see a live DNS binding of that name to the address.
	ByName bool `json:"-"`
}

func allow(rule, reason string) Decision { return Decision{Allowed: true, Rule: rule, Reason: reason} }
func deny(rule, reason string) Decision  { return Decision{Rule: rule, Reason: reason} }

// Name decides about a name: with port 0, whether it may be resolved at all (an allow rule for
// the name on any port lets it resolve; only a deny rule without a port stops it); with a
// port, whether a connection to it on that port may be made.
func (p *Policy) Name(host string, port uint16) Decision {
	name, err := normalizeName(host)
	if err != nil {
		return deny("invalid-name", fmt.Sprintf("%q is not a valid host name: %s", clip(host), err))
	}
	for _, r := range p.deny {
		if r.matchName(name) && (r.port == 0 || (port != 0 && r.port == port)) {
			return deny("deny "+r.String(), fmt.Sprintf("%s is denied by the rule %s", name, r))
		}
	}
	for _, r := range p.allow {
		if r.matchName(name) && (port == 0 || r.matchPort(port)) {
			d := allow("allow "+r.String(), fmt.Sprintf("%s is allowed by the rule %s", name, r))
			d.ByName = true
			return d
		}
	}
	if p.spec.Default == Public {
		d := allow("default public", fmt.Sprintf("no rule names %s; the default allows public destinations", name))
		d.ByName = true
		return d
	}
	return deny("default none", fmt.Sprintf("no allow rule names %s%s and the default is none", name, portSuffix(port)))
}

// NamedPort decides about a raw connection (a port other than the proxy's HTTP and TLS ports,
// where no Host or SNI names the destination) to addr:port that is attributed to host because
// host is bound to addr: the address must not be denied, and an allow rule must name host AND
// this very port. A rule without a port and the default cover what the proxy can check by name
// (HTTP's Host, TLS's SNI), not every port of every address a name resolves to: otherwise any
// name resolving to an address (one shared by a CDN's tenants, or one an attacker's zone points
// anywhere) would open all its ports.
func (p *Policy) NamedPort(host string, addr netip.Addr, port uint16) Decision {
	if d, denied := p.addrDenied(addr, port); denied {
		return d
	}
	name, err := normalizeName(host)
	if err != nil {
		return deny("invalid-name", fmt.Sprintf("%q is not a valid host name: %s", clip(host), err))
	}
	for _, r := range p.deny {
		if r.matchName(name) && r.matchPort(port) {
			return deny("deny "+r.String(), fmt.Sprintf("%s is denied by the rule %s", name, r))
		}
	}
	for _, r := range p.allow {
		if r.matchName(name) && r.port == port {
			d := allow("allow "+r.String(), fmt.Sprintf("%s is allowed on port %d by the rule %s", name, port, r))
			d.ByName = true
			return d
		}
	}
	return deny("no-port-rule", fmt.Sprintf("a connection to %s on port %d (no HTTP Host or TLS name to check) needs an allow rule naming %s:%d or a CIDR rule", name, port, name, port))
}

// Addr decides about a connection that has no name: the always-denied ranges, then address
// rules; the default never allows a bare address.
func (p *Policy) Addr(addr netip.Addr, port uint16) Decision {
	if d, denied := p.addrDenied(addr, port); denied {
		return d
	}
	a := addr.Unmap().WithZone("")
	for _, r := range p.allow {
		if r.matchAddr(a) && r.matchPort(port) {
			return allow("allow "+r.String(), fmt.Sprintf("%s is allowed by the rule %s", hostPort(a, port), r))
		}
	}
	return deny("no-address-rule", fmt.Sprintf("no address rule allows %s; a connection by address needs a CIDR rule or a name the sandbox resolved to it", hostPort(a, port)))
}

// Dest decides about a connection by name to addr (the address the guest dialled, or the
// invalid Addr when none is known): the address must not be always denied or denied by an
// address rule, and the name must be allowed on the port. An allowed Decision has ByName set.
func (p *Policy) Dest(host string, addr netip.Addr, port uint16) Decision {
	if addr.IsValid() {
		if d, denied := p.addrDenied(addr, port); denied {
			return d
		}
	}
	return p.Name(host, port)
}

func (p *Policy) addrDenied(addr netip.Addr, port uint16) (Decision, bool) {
	if AlwaysDenied(addr) {
		return deny("always-denied", fmt.Sprintf("%s is a private, loopback, link-local, metadata or otherwise reserved address, which no policy allows", addr)), true
	}
	a := addr.Unmap().WithZone("")
	for _, r := range p.deny {
		if r.matchAddr(a) && r.matchPort(port) {
			return deny("deny "+r.String(), fmt.Sprintf("%s is denied by the rule %s", hostPort(a, port), r)), true
		}
	}
	return Decision{}, false
}

// Exempt reports whether a TLS connection with this SNI to addr is relayed without
// interception (an exemption by name or by destination prefix).
func (p *Policy) Exempt(sni string, addr netip.Addr) bool {
	name, err := normalizeName(sni)
	for _, r := range p.tlsExempt {
		if (err == nil && r.matchName(name)) || r.matchAddr(addr) {
			return true
		}
	}
	return false
}

func portSuffix(port uint16) string {
	if port == 0 {
		return ""
	}
	return fmt.Sprintf(" on port %d", port)
}

func hostPort(a netip.Addr, port uint16) string {
	if port == 0 {
		return a.String()
	}
	return netip.AddrPortFrom(a, port).String()
}
