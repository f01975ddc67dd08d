package policy

import (
	"encoding/json"
	"errors"
	"net/netip"
	"testing"

	"github.com/airlockdev/airlock/internal/model"
)

func TestParseRule(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want "" = error
	}{
		{"pypi.org", "pypi.org"},
		{"PyPI.org.", "pypi.org"},
		{"*.github.com:443", "*.github.com:443"},
		{"example.com:80", "example.com:80"},
		{"203.0.113.7", "203.0.113.7"},
		{"203.0.113.7:22", "203.0.113.7:22"},
		{"203.0.113.9/24:22", "203.0.113.0/24:22"},
		{"[2001:db8::1]:443", "[2001:db8::1]:443"},
		{"2001:db8::1", "2001:db8::1"},
		{"2001:db8::/32", "2001:db8::/32"},
		{"[2001:db8::/32]:22", "[2001:db8::/32]:22"},
		{"::ffff:203.0.113.7", "203.0.113.7"},
		{"under_score.example", "under_score.example"},
		{"", ""},
		{"*", ""},
		{"*.com", ""},
		{"a..b", ""},
		{"example.com:0", ""},
		{"example.com:65536", ""},
		{"example.com:08", ""},
		{"example.com:+8", ""},
		{"exa mple.com", ""},
		{"example.com:80:90", ""},
		{"[example.com]:80", ""},
		{"[2001:db8::1", ""},
		{"[2001:db8::1]x", ""},
		{"fe80::1%eth0", ""},
		{"10.0.0.0/33", ""},
		{"*.*.example.com", ""},
	} {
		r, err := ParseRule(tc.in)
		if tc.want == "" {
			if err == nil {
				t.Errorf("ParseRule(%q) = %v, want error", tc.in, r)
			} else if !errors.Is(err, model.ErrInvalid) {
				t.Errorf("ParseRule(%q) error %v does not wrap ErrInvalid", tc.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseRule(%q): %v", tc.in, err)
			continue
		}
		if got := r.String(); got != tc.want {
			t.Errorf("ParseRule(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if again, err := ParseRule(r.String()); err != nil || again != r {
			t.Errorf("round trip of %q: %v, %v", r, again, err)
		}
	}
}

func mustRules(t *testing.T, ss ...string) []Rule {
	t.Helper()
	var out []Rule
	for _, s := range ss {
		r, err := ParseRule(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func TestDecisions(t *testing.T) {
	a := netip.MustParseAddr
	pub := Spec{Deny: mustRules(t, "evil.example", "*.blocked.example", "mail.example:25", "198.51.100.0/24")}
	none := Spec{Default: None, Allow: mustRules(t, "pypi.org", "*.github.com:443", "203.0.113.0/24:22", "[2001:db8::/32]:443")}
	for _, tc := range []struct {
		name string
		spec Spec
		q    func(p *Policy) Decision
		want bool
		rule string
	}{
		{"public name", pub, func(p *Policy) Decision { return p.Name("ok.example", 0) }, true, "default public"},
		{"public denied name", pub, func(p *Policy) Decision { return p.Name("EVIL.example.", 443) }, false, "deny evil.example"},
		{"wildcard deny covers subdomain", pub, func(p *Policy) Decision { return p.Name("a.b.blocked.example", 80) }, false, "deny *.blocked.example"},
		{"wildcard does not cover apex", pub, func(p *Policy) Decision { return p.Name("blocked.example", 80) }, true, "default public"},
		{"deny with port does not stop resolution", pub, func(p *Policy) Decision { return p.Name("mail.example", 0) }, true, "default public"},
		{"deny with port stops that port", pub, func(p *Policy) Decision { return p.Name("mail.example", 25) }, false, "deny mail.example:25"},
		{"public bare address needs a rule", pub, func(p *Policy) Decision { return p.Addr(a("192.0.2.1"), 443) }, false, "no-address-rule"},
		{"metadata always denied", pub, func(p *Policy) Decision { return p.Dest("ok.example", a("169.254.169.254"), 80) }, false, "always-denied"},
		{"mapped private always denied", pub, func(p *Policy) Decision { return p.Addr(a("::ffff:10.1.2.3"), 80) }, false, "always-denied"},
		{"cidr deny beats name", pub, func(p *Policy) Decision { return p.Dest("ok.example", a("198.51.100.7"), 443) }, false, "deny 198.51.100.0/24"},
		{"invalid name", pub, func(p *Policy) Decision { return p.Name("bad name", 0) }, false, "invalid-name"},
		{"none allows listed", none, func(p *Policy) Decision { return p.Name("pypi.org", 443) }, true, "allow pypi.org"},
		{"none denies others", none, func(p *Policy) Decision { return p.Name("example.org", 0) }, false, "default none"},
		{"port rule lets name resolve", none, func(p *Policy) Decision { return p.Name("api.github.com", 0) }, true, "allow *.github.com:443"},
		{"port rule other port denied", none, func(p *Policy) Decision { return p.Name("api.github.com", 80) }, false, "default none"},
		{"cidr allow with port", none, func(p *Policy) Decision { return p.Addr(a("203.0.113.9"), 22) }, true, "allow 203.0.113.0/24:22"},
		{"cidr allow other port", none, func(p *Policy) Decision { return p.Addr(a("203.0.113.9"), 23) }, false, "no-address-rule"},
		{"v6 cidr allow", none, func(p *Policy) Decision { return p.Addr(a("2001:db8::5"), 443) }, true, "allow [2001:db8::/32]:443"},
		{"v6 link-local", none, func(p *Policy) Decision { return p.Addr(a("fe80::1"), 443) }, false, "always-denied"},
		{"invalid addr", none, func(p *Policy) Decision { return p.Addr(netip.Addr{}, 443) }, false, "always-denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Compile(tc.spec, nil, Public)
			if err != nil {
				t.Fatal(err)
			}
			d := tc.q(p)
			if d.Allowed != tc.want || d.Rule != tc.rule {
				t.Fatalf("got %+v, want allowed=%v rule=%q", d, tc.want, tc.rule)
			}
			if d.Reason == "" {
				t.Fatal("no reason")
			}
		})
	}
}

func TestCompileProfiles(t *testing.T) {
	profiles := map[ProfileName]Spec{
		"python": {Allow: mustRules(t, "pypi.org", "files.pythonhosted.org")},
		"no-ads": {Deny: mustRules(t, "*.ads.example")},
	}
	look := func(n ProfileName) (Spec, bool) { s, ok := profiles[n]; return s, ok }
	p, err := Compile(Spec{Allow: mustRules(t, "pypi.org"), Profiles: []ProfileName{"python", "no-ads"}}, look, None)
	if err != nil {
		t.Fatal(err)
	}
	eff := p.Spec()
	if eff.Default != None || len(eff.Allow) != 2 || len(eff.Deny) != 1 {
		t.Fatalf("effective spec %+v", eff)
	}
	if !p.Name("files.pythonhosted.org", 443).Allowed || p.Name("x.ads.example", 0).Allowed {
		t.Fatal("profile rules not applied")
	}
	if _, err := Compile(Spec{Profiles: []ProfileName{"missing"}}, look, Public); !errors.Is(err, ErrUnknownProfile) || !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("unknown profile: %v", err)
	}
}

func TestParseSpec(t *testing.T) {
	s, err := ParseSpec([]byte(`{"default":"none","allow":["pypi.org","203.0.113.0/24:22"],"deny":["*.evil.example"],"profiles":["python"],"tls_exempt":["bank.example"]}`))
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(out); got != `{"default":"none","allow":["pypi.org","203.0.113.0/24:22"],"deny":["*.evil.example"],"profiles":["python"],"tls_exempt":["bank.example"]}` {
		t.Fatalf("round trip: %s", got)
	}
	for _, bad := range []string{
		`{"allow":["bad name"]}`,
		`{"default":"open"}`,
		`{"alow":["x.example"]}`,
		`{"profiles":["Bad"]}`,
		`{"tls_exempt":["bank.example:443"]}`,
		`{} {}`,
		`[]`,
	} {
		if _, err := ParseSpec([]byte(bad)); !errors.Is(err, model.ErrInvalid) {
			t.Errorf("ParseSpec(%s) = %v, want ErrInvalid", bad, err)
		}
	}
	if err := (Spec{Default: None}).CheckProfile(); err == nil {
		t.Error("profile with a default accepted")
	}
}

func TestExempt(t *testing.T) {
	p, err := Compile(Spec{TLSExempt: mustRules(t, "bank.example", "*.pinned.example", "192.0.2.0/28")}, nil, Public)
	if err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr
	for _, tc := range []struct {
		sni  string
		addr netip.Addr
		want bool
	}{
		{"bank.example", a("203.0.113.1"), true},
		{"app.pinned.example", a("203.0.113.1"), true},
		{"other.example", a("192.0.2.5"), true},
		{"other.example", a("192.0.2.50"), false},
		{"", netip.Addr{}, false},
	} {
		if got := p.Exempt(tc.sni, tc.addr); got != tc.want {
			t.Errorf("Exempt(%q, %v) = %v", tc.sni, tc.addr, got)
		}
	}
}

func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"pypi.org", "*.github.com:443", "[2001:db8::1]:443", "10.0.0.0/8:22", "a:b:c", "[", "*."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			return
		}
		again, err := ParseRule(r.String())
		if err != nil || again != r {
			t.Fatalf("%q → %q → %v, %v", s, r.String(), again, err)
		}
	})
}

func FuzzParseSpec(f *testing.F) {
	f.Add([]byte(`{"default":"none","allow":["pypi.org"],"deny":["*.evil.example"],"profiles":["p"]}`))
	f.Add([]byte(`{"allow":[1]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSpec(b)
		if err != nil {
			return
		}
		out, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseSpec(out); err != nil {
			t.Fatalf("re-parse of %s: %v", out, err)
		}
		if _, err := Compile(s, func(ProfileName) (Spec, bool) { return Spec{}, true }, Public); err != nil {
			t.Fatalf("compile: %v", err)
		}
	})
}
