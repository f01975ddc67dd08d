package proxy

import (
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/airlockdev/airlock/internal/model"
)

// Secret is a credential the proxy adds to a sandbox's requests to some hosts; the sandbox only
// ever sees Placeholder.
type Secret struct {
	Name        string
	Hosts       []string // exact names, or "*.suffix" for the names under suffix (not suffix itself)
	Header      string   // e.g. "Authorization"
	Value       string   // the full header value, e.g. "Bearer sk-..."
	Placeholder string   // what the sandbox holds, e.g. "airlock-secret:NAME"; "" = none
}

// SecretSource gives a sandbox's secrets. It is called on every request, so it should answer
// from memory.
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
