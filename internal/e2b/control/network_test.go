package control

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/egress/policy"
)

// e2bAllows is E2B's own decision, written from its documentation: a
// destination (a name, or "" for a bare address, and the address it
// reaches) is allowed when allowOut names it or denyOut does not; names in
// allowOut filter only when denyOut covers all traffic; without internet
// access denyOut is all traffic.
func e2bAllows(r e2bRules, name string, addr netip.Addr) bool {
	denyAll := r.internet != nil && !*r.internet
	inDeny := false
	for _, d := range r.denyOut {
		p := mustPrefix(d)
		denyAll = denyAll || p.Bits() == 0
		inDeny = inDeny || p.Contains(addr)
	}
	for _, a := range r.allowOut {
		if strings.Contains(a, "/") || isAddr(a) {
			if mustPrefix(a).Contains(addr) {
				return true
			}
			continue
		}
		if denyAll && name != "" && (a == name || (strings.HasPrefix(a, "*.") && strings.HasSuffix(name, a[1:]))) {
			return true
		}
	}
	return !denyAll && !inDeny
}

func isAddr(s string) bool { _, err := netip.ParseAddr(s); return err == nil }

func mustPrefix(s string) netip.Prefix {
	if !strings.Contains(s, "/") {
		a := netip.MustParseAddr(s)
		return netip.PrefixFrom(a, a.BitLen())
	}
	return netip.MustParsePrefix(s).Masked()
}

// airlockAllows compiles the translated policy and asks it as the proxy
// does: a bare address by Addr, a name (with its DNS binding) by Dest.
func airlockAllows(t *testing.T, pol *apiv1.EgressPolicy, serverDefault policy.Default, name string, addr netip.Addr, port uint16) bool {
	t.Helper()
	spec := policy.Spec{}
	if pol != nil {
		data, err := json.Marshal(pol)
		if err != nil {
			t.Fatal(err)
		}
		if spec, err = policy.ParseSpec(data); err != nil {
			t.Fatalf("the translation %+v is not a valid policy: %v", pol, err)
		}
	}
	p, err := policy.Compile(spec, nil, serverDefault)
	if err != nil {
		t.Fatal(err)
	}
	if name == "" {
		return p.Addr(addr, port).Allowed
	}
	return p.Dest(name, addr, port).Allowed
}

