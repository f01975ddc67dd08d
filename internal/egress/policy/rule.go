package policy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/airlockdev/airlock/internal/model"
)

// Rule is one entry of an allow, deny or TLS-exemption list: a destination (a DNS name, a
// "*.suffix" wildcard, an IP address or a CIDR prefix) and an optional port. Its text form is
// what clients write:
//
//	pypi.org              the name pypi.org, any port
//	*.github.com:443      every name below github.com (not github.com itself), port 443
//	203.0.113.7           one address, any port
//	203.0.113.0/24:22     a prefix, port 22
//	[2001:db8::1]:443     an IPv6 address with a port (brackets required with a port)
//	2001:db8::/32         an IPv6 prefix
//
// Names are compared lower-case without a trailing dot. A Rule is either a name rule or an
// address rule, never both.
type Rule struct {
	name     string       // lower-case, no trailing dot, without the "*." of a wildcard
	wildcard bool         // name matches strict subdomains of name
	prefix   netip.Prefix // valid for address rules (a single address is a /32 or /128)
	port     uint16       // 0: any port
}

// maxRuleLen bounds a rule's text (a 253-byte name, "*.", ":65535" and brackets fit).
const maxRuleLen = 300

// ParseRule parses the text form of a Rule. Errors wrap model.ErrInvalid.
func ParseRule(s string) (Rule, error) {
	r, err := parseRule(s)
	if err != nil {
		return Rule{}, fmt.Errorf("%w: egress rule %q: %s", model.ErrInvalid, clip(s), err)
	}
	return r, nil
}

func parseRule(s string) (Rule, error) {
	if s == "" {
		return Rule{}, fmt.Errorf("empty")
	}
	if len(s) > maxRuleLen {
		return Rule{}, fmt.Errorf("longer than %d bytes", maxRuleLen)
	}
	host, port, err := splitPort(s)
	if err != nil {
		return Rule{}, err
	}
	if strings.Contains(host, "/") {
		p, err := netip.ParsePrefix(host)
		if err != nil {
			return Rule{}, fmt.Errorf("not a CIDR prefix")
		}
		if p.Addr().Zone() != "" {
			return Rule{}, fmt.Errorf("zones are not allowed")
		}
		return Rule{prefix: p.Masked(), port: port}, nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return Rule{}, fmt.Errorf("zones are not allowed")
		}
		a = a.Unmap()
		return Rule{prefix: netip.PrefixFrom(a, a.BitLen()), port: port}, nil
	}
	wildcard := false
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		wildcard, host = true, rest
	}
	name, err := normalizeName(host)
	if err != nil {
		return Rule{}, err
	}
	if wildcard && !strings.Contains(name, ".") {
		return Rule{}, fmt.Errorf("a wildcard needs a suffix of at least two labels (*.example.com, not *.%s)", name)
	}
	return Rule{name: name, wildcard: wildcard, port: port}, nil
}

// splitPort separates an optional ":PORT" from a rule. An IPv6 address with a port must be
// bracketed; a bare IPv6 address or prefix (several colons, no brackets) has no port.
func splitPort(s string) (string, uint16, error) {
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 {
			return "", 0, fmt.Errorf("missing ]")
		}
		host, rest := s[1:end], s[end+1:]
		if !strings.Contains(host, ":") {
			return "", 0, fmt.Errorf("brackets are only for IPv6 addresses")
		}
		if rest == "" {
			return host, 0, nil
		}
		p, ok := strings.CutPrefix(rest, ":")
		if !ok {
			return "", 0, fmt.Errorf("unexpected %q after ]", rest)
		}
		port, err := parsePort(p)
		return host, port, err
	}
	if strings.Count(s, ":") > 1 {
		return s, 0, nil // bare IPv6
	}
	host, p, ok := strings.Cut(s, ":")
	if !ok {
		return s, 0, nil
	}
	port, err := parsePort(p)
	return host, port, err
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 || s[0] == '0' || s[0] == '+' {
		return 0, fmt.Errorf("port %q must be 1-65535", clip(s))
	}
	return uint16(n), nil
}

