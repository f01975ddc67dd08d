package secrets

import (
	"encoding/json"
	"fmt"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

// Header rules are a sandbox's own request transforms (E2B's
// network.rules): headers the proxy sets on the sandbox's intercepted
// HTTPS requests to some hosts, once the request is allowed. A value is
// literal text and placeholders "${secrets.NAME}", each replaced, when the
// proxy injects the header, by the value of the sandbox's project's secret
// NAME: the value never enters the sandbox, and a placeholder names a
// secret of the sandbox's own project only. The rules travel in the
// sandbox's egress policy sealed (SealHeaderRules), because their values
// may be credentials.

// RuleHeader is one header of a rule: its name and value template.
type RuleHeader struct {
	Name  string
	Value string // literal text and "${secrets.NAME}" placeholders
}

// HeaderRule is the headers set on requests to one host pattern.
type HeaderRule struct {
	Host    Host
	Headers []RuleHeader
}

// Limits of header rules: beyond them a rule set is refused (400).
const (
	MaxRuleHosts        = policy.MaxHeaderHosts
	MaxRuleHeaders      = 16       // per host
	MaxRuleValueSize    = 8 << 10  // one header value template
	MaxRuleTotalSize    = 32 << 10 // names and values of all rules
	RulePlaceholderOpen = "${secrets."
)

// RawHeaderRule is a rule as a request gives it.
type RawHeaderRule struct {
	Host    string
	Headers map[string]string
}

// ParseHeaderRules checks a sandbox's rules: host patterns as a secret's
// (names or *.suffix, never a public suffix), header names a secret may
// use, values usable in a header (no CR, LF or other control characters)
// whose placeholders are well formed, within the limits. Errors wrap
// model.ErrInvalid.
func ParseHeaderRules(in []RawHeaderRule) ([]HeaderRule, error) {
	if len(in) > MaxRuleHosts {
		return nil, fmt.Errorf("%w: header rules: %d hosts, at most %d", model.ErrInvalid, len(in), MaxRuleHosts)
	}
	out := make([]HeaderRule, 0, len(in))
	seen := map[string]bool{}
	total := 0
	for _, r := range in {
		h, err := ParseHost(r.Host)
		if err != nil {
			return nil, fmt.Errorf("header rules: %w", err)
		}
		if seen[h.String()] {
			return nil, fmt.Errorf("%w: header rules: host %s appears twice", model.ErrInvalid, h)
		}
		seen[h.String()] = true
		if len(r.Headers) == 0 || len(r.Headers) > MaxRuleHeaders {
			return nil, fmt.Errorf("%w: header rules: host %s has %d headers, 1 to %d", model.ErrInvalid, h, len(r.Headers), MaxRuleHeaders)
		}
		rule := HeaderRule{Host: h}
		for name, value := range r.Headers {
			if name == "" {
				return nil, fmt.Errorf("%w: header rules: host %s: an empty header name", model.ErrInvalid, h)
			}
			n, err := ParseHeader(name)
			if err != nil {
				return nil, fmt.Errorf("header rules: host %s: %w", h, err)
			}
			if err := checkRuleValue(value); err != nil {
				return nil, fmt.Errorf("header rules: host %s, header %s: %w", h, n, err)
			}
			total += len(n) + len(value)
			rule.Headers = append(rule.Headers, RuleHeader{Name: n, Value: value})
		}
		if total > MaxRuleTotalSize {
			return nil, fmt.Errorf("%w: header rules: more than %d bytes of header names and values", model.ErrInvalid, MaxRuleTotalSize)
		}
		sortHeaders(rule.Headers)
		out = append(out, rule)
	}
	return out, nil
}

func sortHeaders(hs []RuleHeader) {
	for i := 1; i < len(hs); i++ {
		for j := i; j > 0 && hs[j].Name < hs[j-1].Name; j-- {
			hs[j], hs[j-1] = hs[j-1], hs[j]
		}
	}
}

// checkRuleValue checks a value template: a header value (no control
// characters, so no CR or LF that would split the request), at most
// MaxRuleValueSize bytes, every placeholder naming a valid secret name.
func checkRuleValue(v string) error {
	if len(v) > MaxRuleValueSize {
		return fmt.Errorf("%w: a header value is at most %d bytes", model.ErrInvalid, MaxRuleValueSize)
	}
	if !httpguts.ValidHeaderFieldValue(v) {
		return fmt.Errorf("%w: a header value must be usable in an HTTP header (no control characters, CR or LF)", model.ErrInvalid)
	}
	_, err := SecretRefs(v)
	return err
}

// SecretRefs returns the secret names a value template's placeholders
// name, in order. Errors wrap model.ErrInvalid.
func SecretRefs(v string) ([]Name, error) {
	var out []Name
	for rest := v; ; {
		i := strings.Index(rest, RulePlaceholderOpen)
		if i < 0 {
			return out, nil
		}
		rest = rest[i+len(RulePlaceholderOpen):]
		j := strings.IndexByte(rest, '}')
		if j < 0 {
			return nil, fmt.Errorf("%w: an unterminated %s…} placeholder", model.ErrInvalid, RulePlaceholderOpen)
		}
		n, err := ParseName(rest[:j])
		if err != nil {
			return nil, fmt.Errorf("placeholder %s%s}: %w", RulePlaceholderOpen, textclip.Bytes(rest[:j], maxEcho), err)
		}
		out = append(out, n)
		rest = rest[j+1:]
	}
}

// Resolve replaces a value template's placeholders by the values of the
// secrets lookup finds (the sandbox's project's, by name); a name it does
// not find is an error naming it (the header is then not sent).
func Resolve(v string, lookup func(Name) (Value, bool)) (string, error) {
	var b strings.Builder
	for rest := v; ; {
		i := strings.Index(rest, RulePlaceholderOpen)
		if i < 0 {
			b.WriteString(rest)
			return b.String(), nil
		}
		b.WriteString(rest[:i])
		rest = rest[i+len(RulePlaceholderOpen):]
		j := strings.IndexByte(rest, '}')
		if j < 0 {
			return "", fmt.Errorf("an unterminated placeholder")
		}
		n, err := ParseName(rest[:j])
		if err != nil {
			return "", err
		}
		val, ok := lookup(n)
		if !ok {
			return "", fmt.Errorf("the project has no secret %s", n)
		}
		b.Write(val)
		rest = rest[j+1:]
	}
}

// sealedRule is a rule's sealed form.
type sealedRule struct {
	Host    string            `json:"host"`
	Headers map[string]string `json:"headers"`
}

// headersAD binds sealed header rules to their project: they do not open
// as another project's.
func headersAD(project model.ProjectID) []byte {
	return []byte("airlock-egress-headers\x00" + string(project))
}

// SealHeaderRules seals a sandbox's rules for its policy (nil for none).
func (s *Sealer) SealHeaderRules(project model.ProjectID, rules []HeaderRule) (*policy.Headers, error) {
	if len(rules) == 0 {
		return nil, nil
	}
	out := &policy.Headers{}
	plain := make([]sealedRule, 0, len(rules))
	for _, r := range rules {
		hh := policy.HeaderHost{Host: r.Host.String()}
		sr := sealedRule{Host: r.Host.String(), Headers: map[string]string{}}
		for _, h := range r.Headers {
			hh.Names = append(hh.Names, h.Name)
			sr.Headers[h.Name] = h.Value
		}
		out.Hosts = append(out.Hosts, hh)
		plain = append(plain, sr)
	}
	b, err := json.Marshal(plain)
	if err != nil {
		return nil, fmt.Errorf("seal header rules: %w", err)
	}
	out.Sealed = s.sealAD(headersAD(project), b)
	wipe(b)
	return out, nil
}

// OpenHeaderRules opens a sandbox's sealed rules and parses them again.
func (s *Sealer) OpenHeaderRules(project model.ProjectID, h *policy.Headers) ([]HeaderRule, error) {
	if h == nil {
		return nil, nil
	}
	b, err := s.openAD(headersAD(project), h.Sealed)
	if err != nil {
		return nil, fmt.Errorf("header rules: %w", err)
	}
	defer wipe(b)
	var plain []sealedRule
	if err := json.Unmarshal(b, &plain); err != nil {
		return nil, fmt.Errorf("header rules: %w", err)
	}
	raw := make([]RawHeaderRule, len(plain))
	for i, p := range plain {
		raw[i] = RawHeaderRule{Host: p.Host, Headers: p.Headers}
	}
	return ParseHeaderRules(raw)
}

// wipe zeroes b (clear values once they are sealed or parsed).
func wipe(b []byte) {
	for i := range b {
		b[i] = 0
	}
}
