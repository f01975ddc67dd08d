// Package hostallow is the server's Host allow-list: the names a request's
// Host header may carry. It closes DNS rebinding: a web page of an
// attacker's domain whose DNS answer is then switched to the server's
// address (127.0.0.1, an internal IP) makes the browser send the page's
// own requests, with the page's Host, to the server, and read the answers
// of its unauthenticated routes (/healthz, /readyz, /openapi.json, the
// console's files, E2B's anonymous routes). A Host that is not a name of
// the server's is refused before any route sees the request.
//
// Allowed are: an IP address (a browser whose page's origin is the
// server's own address is not being rebound: the same-origin policy
// already holds), no Host at all (HTTP/1.0 without one), "localhost" and
// names under ".localhost" (browsers resolve them to loopback themselves,
// never by DNS), and the names of the List: the server's own (those of
// --listen, --advertise-url, --public-url, its host name, the E2B domain
// and the names under it) and the operator's (--allowed-hosts). A port in
// the Host is not compared.
package hostallow

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

// List is a parsed allow-list of host names. The zero List allows only
// what every List allows (addresses, localhost, no Host).
type List struct {
	any      bool
	names    map[string]bool
	suffixes []string // ".example.com" for "*.example.com"
}

// Parse parses patterns: a DNS name ("airlock.example.com"), every name
// under a domain ("*.example.com", not the domain itself), or "*" for any
// Host (the check off). Names are compared without case and without a
// trailing dot. Errors wrap model.ErrInvalid.
func Parse(patterns []string) (List, error) {
	l := List{names: map[string]bool{}}
	for _, p := range patterns {
		if err := l.add(p); err != nil {
			return List{}, err
		}
	}
	return l, nil
}

func (l *List) add(p string) error {
	if p == "*" {
		l.any = true
		return nil
	}
	rest, wild := strings.CutPrefix(p, "*.")
	n, err := normalize(rest)
	if err != nil {
		return fmt.Errorf("%w: allowed host %q: %s (give a name, *.domain or *)", model.ErrInvalid, textclip.Bytes(p, 80), err)
	}
	if _, err := netip.ParseAddr(n); err == nil {
		return nil // addresses are always allowed
	}
	if wild {
		l.suffixes = append(l.suffixes, "."+n)
	} else {
		l.names[n] = true
	}
	return nil
}

// Add adds patterns as Parse reads them; it is for the server's own names
// (an empty one is skipped).
func (l *List) Add(patterns ...string) error {
	if l.names == nil {
		l.names = map[string]bool{}
	}
	for _, p := range patterns {
		if p == "" {
			continue
		}
		if err := l.add(p); err != nil {
			return err
		}
	}
	return nil
}

// normalize lower-cases a DNS name and drops a trailing dot; it refuses
// what is not one (labels of letters, digits, '-' and '_', 1-63 bytes,
// not starting or ending with '-').
func normalize(s string) (string, error) {
	s = strings.ToLower(strings.TrimSuffix(s, "."))
	if s == "" || len(s) > 253 {
		return "", fmt.Errorf("not a host name")
	}
	if _, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return strings.Trim(s, "[]"), nil
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return "", fmt.Errorf("not a host name")
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", fmt.Errorf("character %q is not allowed in a host name", c)
			}
		}
	}
	return s, nil
}

// hostOnly is the Host header without its port (and an IPv6 address
// without its brackets).
func hostOnly(h string) string {
	if strings.HasPrefix(h, "[") {
		if i := strings.IndexByte(h, ']'); i > 0 {
			return h[1:i]
		}
		return h
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 && strings.Count(h, ":") == 1 {
		return h[:i]
	}
	return h
}

// Allows reports whether a request with Host header host may be served.
func (l List) Allows(host string) bool {
	if host == "" || l.any {
		return true
	}
	h := hostOnly(host)
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	n, err := normalize(h)
	if err != nil {
		return false
	}
	if n == "localhost" || strings.HasSuffix(n, ".localhost") || l.names[n] {
		return true
	}
	for _, s := range l.suffixes {
		if strings.HasSuffix(n, s) {
			return true
		}
	}
	return false
}

// Handler serves next the requests whose Host l allows, or extra (when
// not nil) accepts; any other gets 421 host_not_allowed and reaches no
// route.
func Handler(l List, extra func(host string) bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if l.Allows(r.Host) || (extra != nil && extra(r.Host)) {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Connection", "close")
		w.WriteHeader(apiv1.HTTPStatus(apiv1.CodeHostNotAllowed))
		_ = json.NewEncoder(w).Encode(apiv1.Error{
			Code: apiv1.CodeHostNotAllowed,
			Message: fmt.Sprintf("this server does not answer to the host %q; if it is one of its names, start it with --allowed-hosts %s (or --public-url)",
				textclip.Bytes(hostOnly(r.Host), 80), textclip.Bytes(hostOnly(r.Host), 80)),
		})
	})
}