// NormalizeName returns a DNS name lower-cased without its trailing dot, or an error for
// anything that is not a valid host name (letters, digits, '-' and '_', labels of 1-63 bytes,
// at most 253 bytes in all). Errors wrap model.ErrInvalid.
func NormalizeName(s string) (string, error) {
	n, err := normalizeName(s)
	if err != nil {
		return "", fmt.Errorf("%w: host name %q: %s", model.ErrInvalid, clip(s), err)
	}
	return n, nil
}

func normalizeName(s string) (string, error) {
	s = strings.TrimSuffix(s, ".")
	if s == "" {
		return "", fmt.Errorf("empty name")
	}
	if len(s) > 253 {
		return "", fmt.Errorf("name longer than 253 bytes")
	}
	b := []byte(s)
	label := 0
	for i, c := range b {
		switch {
		case c >= 'A' && c <= 'Z':
			b[i] = c + 'a' - 'A'
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
		case c == '.':
			if label == 0 {
				return "", fmt.Errorf("empty label")
			}
			label = 0
			continue
		default:
			return "", fmt.Errorf("character %q is not allowed in a host name", c)
		}
		label++
		if label > 63 {
			return "", fmt.Errorf("label longer than 63 bytes")
		}
	}
	if label == 0 {
		return "", fmt.Errorf("empty label")
	}
	// A last label of digits only is no top-level domain: such a "name" is an address in
	// disguise (1.2.3.4. or 0x7f.1 style tricks), which address rules judge.
	last := b[len(b)-label:]
	if strings.Trim(string(last), "0123456789") == "" {
		return "", fmt.Errorf("the last label is numeric: an address, not a name")
	}
	return string(b), nil
}

// String is the rule's canonical text form.
func (r Rule) String() string {
	var host string
	switch {
	case r.name != "" && r.wildcard:
		host = "*." + r.name
	case r.name != "":
		host = r.name
	case r.prefix.IsSingleIP():
		host = r.prefix.Addr().String()
		if r.port != 0 && r.prefix.Addr().Is6() {
			host = "[" + host + "]"
		}
	case r.prefix.IsValid():
		host = r.prefix.String()
		if r.port != 0 && r.prefix.Addr().Is6() {
			host = "[" + host + "]"
		}
	}
	if r.port != 0 {
		return host + ":" + strconv.Itoa(int(r.port))
	}
	return host
}

// MarshalText implements encoding.TextMarshaler.
func (r Rule) MarshalText() ([]byte, error) {
	if r.IsZero() {
		return nil, fmt.Errorf("%w: empty egress rule", model.ErrInvalid)
	}
	return []byte(r.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (r *Rule) UnmarshalText(b []byte) error {
	v, err := ParseRule(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// IsZero reports whether r is the zero Rule.
func (r Rule) IsZero() bool { return r.name == "" && !r.prefix.IsValid() }

// IsName reports whether r is a name (or wildcard) rule.
func (r Rule) IsName() bool { return r.name != "" }

// Port is the rule's port, 0 for any.
func (r Rule) Port() uint16 { return r.port }

// matchName reports whether the name rule covers host (normalized).
func (r Rule) matchName(host string) bool {
	if r.name == "" {
		return false
	}
	if r.wildcard {
		return len(host) > len(r.name) && strings.HasSuffix(host, r.name) && host[len(host)-len(r.name)-1] == '.'
	}
	return host == r.name
}

// matchAddr reports whether the address rule covers addr.
func (r Rule) matchAddr(addr netip.Addr) bool {
	return r.prefix.IsValid() && addr.IsValid() && r.prefix.Contains(addr.Unmap().WithZone(""))
}

// matchPort: a rule without a port covers every port; a question about "any port" (0) is
// covered only by a rule without a port.
func (r Rule) matchPort(port uint16) bool { return r.port == 0 || r.port == port }

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
