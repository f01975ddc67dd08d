package auth

import (
	"crypto/ed25519"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/airlockdev/airlock/internal/model"
)

func (tk *testKeys) sandboxClaims() SandboxClaims {
	return SandboxClaims{Sandbox: model.NewSandboxID(), Project: model.NewProjectID()}
}

func (tk *testKeys) issueSandbox(t testing.TB, c SandboxClaims) string {
	t.Helper()
	tok, err := tk.issuer.IssueSandbox(c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// sandboxWireMap is the payload IssueSandbox writes for c.
func sandboxWireMap(c SandboxClaims) jwt.MapClaims {
	return jwt.MapClaims{"iss": tokenIssuer, "aud": sandboxAudience, "sbx": c.Sandbox.String(), "prj": c.Project.String()}
}

func signSandbox(t testing.TB, m jwt.SigningMethod, key any, kid string, payload jwt.MapClaims) string {
	t.Helper()
	return SandboxTokenPrefix + strings.TrimPrefix(sign(t, m, key, kid, payload), "alt_")
}

func TestSandboxTokenRoundTrip(t *testing.T) {
	tk := newTestKeys(t)
	c := tk.sandboxClaims()
	tok := tk.issueSandbox(t, c)
	if KindOf(tok) != KindSandbox || KindSandbox.String() != "sandbox access token" {
		t.Fatalf("KindOf(%q) = %v", tok, KindOf(tok))
	}
	got, err := tk.verifier.VerifySandboxAt(tok, tk.now)
	if err != nil {
		t.Fatal(err)
	}
	if got.Sandbox != c.Sandbox || got.Project != c.Project || got.KeyID != tk.kid {
		t.Fatalf("claims %+v, want %+v with kid %s", got, c, tk.kid)
	}
	// No time in it: it verifies years later, and VerifySandbox (the wall
	// clock) agrees.
	if _, err := tk.verifier.VerifySandboxAt(tok, tk.now.Add(10*365*24*time.Hour)); err != nil {
		t.Fatalf("a sandbox token expired: %v", err)
	}
	if _, err := tk.verifier.VerifySandbox(tok); err != nil {
		t.Fatal(err)
	}
	// Deterministic: the same claims and key give the same token; other
	// claims or another key another token.
	if again := tk.issueSandbox(t, SandboxClaims{Sandbox: c.Sandbox, Project: c.Project, KeyID: "ignored"}); again != tok {
		t.Fatalf("the same claims gave %q then %q", tok, again)
	}
	if other := tk.issueSandbox(t, SandboxClaims{Sandbox: model.NewSandboxID(), Project: c.Project}); other == tok {
		t.Fatal("another sandbox gave the same token")
	}
	if other := newTestKeys(t).issueSandbox(t, c); other == tok {
		t.Fatal("another key gave the same token")
	}
	// A fixed key and claims give a fixed token, whatever the process: the
	// wire form is pinned.
	seed := make([]byte, ed25519.SeedSize)
	fixed, err := NewIssuer("aaaaaaaaaaaaaaaa", ed25519.NewKeyFromSeed(seed))
	if err != nil {
		t.Fatal(err)
	}
	ft, err := fixed.IssueSandbox(SandboxClaims{Sandbox: "sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa", Project: "prj_bbbbbbbbbbbbbbbbbbbbbbbbbb"})
	if err != nil {
		t.Fatal(err)
	}
	wantPrefix := "als_" + b64(map[string]string{"alg": "EdDSA", "kid": "aaaaaaaaaaaaaaaa", "typ": "JWT"}) + "." +
		b64(scopedWire{Issuer: "airlock", Audience: "airlock-sandbox", Sandbox: "sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa", Project: "prj_bbbbbbbbbbbbbbbbbbbbbbbbbb"}) + "."
	if !strings.HasPrefix(ft, wantPrefix) {
		t.Fatalf("token %q does not start with %q", ft, wantPrefix)
	}
}

func TestIssueSandboxRefusesBadClaims(t *testing.T) {
	tk := newTestKeys(t)
	good := tk.sandboxClaims()
	for name, c := range map[string]SandboxClaims{
		"no sandbox":  {Project: good.Project},
		"no project":  {Sandbox: good.Sandbox},
		"bad sandbox": {Sandbox: "sbx_x", Project: good.Project},
		"bad project": {Sandbox: good.Sandbox, Project: model.ProjectID(good.Sandbox)},
	} {
		if tok, err := tk.issuer.IssueSandbox(c); err == nil {
			t.Errorf("%s: issued %q", name, tok)
		}
	}
}

// TestVerifySandboxRefuses is the attacker's table for sandbox tokens.
func TestVerifySandboxRefuses(t *testing.T) {
	tk := newTestKeys(t)
	other := newTestKeys(t)
	c := tk.sandboxClaims()
	good := tk.issueSandbox(t, c)
	parts := strings.Split(strings.TrimPrefix(good, SandboxTokenPrefix), ".")
	att := tk.issue(t, tk.claims())
	file := tk.issueFile(t, tk.fileClaims())
	fwd, err := tk.issuer.IssueForward(ForwardClaims{From: model.NewNodeID(), To: model.NewNodeID(), Request: "GET /", Base: "http://x", IssuedAt: tk.now})
	if err != nil {
		t.Fatal(err)
	}
	with := func(mut func(m jwt.MapClaims)) jwt.MapClaims {
		m := sandboxWireMap(c)
		mut(m)
		return m
	}
	// A retired key: the same key pair, known to the verifier only until
	// before now.
	retired, err := NewVerifier(PublicKey{ID: tk.kid, Key: tk.priv.Public().(ed25519.PublicKey), NotAfter: tk.now.Add(-time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		tok  string
		v    *Verifier
	}{
		{"empty", "", nil},
		{"prefix only", "als_", nil},
		{"no prefix", strings.TrimPrefix(good, SandboxTokenPrefix), nil},
		{"api key prefix", "alk_" + strings.TrimPrefix(good, SandboxTokenPrefix), nil},
		{"flipped signature", flip(good), nil},
		{"truncated", good[:len(good)-2], nil},
		{"trailing garbage", good + "x", nil},
		{"no signature", SandboxTokenPrefix + parts[0] + "." + parts[1] + ".", nil},
		{"alg none", SandboxTokenPrefix + b64(map[string]any{"alg": "none", "kid": tk.kid}) + "." + parts[1] + ".", nil},
		{"hmac with public key", signSandbox(t, jwt.SigningMethodHS256, []byte(tk.priv.Public().(ed25519.PublicKey)), tk.kid, sandboxWireMap(c)), nil},
		{"other key, same kid", signSandbox(t, jwt.SigningMethodEdDSA, other.priv, tk.kid, sandboxWireMap(c)), nil},
		{"unknown kid", signSandbox(t, jwt.SigningMethodEdDSA, other.priv, other.kid, sandboxWireMap(c)), nil},
		{"no kid", signSandbox(t, jwt.SigningMethodEdDSA, tk.priv, "", sandboxWireMap(c)), nil},
		{"retired key", good, retired},
		{"payload swapped", SandboxTokenPrefix + parts[0] + "." + b64(map[string]any{"iss": tokenIssuer, "aud": sandboxAudience, "sbx": model.NewSandboxID().String(), "prj": c.Project.String()}) + "." + parts[2], nil},
		{"wrong audience", signSandbox(t, jwt.SigningMethodEdDSA, tk.priv, tk.kid, with(func(m jwt.MapClaims) { m["aud"] = tokenAudience })), nil},
		{"no audience", signSandbox(t, jwt.SigningMethodEdDSA, tk.priv, tk.kid, with(func(m jwt.MapClaims) { delete(m, "aud") })), nil},
		{"wrong issuer", signSandbox(t, jwt.SigningMethodEdDSA, tk.priv, tk.kid, with(func(m jwt.MapClaims) { m["iss"] = "e2b" })), nil},
		{"bad sandbox", signSandbox(t, jwt.SigningMethodEdDSA, tk.priv, tk.kid, with(func(m jwt.MapClaims) { m["sbx"] = "sbx_1" })), nil},
		{"no project", signSandbox(t, jwt.SigningMethodEdDSA, tk.priv, tk.kid, with(func(m jwt.MapClaims) { delete(m, "prj") })), nil},
		{"project is a sandbox", signSandbox(t, jwt.SigningMethodEdDSA, tk.priv, tk.kid, with(func(m jwt.MapClaims) { m["prj"] = c.Sandbox.String() })), nil},
		{"attachment token", att, nil},
		{"attachment token as als_", SandboxTokenPrefix + strings.TrimPrefix(att, "alt_"), nil},
		{"file token as als_", SandboxTokenPrefix + strings.TrimPrefix(file, FilesTokenPrefix), nil},
		{"forward token as als_", SandboxTokenPrefix + strings.TrimPrefix(fwd, ForwardTokenPrefix), nil},
		{"too long", good + strings.Repeat("a", maxSandboxTokenLen), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.v
			if v == nil {
				v = tk.verifier
			}
			if got, err := v.VerifySandboxAt(tc.tok, tk.now); !errors.Is(err, ErrInvalidToken) {
				t.Fatalf("VerifySandboxAt(%.40q) = %+v, %v; want ErrInvalidToken", tc.tok, got, err)
			}
		})
	}
	// The near miss: the retired key still verifies before its NotAfter.
	if _, err := retired.VerifySandboxAt(good, tk.now.Add(-2*time.Second)); err != nil {
		t.Fatalf("before retirement: %v", err)
	}
}

// TestSandboxTokenNeverCrosses: a sandbox token verifies as no other kind,
// with or without its prefix swapped.
func TestSandboxTokenNeverCrosses(t *testing.T) {
	tk := newTestKeys(t)
	sbx := strings.TrimPrefix(tk.issueSandbox(t, tk.sandboxClaims()), SandboxTokenPrefix)
	if c, err := tk.verifier.Verify("alt_"+sbx, tk.now); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("Verify(sandbox token as alt_) = %+v, %v", c, err)
	}
	if c, err := tk.verifier.VerifyFile(FilesTokenPrefix+sbx, tk.now); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("VerifyFile(sandbox token as alf_) = %+v, %v", c, err)
	}
	if c, err := tk.verifier.VerifyForward(ForwardTokenPrefix+sbx, tk.now); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("VerifyForward(sandbox token as alp_) = %+v, %v", c, err)
	}
	if _, _, err := ParseAPIKey(SandboxTokenPrefix + sbx); !errors.Is(err, ErrMalformed) {
		t.Errorf("ParseAPIKey(sandbox token) = %v", err)
	}
}

