package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/airlockdev/airlock/internal/model"
)

// Secret is a credential the proxy adds to a sandbox's requests to some hosts; the sandbox only
// ever sees Placeholder. Formatting (fmt, any verb), slog and JSON show "[REDACTED]" for Value.
type Secret struct {
	Name        string
	Hosts       []string // exact names, or "*.suffix" for the names under suffix (not suffix itself)
	Header      string   // e.g. "Authorization"
	Value       string   // the full header value, e.g. "Bearer sk-..."
	Placeholder string   // what the sandbox holds, e.g. "airlock-secret:NAME"; "" = none
	// Refuse, when set, is why a request to Hosts is refused rather than
	// sent without the header (a sandbox's header rule whose secret is
	// missing: the destination would otherwise see a request that lacks
	// the credential it was meant to carry).
	Refuse string
}

// redacted replaces a secret's Value wherever a Secret is formatted or logged.
const redacted = "[REDACTED]"

// redactedSecret is a Secret with its value replaced, for printing.
type redactedSecret struct {
	Name        string
	Hosts       []string
	Header      string
	Value       string
	Placeholder string
	Refuse      string
}

func (s Secret) redact() redactedSecret {
	v := ""
	if s.Value != "" {
		v = redacted
	}
	return redactedSecret{Name: s.Name, Hosts: s.Hosts, Header: s.Header, Value: v, Placeholder: s.Placeholder, Refuse: s.Refuse}
}

// String describes the secret without its value.
func (s Secret) String() string {
	return fmt.Sprintf("%+v", s.redact())
}

// GoString describes the secret without its value (for %#v).
func (s Secret) GoString() string {
	return fmt.Sprintf("proxy.Secret%+v", s.redact())
}

// Format prints the secret without its value, whatever the verb and flags.
func (s Secret) Format(f fmt.State, verb rune) {
	r := s.redact()
	switch {
	case verb == 'v' && f.Flag('#'):
		_, _ = fmt.Fprintf(f, "proxy.Secret%#v", r)
	case verb == 'v' && f.Flag('+'):
		_, _ = fmt.Fprintf(f, "%+v", r)
	default:
		_, _ = fmt.Fprintf(f, "%v", r)
	}
}

// LogValue logs the secret without its value.
func (s Secret) LogValue() slog.Value {
	r := s.redact()
	return slog.GroupValue(
		slog.String("name", r.Name),
		slog.Any("hosts", r.Hosts),
		slog.String("header", r.Header),
		slog.String("value", r.Value),
		slog.String("placeholder", r.Placeholder),
	)
}

// MarshalJSON encodes the secret without its value (a slog JSON handler encodes a slice of
// secrets this way).
func (s Secret) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(s.redact())
	if err != nil {
		return nil, fmt.Errorf("proxy: secret %q: %w", s.Name, err)
	}
	return b, nil
}

// SecretSource gives a sandbox's secrets: its project's, then its own header rules (which
// come later, so that they win on the same header). It is called on every request, so it
// should answer from memory.
type SecretSource interface {
	SecretsFor(sb model.SandboxID) []Secret
}

// MatchesHost reports whether the secret may be sent to the normalized host name.
func (s Secret) MatchesHost(host string) bool {
	for _, h := range s.Hosts {
		h = strings.ToLower(strings.TrimSuffix(h, "."))
		if suffix, ok := strings.CutPrefix(h, "*."); ok {
			if len(host) > len(suffix)+1 && strings.HasSuffix(host, "."+suffix) {
				return true
			}
		} else if host == h {
			return true
		}
	}
	return false
}

// placeholderIn returns the first placeholder of ps found in the request's URL or headers.
func placeholderIn(r *http.Request, ps []string) (string, bool) {
	if len(ps) == 0 {
		return "", false
	}
	check := func(s string) (string, bool) {
		for _, p := range ps {
			if strings.Contains(s, p) {
				return p, true
			}
		}
		return "", false
	}
	if p, ok := check(r.URL.String()); ok {
		return p, true
	}
	if p, ok := check(r.RequestURI); ok {
		return p, true
	}
	for k, vs := range r.Header {
		if p, ok := check(k); ok {
			return p, true
		}
		for _, v := range vs {
			if p, ok := check(v); ok {
				return p, true
			}
		}
	}
	for _, vs := range r.Trailer {
		for _, v := range vs {
			if p, ok := check(v); ok {
				return p, true
			}
		}
	}
	return "", false
}

var errPlaceholderInBody = errors.New("a secret placeholder in the request body")

// bodyScanner passes a request body through unchanged while looking for placeholders in its
// first limit bytes. When one completes inside a chunk, that chunk is withheld and the read
// fails, which aborts the upstream request before the placeholder reaches it. Nothing is held
// back otherwise, so streaming request bodies keep flowing.
type bodyScanner struct {
	rc       io.ReadCloser
	ps       []string
	limit    int
	seen     int
	tail     []byte // the last maxLen-1 bytes scanned, for placeholders across reads
	maxLen   int
	found    string
	onDetect func(placeholder string)
}

func newBodyScanner(rc io.ReadCloser, ps []string, limit int, onDetect func(string)) *bodyScanner {
	m := 0
	for _, p := range ps {
		m = max(m, len(p))
	}
	return &bodyScanner{rc: rc, ps: ps, limit: limit, maxLen: m, onDetect: onDetect}
}

func (b *bodyScanner) Read(p []byte) (int, error) {
	if b.found != "" {
		return 0, errPlaceholderInBody
	}
	n, err := b.rc.Read(p)
	if n > 0 && b.seen < b.limit {
		window := append(b.tail, p[:n]...)
		for _, ph := range b.ps {
			if strings.Contains(string(window), ph) {
				b.found = ph
				b.onDetect(ph)
				return 0, errPlaceholderInBody
			}
		}
		b.seen += n
		if keep := b.maxLen - 1; keep > 0 {
			if len(window) > keep {
				window = window[len(window)-keep:]
			}
			b.tail = append(b.tail[:0], window...)
		}
	}
	return n, err
}

func (b *bodyScanner) Close() error { return b.rc.Close() }
