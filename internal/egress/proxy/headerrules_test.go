package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// TestHeaderRules: a sandbox's own header rules (what the server's
// SecretSource appends after the project's secrets, placeholders resolved)
// are set on intercepted requests to their hosts only, replace the
// guest's header of the same name, never reach a destination the policy
// or the always-denied addresses refuse, and a rule whose secret is
// missing refuses its host's requests.
func TestHeaderRules(t *testing.T) {
	e := newEnv(t, envOpts{policy: `{"default":"none","allow":["api.test","other.test","private.test","gone.test"]}`})
	var privateHits atomic.Int32
	for _, n := range []struct{ name, ip string }{{"api.test", "203.0.113.50"}, {"other.test", "203.0.113.51"}, {"gone.test", "203.0.113.52"}} {
		e.httpsUpstream(n.ip, true, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s x-token=%q auth=%q", n.name, r.Header.Values("X-Token"), r.Header.Get("Authorization"))
		}), n.name)
		e.bind(n.name, n.ip)
	}
	// private.test resolves to a private address: always denied, whatever
	// the policy allows.
	e.httpsUpstream("10.99.0.5", true, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		privateHits.Add(1)
		fmt.Fprintf(w, "private x-token=%q", r.Header.Get("X-Token"))
	}), "private.test")
	e.bind("private.test", "10.99.0.5")
	e.secrets[e.sb.ID] = []Secret{
		{Name: "header rule api.test", Hosts: []string{"api.test"}, Header: "X-Token", Value: "tok-123"},
		{Name: "header rule api.test", Hosts: []string{"api.test"}, Header: "Authorization", Value: "Bearer resolved-secret"},
		{Name: "header rule private.test", Hosts: []string{"private.test"}, Header: "X-Token", Value: "tok-123"},
		{Name: "header rule gone.test", Hosts: []string{"gone.test"}, Header: "X-Token", Refuse: "the project has no secret gone"},
	}
	c := e.client(clientOpts{h2: true})
	for _, tc := range []struct {
		name       string
		url        string
		hdr        []string
		code       int
		contains   string
		notContain string
	}{
		{name: "set on its host", url: "https://api.test/", code: 200, contains: `x-token=["tok-123"] auth="Bearer resolved-secret"`},
		{name: "replaces the guest's own header", url: "https://api.test/", hdr: []string{"X-Token", "guest-value"}, code: 200, contains: `x-token=["tok-123"]`, notContain: "guest-value"},
		{name: "not on another host", url: "https://other.test/", code: 200, contains: `x-token=[] auth=""`},
		{name: "not in cleartext", url: "http://api.test/", code: 0},
		{name: "never to an always-denied address", url: "https://private.test/", code: -1},
		{name: "missing secret refuses", url: "https://gone.test/", code: 403, contains: "header-rule", notContain: "gone.test x-token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", tc.url, nil)
			for i := 0; i+1 < len(tc.hdr); i += 2 {
				req.Header.Set(tc.hdr[i], tc.hdr[i+1])
			}
			resp, err := c.Do(req)
			switch tc.code {
			case 0: // no plain upstream for api.test: whatever answers, never the header
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if strings.Contains(string(b), "tok-123") {
						t.Fatalf("cleartext got the header: %s", b)
					}
				}
				return
			case -1: // closed before any handshake, or refused: the upstream sees nothing
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode == 200 || strings.Contains(string(b), "tok-123") {
						t.Fatalf("always-denied destination answered %d %s", resp.StatusCode, b)
					}
				}
				if n := privateHits.Load(); n != 0 {
					t.Fatalf("the always-denied upstream got %d requests", n)
				}
				return
			}
			if err != nil {
				t.Fatalf("GET %s: %v", tc.url, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body := string(b)
			if resp.StatusCode != tc.code || !strings.Contains(body, tc.contains) || (tc.notContain != "" && strings.Contains(body, tc.notContain)) {
				t.Fatalf("got %d %q; want %d containing %q, not %q", resp.StatusCode, body, tc.code, tc.contains, tc.notContain)
			}
		})
	}
}
