// Package secrets is credential injection's data: a project's secrets, the
// hosts each may be sent to and how the proxy applies it (a request header
// whose value is a template around the secret), and their sealing at rest.
//
// A secret's value exists in clear only in the server's memory: the store
// keeps it sealed with AES-256-GCM under the server's 32-byte key
// (DATA/secrets.key, see OpenKey), with the secret's project and name as
// associated data so that a sealed value copied to another row does not
// open. The API never returns it and nothing here logs it (Value redacts
// itself in fmt, slog and JSON). A sandbox sees only the placeholder
// "airlock-secret-NAME", which the proxy replaces on requests to the
// secret's hosts and blocks (and logs) on any other host.
package secrets

import (
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/publicsuffix"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

// Name is a secret's name: 1-64 of [A-Za-z0-9_-], starting with a letter or
// digit. It appears in the placeholder, so it needs no escaping anywhere.
type Name string

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// ParseName checks a secret name. Errors wrap model.ErrInvalid.
func ParseName(s string) (Name, error) {
	if !nameRE.MatchString(s) {
		return "", fmt.Errorf("%w: secret name %q: 1-64 of letters, digits, '_' and '-', starting with a letter or digit", model.ErrInvalid, textclip.Bytes(s, maxEcho))
	}
	return Name(s), nil
}

// PlaceholderPrefix starts every placeholder.
const PlaceholderPrefix = "airlock-secret-"

// Placeholder is what a sandbox uses in place of the secret's value.
func (n Name) Placeholder() string { return PlaceholderPrefix + string(n) }

// Host is a host pattern a secret may be sent to: an exact DNS name
// ("api.example.com") or every name under a suffix ("*.example.com", which
// does not match example.com itself). Neither the name nor a wildcard's
// suffix is a public suffix (see ParseHost).
type Host struct {
	name     string // normalized, without "*."
	wildcard bool
}

// ParseHost parses a host pattern. Errors wrap model.ErrInvalid.
//
// A name that is a public suffix, and a wildcard over one, are refused:
// names under a public suffix ("com", "co.uk", "github.io",
// "s3.amazonaws.com") belong to whoever registers them, so "*.com" would
// hand the secret to any site a sandbox names. The list is the Public
// Suffix List as golang.org/x/net/publicsuffix carries it (its ICANN and
// private sections; a name under no listed suffix counts its last label
// as one, so a single label is refused too).
func ParseHost(s string) (Host, error) {
	rest, wild := strings.CutPrefix(s, "*.")
	n, err := policy.NormalizeName(rest)
	if err != nil {
		return Host{}, fmt.Errorf("secret host: %w", err)
	}
	if suffix, _ := publicsuffix.PublicSuffix(n); suffix == n {
		what := "is a public suffix"
		if wild {
			what = "is a wildcard over a public suffix"
		}
		return Host{}, fmt.Errorf("%w: secret host %q %s (%s): anyone may register names under it; name the hosts the secret is for, e.g. api.example.com or *.example.com",
			model.ErrInvalid, textclip.Bytes(s, maxEcho), what, n)
	}
	return Host{name: n, wildcard: wild}, nil
}

func (h Host) String() string {
	if h.wildcard {
		return "*." + h.name
	}
	return h.name
}

// Match reports whether the request host (a name; a port, if any, must be
// stripped) is one the pattern names.
func (h Host) Match(host string) bool {
	n, err := policy.NormalizeName(host)
	if err != nil {
		return false
	}
	if h.wildcard {
		return strings.HasSuffix(n, "."+h.name)
	}
	return n == h.name
}

// Limits of a secret.
const (
	MaxHosts     = 32
	MaxValueSize = 16 << 10
	MaxFormatLen = 256
)

// DefaultHeader is the header a secret is applied to when none is given.
const DefaultHeader = "Authorization"

// ValueMarker stands for the secret's value in a Format.
const ValueMarker = "{value}"

// DefaultFormat is the header value when none is given: "Bearer {value}"
// for Authorization, "{value}" for any other header.
func DefaultFormat(header string) string {
	if strings.EqualFold(header, DefaultHeader) {
		return "Bearer " + ValueMarker
	}
	return ValueMarker
}

// forbiddenHeaders are headers that would change how the request is
// framed or routed rather than authenticate it.
var forbiddenHeaders = map[string]bool{
	"host": true, "content-length": true, "transfer-encoding": true, "connection": true,
	"upgrade": true, "te": true, "trailer": true, "keep-alive": true, "proxy-connection": true,
}

// ParseHeader checks the name of the header a secret is applied to.
func ParseHeader(s string) (string, error) {
	if s == "" {
		return DefaultHeader, nil
	}
	if !httpguts.ValidHeaderFieldName(s) || len(s) > 128 {
		return "", fmt.Errorf("%w: secret header %q is not a valid header name", model.ErrInvalid, textclip.Bytes(s, maxEcho))
	}
	if forbiddenHeaders[strings.ToLower(s)] {
		return "", fmt.Errorf("%w: secret header %q frames or routes the request; it cannot carry a secret", model.ErrInvalid, s)
	}
	return s, nil
}

// ParseFormat checks a header value template: printable text holding
// {value} exactly once. "" gives DefaultFormat(header).
func ParseFormat(s, header string) (string, error) {
	if s == "" {
		return DefaultFormat(header), nil
	}
	if len(s) > MaxFormatLen || strings.Count(s, ValueMarker) != 1 || !httpguts.ValidHeaderFieldValue(s) {
		return "", fmt.Errorf("%w: secret format must be a header value of at most %d bytes holding %s exactly once", model.ErrInvalid, MaxFormatLen, ValueMarker)
	}
	return s, nil
}

// Value is a secret's clear value. It never prints, logs or marshals as
// itself.
type Value []byte

const redacted = "[redacted]"

func (Value) String() string               { return redacted }
func (Value) GoString() string             { return redacted }
func (Value) LogValue() slog.Value         { return slog.StringValue(redacted) }
func (Value) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }
func (Value) MarshalText() ([]byte, error) { return []byte(redacted), nil }
func (v Value) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// ParseValue checks a clear value: not empty, at most MaxValueSize bytes,
// usable inside a header value, and not itself a placeholder.
func ParseValue(b []byte) (Value, error) {
	switch {
	case len(b) == 0:
		return nil, fmt.Errorf("%w: a secret's value must not be empty", model.ErrInvalid)
	case len(b) > MaxValueSize:
		return nil, fmt.Errorf("%w: a secret's value is at most %d bytes", model.ErrInvalid, MaxValueSize)
	case !httpguts.ValidHeaderFieldValue(string(b)):
		return nil, fmt.Errorf("%w: a secret's value must be usable in an HTTP header (no control characters or newlines)", model.ErrInvalid)
	case strings.Contains(string(b), PlaceholderPrefix):
		return nil, fmt.Errorf("%w: a secret's value must not contain %q", model.ErrInvalid, PlaceholderPrefix)
	}
	return Value(b), nil
}