// TestSandboxTokenFollowsKeyring: a token verifies through rotation for the
// overlap window, then not; a new token after rotation differs.
func TestSandboxTokenFollowsKeyring(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ring, err := OpenKeyring(t.TempDir(), KeyringOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	iss, ver := ring.Issuer(), ring.Verifier()
	c := SandboxClaims{Sandbox: model.NewSandboxID(), Project: model.NewProjectID()}
	tok, err := iss.IssueSandbox(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ring.Rotate(); err != nil {
		t.Fatal(err)
	}
	tok2, err := iss.IssueSandbox(c)
	if err != nil {
		t.Fatal(err)
	}
	if tok2 == tok {
		t.Fatal("the token did not change with the key")
	}
	if _, err := ver.VerifySandboxAt(tok, clock.Now().Add(MinKeyOverlap-time.Second)); err != nil {
		t.Fatalf("within the overlap: %v", err)
	}
	if _, err := ver.VerifySandboxAt(tok, clock.Now().Add(MinKeyOverlap+time.Second)); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("after the overlap: %v", err)
	}
	if _, err := ver.VerifySandboxAt(tok2, clock.Now().Add(365*24*time.Hour)); err != nil {
		t.Fatalf("the active key's token: %v", err)
	}
	// SandboxTokens lists the tokens that still verify, the active key's
	// first.
	for _, tc := range []struct {
		at   time.Time
		want []string
	}{
		{clock.Now(), []string{tok2, tok}},
		{clock.Now().Add(MinKeyOverlap - time.Second), []string{tok2, tok}},
		{clock.Now().Add(MinKeyOverlap + time.Second), []string{tok2}},
	} {
		got, err := ring.SandboxTokens(c, tc.at)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Fatalf("SandboxTokens at %v = %d tokens, %v; want %d", tc.at, len(got), err, len(tc.want))
		}
		for _, tok := range got {
			if _, err := ver.VerifySandboxAt(tok, tc.at); err != nil {
				t.Fatalf("a listed token does not verify: %v", err)
			}
		}
	}
	if _, err := ring.SandboxTokens(SandboxClaims{Sandbox: c.Sandbox}, clock.Now()); err == nil {
		t.Fatal("SandboxTokens signed claims without a project")
	}
}