// The combinations E2B's SDK tests use (network.test.ts,
// internetAccess.test.ts) and a few more, each judged for every
// destination by E2B's rule and by the translated Airlock policy.
func TestE2BEgressDecisions(t *testing.T) {
	tr, fa := true, false
	cases := []struct {
		name string
		in   e2bRules
	}{
		{"allow only 1.1.1.1", e2bRules{denyOut: []string{"0.0.0.0/0"}, allowOut: []string{"1.1.1.1"}}},
		{"deny 8.8.8.8", e2bRules{denyOut: []string{"8.8.8.8"}}},
		{"deny all", e2bRules{denyOut: []string{"0.0.0.0/0"}}},
		{"allow wins over deny all", e2bRules{denyOut: []string{"0.0.0.0/0"}, allowOut: []string{"1.1.1.1", "8.8.8.8"}}},
		{"internet on", e2bRules{internet: &tr}},
		{"internet off", e2bRules{internet: &fa}},
		{"internet off, allow list", e2bRules{internet: &fa, allowOut: []string{"example.com", "*.pkg.example", "203.0.113.0/24"}}},
		{"update to nothing", e2bRules{internet: &tr}},
		{"allow wins inside a denied block", e2bRules{denyOut: []string{"8.8.0.0/16", "1.0.0.0/8"}, allowOut: []string{"8.8.8.8", "1.1.0.0/16"}}},
		{"allow all wins over deny all", e2bRules{denyOut: []string{"0.0.0.0/0"}, allowOut: []string{"0.0.0.0/0"}}},
		{"names only filter with deny all", e2bRules{denyOut: []string{"203.0.113.0/24"}, allowOut: []string{"example.com"}}},
	}
	dests := []struct {
		name string
		addr string
	}{
		{"", "1.1.1.1"}, {"", "8.8.8.8"}, {"", "8.8.4.4"}, {"", "1.1.2.3"}, {"", "1.2.3.4"}, {"", "203.0.113.9"},
		{"example.com", "203.0.113.9"}, {"example.com", "198.51.100.4"}, {"a.pkg.example", "198.51.100.5"},
		{"other.example", "198.51.100.6"}, {"connectivitycheck.gstatic.com", "142.250.1.1"},
	}
	for _, c := range cases {
		pol, err := e2bEgress(c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for _, d := range dests {
			addr := netip.MustParseAddr(d.addr)
			for _, port := range []uint16{80, 443} {
				want := e2bAllows(c.in, d.name, addr)
				if got := airlockAllows(t, pol, policy.None, d.name, addr, port); got != want {
					t.Errorf("%s: %q %s:%d: Airlock allows=%v, E2B allows=%v (policy %+v)", c.name, d.name, d.addr, port, got, want, pol)
				}
			}
		}
	}
}

// TestE2BEgressAlwaysDenied: no E2B rule opens loopback, private ranges
// or the metadata address, by address or by a name bound to one.
func TestE2BEgressAlwaysDenied(t *testing.T) {
	tr := true
	for _, in := range []e2bRules{
		{allowOut: []string{"169.254.169.254", "127.0.0.1", "10.0.0.0/8", "0.0.0.0/0", "metadata.google.internal"}},
		{denyOut: []string{"0.0.0.0/0"}, allowOut: []string{"169.254.169.254/32", "127.0.0.0/8", "192.168.0.0/16", "100.64.0.0/10"}},
		{internet: &tr},
	} {
		pol, err := e2bEgress(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range []string{"169.254.169.254", "127.0.0.1", "10.1.2.3", "192.168.1.1", "100.64.0.1", "172.16.0.1"} {
			addr := netip.MustParseAddr(a)
			for _, name := range []string{"", "metadata.google.internal"} {
				if airlockAllows(t, pol, policy.Public, name, addr, 80) {
					t.Errorf("%+v allows %q at %s", in, name, a)
				}
			}
		}
	}
}

func TestE2BEgressTranslation(t *testing.T) {
	fa := false
	tests := []struct {
		name string
		in   e2bRules
		want *apiv1.EgressPolicy
	}{
		{"nothing: the server's default", e2bRules{}, nil},
		{"no internet", e2bRules{internet: &fa}, &apiv1.EgressPolicy{Default: "none"}},
		{"allow list", e2bRules{denyOut: []string{"0.0.0.0/0"}, allowOut: []string{"1.1.1.1", "Example.COM", "8.8.8.0/24"}},
			&apiv1.EgressPolicy{Default: "none", Allow: []string{"1.1.1.1", "example.com", "8.8.8.0/24"}}},
		{"deny list", e2bRules{denyOut: []string{"8.8.8.8"}}, &apiv1.EgressPolicy{Default: "public", Allow: []string{"0.0.0.0/0"}, Deny: []string{"8.8.8.8/32"}}},
		{"allow covers deny", e2bRules{denyOut: []string{"8.8.8.8"}, allowOut: []string{"8.8.0.0/16"}},
			&apiv1.EgressPolicy{Default: "public", Allow: []string{"0.0.0.0/0", "8.8.0.0/16"}}},
	}
	for _, tt := range tests {
		got, err := e2bEgress(tt.in)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if (got == nil) != (tt.want == nil) || got != nil && (got.Default != tt.want.Default || !slices.Equal(got.Allow, tt.want.Allow) || !slices.Equal(got.Deny, tt.want.Deny)) {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestSubtractPrefixes(t *testing.T) {
	got := subtractPrefixes(netip.MustParsePrefix("0.0.0.0/0"), []netip.Prefix{netip.MustParsePrefix("128.0.0.0/2"), netip.MustParsePrefix("::/0")})
	want := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/1"), netip.MustParsePrefix("192.0.0.0/2")}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	// Every address of the result is in p and in no minus; every other
	// address of p is in a minus.
	p := netip.MustParsePrefix("10.0.0.0/24")
	minus := []netip.Prefix{netip.MustParsePrefix("10.0.0.7/32"), netip.MustParsePrefix("10.0.0.64/27"), netip.MustParsePrefix("9.0.0.0/8")}
	out := subtractPrefixes(p, minus)
	for a := p.Addr(); p.Contains(a); a = a.Next() {
		inOut := slices.ContainsFunc(out, func(q netip.Prefix) bool { return q.Contains(a) })
		inMinus := slices.ContainsFunc(minus, func(q netip.Prefix) bool { return q.Contains(a) })
		if inOut == inMinus {
			t.Fatalf("%s: in the result %v, in minus %v", a, inOut, inMinus)
		}
	}
}

func TestMaskedHost(t *testing.T) {
	for _, tt := range []struct {
		mask string
		port int
		want string // "": refused
	}{
		{"custom-host.example.com:${PORT}", 8080, "custom-host.example.com:8080"},
		{"custom-host.example.com", 3000, "custom-host.example.com"},
		{"203.0.113.5:${PORT}", 80, "203.0.113.5:80"},
		{"[2001:db8::1]:${PORT}", 80, "[2001:db8::1]:80"},
		{"${PORT}.example.com", 80, "80.example.com"},
		{"a b", 80, ""},
		{"evil.example/x", 80, ""},
		{"user@evil.example", 80, ""},
		{"host:0", 80, ""},
		{"host:abc", 80, ""},
		{"*.example.com", 80, ""},
		{"", 80, ""},
		{"h\r\nX-Injected: 1", 80, ""},
	} {
		got, err := MaskedHost(tt.mask, tt.port)
		if (err != nil) != (tt.want == "") || got != tt.want && tt.want != "" {
			t.Errorf("MaskedHost(%q, %d) = %q, %v; want %q", tt.mask, tt.port, got, err, tt.want)
		}
	}
}

// egressNative is a native API holding one sandbox of the caller's
// project (other IDs are another project's: 404) that records the policy
// PUT to it.
type egressNative struct {
	mu  sync.Mutex
	id  string
	put []apiv1.EgressPolicy
}

func (f *egressNative) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if r.Method == http.MethodPut && r.URL.Path == "/v1/sandboxes/"+f.id+"/egress" {
		var p apiv1.EgressPolicy
		_ = json.NewDecoder(r.Body).Decode(&p)
		f.put = append(f.put, p)
		_ = json.NewEncoder(w).Encode(apiv1.SandboxEgress{Policy: p, Effective: p, Live: true})
		return
	}
	w.WriteHeader(http.StatusNotFound)
	_ = json.NewEncoder(w).Encode(apiv1.Error{Code: apiv1.CodeNotFound, Message: "sandbox not found"})
}

func TestUpdateNetwork(t *testing.T) {
	mine, theirs := "sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa", "sbx_bbbbbbbbbbbbbbbbbbbbbbbbbb"
	native := &egressNative{id: mine}
	h, _ := newTestHandler(t, native)
	put := func(id, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPut, "/sandboxes/"+id+"/network", strings.NewReader(body))
		req.Header.Set("X-API-Key", "k")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	if rec := put(mine, `{"denyOut":["8.8.8.8"]}`); rec.Code != http.StatusNoContent {
		t.Fatalf("update: %d %s", rec.Code, rec.Body)
	}
	if rec := put(mine, `{"rules":{"api.example.com":[{"transform":{"headers":{"Authorization":"Bearer ${e2b.secrets.tok}"}}}]}}`); rec.Code != http.StatusNoContent {
		t.Fatalf("update with rules: %d %s", rec.Code, rec.Body)
	}
	if rec := put(mine, `{}`); rec.Code != http.StatusNoContent {
		t.Fatalf("empty update: %d %s", rec.Code, rec.Body)
	}
	if rec := put(mine, `{"rules":{"a.example":[{"transform":{"headers":{"A":"${e2b.identity.tokens.aws}"}}}]}}`); rec.Code != http.StatusNotImplemented {
		t.Fatalf("identity token: %d %s", rec.Code, rec.Body)
	}
	// Another project's sandbox (or one that does not exist): 404, and
	// nothing is changed.
	if rec := put(theirs, `{"allowOut":["0.0.0.0/0"]}`); rec.Code != http.StatusNotFound {
		t.Fatalf("another project's sandbox: %d %s", rec.Code, rec.Body)
	}
	native.mu.Lock()
	defer native.mu.Unlock()
	want := []apiv1.EgressPolicy{
		{Default: "public", Allow: []string{"0.0.0.0/0"}, Deny: []string{"8.8.8.8/32"}},
		{Default: "public", Allow: []string{"0.0.0.0/0"}, Headers: []apiv1.HeaderRule{{Host: "api.example.com", Headers: map[string]string{"Authorization": "Bearer ${secrets.tok}"}}}},
		{Default: "public", Allow: []string{"0.0.0.0/0"}}, // E2B: omitted fields clear the rules
	}
	if len(native.put) != len(want) {
		t.Fatalf("policies put: %+v", native.put)
	}
	for i := range want {
		g := native.put[i]
		if g.Default != want[i].Default || !slices.Equal(g.Allow, want[i].Allow) || !slices.Equal(g.Deny, want[i].Deny) || !reflect.DeepEqual(g.Headers, want[i].Headers) {
			t.Fatalf("put %d: %+v, want %+v", i, g, want[i])
		}
	}
}