// Secret is one secret of a project, its value in clear (only in memory).
type Secret struct {
	Project model.ProjectID
	Name    Name
	Hosts   []Host
	Header  string // the request header the proxy sets
	Format  string // the header's value, ValueMarker standing for Value
	Value   Value
}

// Placeholder is the text the sandbox sees instead of the value.
func (s Secret) Placeholder() string { return s.Name.Placeholder() }

// AppliesTo reports whether the secret may be sent to host.
func (s Secret) AppliesTo(host string) bool {
	for _, h := range s.Hosts {
		if h.Match(host) {
			return true
		}
	}
	return false
}

// HeaderValue is the value of Header on a request to one of Hosts.
func (s Secret) HeaderValue() string {
	return strings.Replace(s.Format, ValueMarker, string(s.Value), 1)
}

// ParseHosts parses a secret's host list: at most MaxHosts patterns. A
// secret without hosts is injected nowhere by itself: only sandboxes'
// header rules use it, through their "${secrets.NAME}" placeholders.
func ParseHosts(in []string) ([]Host, error) {
	if len(in) > MaxHosts {
		return nil, fmt.Errorf("%w: a secret has at most %d hosts", model.ErrInvalid, MaxHosts)
	}
	out := make([]Host, 0, len(in))
	for _, s := range in {
		h, err := ParseHost(s)
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

// HostStrings is the text form of hosts.
func HostStrings(hosts []Host) []string {
	out := make([]string, len(hosts))
	for i, h := range hosts {
		out[i] = h.String()
	}
	return out
}

// Limits of a secret's metadata (E2B's).
const (
	MaxMetadataEntries  = 32
	MaxMetadataKeyLen   = 128
	MaxMetadataValueLen = 1024
	MaxMetadataSize     = 8192
)

// ParseMetadata checks a secret's metadata: at most MaxMetadataEntries
// entries of non-empty keys up to MaxMetadataKeyLen bytes and values up to
// MaxMetadataValueLen, MaxMetadataSize bytes in all, valid UTF-8 without
// control characters. Errors wrap model.ErrInvalid; empty gives nil.
func ParseMetadata(in map[string]string) (map[string]string, error) {
	if len(in) == 0 {
		return nil, nil
	}
	if len(in) > MaxMetadataEntries {
		return nil, fmt.Errorf("%w: secret metadata has %d entries, at most %d", model.ErrInvalid, len(in), MaxMetadataEntries)
	}
	total := 0
	for k, v := range in {
		switch {
		case k == "" || len(k) > MaxMetadataKeyLen:
			return nil, fmt.Errorf("%w: secret metadata keys are 1 to %d bytes", model.ErrInvalid, MaxMetadataKeyLen)
		case len(v) > MaxMetadataValueLen:
			return nil, fmt.Errorf("%w: secret metadata values are at most %d bytes", model.ErrInvalid, MaxMetadataValueLen)
		case !printable(k) || !printable(v):
			return nil, fmt.Errorf("%w: secret metadata must be UTF-8 text without control characters", model.ErrInvalid)
		}
		total += len(k) + len(v)
	}
	if total > MaxMetadataSize {
		return nil, fmt.Errorf("%w: secret metadata is at most %d bytes in all", model.ErrInvalid, MaxMetadataSize)
	}
	return in, nil
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// maxEcho is how many bytes of a value an error message quotes (textclip.Bytes).
const maxEcho = 80