func FuzzVerifySandbox(f *testing.F) {
	tk := newTestKeys(f)
	good := tk.issueSandbox(f, tk.sandboxClaims())
	parts := strings.Split(good, ".")
	for _, s := range []string{
		good, "", "als_", "als_..", "als_a.b.c", parts[0] + "." + parts[1] + ".", good[:len(good)-1],
		"als_" + b64(map[string]any{"alg": "none"}) + "." + parts[1] + ".",
		tk.issue(f, tk.claims()), "als_" + strings.TrimPrefix(tk.issue(f, tk.claims()), "alt_"),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := tk.verifier.VerifySandboxAt(s, tk.now)
		if err != nil {
			if !errors.Is(err, ErrInvalidToken) {
				t.Fatalf("error %v does not wrap ErrInvalidToken", err)
			}
			return
		}
		if KindOf(s) != KindSandbox {
			t.Fatalf("verified %q of kind %v", s, KindOf(s))
		}
		if err := c.validate(); err != nil {
			t.Fatalf("verified claims are invalid: %v", err)
		}
		if c.KeyID != tk.kid {
			t.Fatalf("kid %q", c.KeyID)
		}
		// Only the token IssueSandbox makes for these claims verifies.
		if again := tk.issueSandbox(t, c); again != s {
			t.Fatalf("verified %q, but the claims sign as %q", s, again)
		}
	})
}
