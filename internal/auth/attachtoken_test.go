package auth

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/airlockdev/airlock/internal/model"
)

// testKeys is one signing key with its Issuer and Verifier, and a clock.
type testKeys struct {
	kid      string
	priv     ed25519.PrivateKey
	issuer   *Issuer
	verifier *Verifier
	now      time.Time
}

func newTestKeys(t testing.TB) *testKeys {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tk := &testKeys{kid: newKeyID(), priv: priv, now: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	if tk.issuer, err = NewIssuer(tk.kid, priv); err != nil {
		t.Fatal(err)
	}
	if tk.verifier, err = NewVerifier(PublicKey{ID: tk.kid, Key: pub}); err != nil {
		t.Fatal(err)
	}
	return tk
}

func (tk *testKeys) claims() AttachClaims {
	return AttachClaims{
		Session:  model.NewCommandSessionID(),
		Sandbox:  model.NewSandboxID(),
		Process:  model.NewProcessID(),
		Node:     model.NewNodeID(),
		Actions:  AllActions(),
		IssuedAt: tk.now,
	}
}

func (tk *testKeys) issue(t testing.TB, c AttachClaims) string {
	t.Helper()
	tok, err := tk.issuer.Issue(c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// wire returns the JWT payload Issue would write for c.
func (tk *testKeys) wire(c AttachClaims) jwt.MapClaims {
	acts := make([]any, len(c.Actions))
	for i, a := range c.Actions {
		acts[i] = string(a)
	}
	return jwt.MapClaims{
		"sid": c.Session.String(), "sbx": c.Sandbox.String(), "pid": c.Process.String(), "node": c.Node.String(),
		"act": acts, "iss": tokenIssuer, "aud": []any{tokenAudience},
		"iat": c.IssuedAt.Unix(), "nbf": c.IssuedAt.Unix(), "exp": c.IssuedAt.Add(AttachTokenTTL).Unix(),
	}
}

// sign signs payload with any method and key, as an attacker or a buggy
// issuer could.
func sign(t testing.TB, m jwt.SigningMethod, key any, kid string, payload jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, payload)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return "alt_" + s
}

func b64(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

func TestAttachTokenRoundTrip(t *testing.T) {
	tk := newTestKeys(t)
	c := tk.claims()
	c.IssuedAt = c.IssuedAt.Add(700 * time.Millisecond) // truncated to the second
	c.Actions = []Action{ActionSignal, ActionRead}
	tok := tk.issue(t, c)
	if KindOf(tok) != KindAttachment {
		t.Fatalf("KindOf(%q) = %v", tok, KindOf(tok))
	}
	got, err := tk.verifier.Verify(tok, tk.now)
	if err != nil {
		t.Fatal(err)
	}
	want := c
	want.IssuedAt, want.NotBefore, want.ExpiresAt, want.KeyID = tk.now, tk.now, tk.now.Add(AttachTokenTTL), tk.kid
	if !got.IssuedAt.Equal(want.IssuedAt) || !got.NotBefore.Equal(want.NotBefore) || !got.ExpiresAt.Equal(want.ExpiresAt) {
		t.Fatalf("times %v %v %v, want %v %v %v", got.IssuedAt, got.NotBefore, got.ExpiresAt, want.IssuedAt, want.NotBefore, want.ExpiresAt)
	}
	got.IssuedAt, got.NotBefore, got.ExpiresAt = want.IssuedAt, want.NotBefore, want.ExpiresAt
	if got.Session != want.Session || got.Sandbox != want.Sandbox || got.Process != want.Process ||
		got.Node != want.Node || !slices.Equal(got.Actions, want.Actions) || got.KeyID != want.KeyID {
		t.Fatalf("claims %+v, want %+v", got, want)
	}
	if !got.Allows(ActionRead) || !got.Allows(ActionSignal) || got.Allows(ActionStdin) || got.Allows(ActionResize) {
		t.Fatalf("Allows disagrees with %v", got.Actions)
	}
	// Two tokens for the same claims at different seconds differ.
	c.IssuedAt = c.IssuedAt.Add(time.Second)
	if tk.issue(t, c) == tok {
		t.Fatal("a later token is identical")
	}
}

// TestVerifyRefuses is the attacker's table: every token here must be refused
// with the right kind of error, and the near misses accepted.
func TestVerifyRefuses(t *testing.T) {
	tk := newTestKeys(t)
	other := newTestKeys(t)
	c := tk.claims()
	good := tk.issue(t, c)
	parts := strings.Split(strings.TrimPrefix(good, "alt_"), ".")
	header, payload, sig := parts[0], parts[1], parts[2]
	pub := tk.priv.Public().(ed25519.PublicKey)

	withPayload := func(mut func(jwt.MapClaims)) jwt.MapClaims {
		p := tk.wire(c)
		mut(p)
		return p
	}
	otherProc := tk.wire(c)
	otherProc["pid"] = model.NewProcessID().String()
	expiredForged := tk.wire(c)
	expiredForged["exp"] = c.IssuedAt.Add(-time.Hour).Unix()

	cases := []struct {
		name  string
		token string
		now   time.Time
		want  error // nil: accepted
	}{
		{"valid", good, tk.now, nil},
		{"within skew before nbf", good, tk.now.Add(-ClockSkew), nil},
		{"within skew after exp", good, tk.now.Add(AttachTokenTTL + ClockSkew - time.Second), nil},
		{"at the end of the skew", good, tk.now.Add(AttachTokenTTL + ClockSkew), ErrTokenExpired},
		{"expired", good, tk.now.Add(AttachTokenTTL + ClockSkew + time.Second), ErrTokenExpired},
		{"not yet valid", good, tk.now.Add(-ClockSkew - time.Second), ErrInvalidToken},
		{"signed by another key with our kid", sign(t, jwt.SigningMethodEdDSA, other.priv, tk.kid, tk.wire(c)), tk.now, ErrInvalidToken},
		{"signed by another key with its kid", other.issue(t, c), tk.now, ErrInvalidToken},
		{"unknown kid", sign(t, jwt.SigningMethodEdDSA, tk.priv, newKeyID(), tk.wire(c)), tk.now, ErrInvalidToken},
		{"no kid", sign(t, jwt.SigningMethodEdDSA, tk.priv, "", tk.wire(c)), tk.now, ErrInvalidToken},
		{"kid not a string", "alt_" + b64(map[string]any{"alg": "EdDSA", "typ": "JWT", "kid": 7}) + "." + payload + "." + sig, tk.now, ErrInvalidToken},
		{"tampered payload", "alt_" + header + "." + b64(otherProc) + "." + sig, tk.now, ErrInvalidToken},
		{"tampered payload bit", "alt_" + header + "." + flip(payload) + "." + sig, tk.now, ErrInvalidToken},
		{"tampered signature", "alt_" + header + "." + payload + "." + flip(sig), tk.now, ErrInvalidToken},
		{"no signature", "alt_" + header + "." + payload + ".", tk.now, ErrInvalidToken},
		{"alg none", "alt_" + b64(map[string]any{"alg": "none", "typ": "JWT", "kid": tk.kid}) + "." + b64(otherProc) + ".", tk.now, ErrInvalidToken},
		{"alg none with signature", "alt_" + b64(map[string]any{"alg": "none", "kid": tk.kid}) + "." + payload + "." + sig, tk.now, ErrInvalidToken},
		{"HS256 with the public key as secret", sign(t, jwt.SigningMethodHS256, []byte(pub), tk.kid, otherProc), tk.now, ErrInvalidToken},
		{"HS256 with the base64 public key", sign(t, jwt.SigningMethodHS256, []byte(base64.StdEncoding.EncodeToString(pub)), tk.kid, otherProc), tk.now, ErrInvalidToken},
		{"header says EdDSA, signature from HS256", "alt_" + header + "." + payload + "." + strings.Split(sign(t, jwt.SigningMethodHS256, []byte(pub), tk.kid, tk.wire(c)), ".")[2], tk.now, ErrInvalidToken},
		{"expired and forged", sign(t, jwt.SigningMethodEdDSA, other.priv, tk.kid, expiredForged), tk.now, ErrInvalidToken},
		{"no prefix", strings.TrimPrefix(good, "alt_"), tk.now, ErrInvalidToken},
		{"api key prefix", "alk_" + strings.TrimPrefix(good, "alt_"), tk.now, ErrInvalidToken},
		{"upper-case prefix", "ALT_" + strings.TrimPrefix(good, "alt_"), tk.now, ErrInvalidToken},
		{"trailing junk", good + ".x", tk.now, ErrInvalidToken},
		{"padding", good + "=", tk.now, ErrInvalidToken},
		{"empty", "", tk.now, ErrInvalidToken},
		{"prefix only", "alt_", tk.now, ErrInvalidToken},
		{"too long", "alt_" + strings.Repeat("a", maxTokenLen), tk.now, ErrInvalidToken},
		{"unknown action", sign(t, jwt.SigningMethodEdDSA, tk.priv, tk.kid, withPayload(func(p jwt.MapClaims) { p["act"] = []any{"read", "exec"} })), tk.now, ErrInvalidToken},
		{"no actions", sign(t, jwt.SigningMethodEdDSA, tk.priv, tk.kid, withPayload(func(p jwt.MapClaims) { p["act"] = []any{} })), tk.now, ErrInvalidToken},
		{"duplicate action", sign(t, jwt.SigningMethodEdDSA, tk.priv, tk.kid, withPayload(func(p jwt.MapClaims) { p["act"] = []any{"read", "read"} })), tk.now, ErrInvalidToken},
		{"bad process id", sign(t, jwt.SigningMethodEdDSA, tk.priv, tk.kid, withPayload(func(p jwt.MapClaims) { p["pid"] = "sbx_" + strings.Repeat("a", 26) })), tk.now, ErrInvalidToken},
		{"bad sandbox id", sign(t, jwt.SigningMethodEdDSA, tk.priv, tk.kid, withPayload(func(p jwt.MapClaims) { p["sbx"] = "" })), tk.now, ErrInvalidToken},
		{"bad node id", sign(t, jwt.SigningMethodEdDSA, tk.priv, tk.kid, withPayload(func(p jwt.MapClaims) { p["node"] = "node_X" })), tk.now, ErrInvalidToken},
		{"no exp", sign(t, jwt.SigningMethodEdDSA, tk.priv, tk.kid, withPayload(func(p jwt.MapClaims) { delete(p, "exp") })), tk.now, ErrInvalidToken},
		{"no nbf", sign(t, jwt.SigningMethodEdDSA, tk.priv, tk.kid, withPayload(func(p jwt.MapClaims) { delete(p, "nbf") })), tk.now, ErrInvalidToken},
		{"no iat", sign(t, jwt.SigningMethodEdDSA, tk.priv, tk.kid, withPayload(func(p jwt.MapClaims) { delete(p, "iat") })), tk.now, ErrInvalidToken},
		{"iat in the future beyond skew", sign(t, jwt.SigningMethodEdDSA, tk.priv, tk.kid, withPayload(func(p jwt.MapClaims) {
			p["iat"] = tk.now.Add(ClockSkew + 5*time.Second).Unix()
		})), tk.now, ErrInvalidToken},
		{"wrong audience", sign(t, jwt.SigningMethodEdDSA, tk.priv, tk.kid, withPayload(func(p jwt.MapClaims) { p["aud"] = "someone-else" })), tk.now, ErrInvalidToken},
		{"wrong issuer", sign(t, jwt.SigningMethodEdDSA, tk.priv, tk.kid, withPayload(func(p jwt.MapClaims) { p["iss"] = "evil" })), tk.now, ErrInvalidToken},
		{"exp before nbf", sign(t, jwt.SigningMethodEdDSA, tk.priv, tk.kid, withPayload(func(p jwt.MapClaims) {
			p["nbf"] = tk.now.Add(-time.Second).Unix()
			p["iat"] = tk.now.Add(-time.Second).Unix()
			p["exp"] = tk.now.Add(-2 * time.Second).Unix()
		})), tk.now, ErrInvalidToken},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tk.verifier.Verify(tc.token, tc.now)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if got.Process != c.Process {
					t.Fatalf("process %s, want %s", got.Process, c.Process)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %+v, %v; want %v", got, err, tc.want)
			}
			if errors.Is(err, ErrTokenExpired) && errors.Is(err, ErrInvalidToken) {
				t.Fatal("error is both expired and invalid")
			}
			if got.Process != "" {
				t.Fatal("claims returned with an error")
			}
		})
	}
}

// flip changes one character in the middle of a base64url segment.
func flip(s string) string {
	b := []byte(s)
	i := len(b) / 2
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

func TestIssueRefusesBadClaims(t *testing.T) {
	tk := newTestKeys(t)
	for name, mut := range map[string]func(*AttachClaims){
		"no actions":      func(c *AttachClaims) { c.Actions = nil },
		"unknown action":  func(c *AttachClaims) { c.Actions = []Action{"exec"} },
		"duplicate":       func(c *AttachClaims) { c.Actions = []Action{ActionRead, ActionRead} },
		"no process":      func(c *AttachClaims) { c.Process = "" },
		"no session":      func(c *AttachClaims) { c.Session = "" },
		"bad sandbox":     func(c *AttachClaims) { c.Sandbox = "sbx_x" },
		"bad node":        func(c *AttachClaims) { c.Node = "x" },
		"no issue time":   func(c *AttachClaims) { c.IssuedAt = time.Time{} },
		"exp before iat":  func(c *AttachClaims) { c.ExpiresAt = c.IssuedAt.Add(-time.Second) },
		"nbf before iat":  func(c *AttachClaims) { c.NotBefore = c.IssuedAt.Add(-time.Second) },
		"exp equals nbf":  func(c *AttachClaims) { c.ExpiresAt = c.IssuedAt },
		"sub-second life": func(c *AttachClaims) { c.ExpiresAt = c.IssuedAt.Add(time.Millisecond) },
	} {
		c := tk.claims()
		mut(&c)
		if tok, err := tk.issuer.Issue(c); err == nil {
			t.Errorf("%s: issued %s", name, tok)
		}
	}
	if _, err := NewIssuer("Bad/kid", tk.priv); err == nil {
		t.Error("NewIssuer accepted a bad kid")
	}
	if _, err := NewVerifier(PublicKey{ID: tk.kid, Key: []byte{1}}); err == nil {
		t.Error("NewVerifier accepted a short key")
	}
}

func TestParseActions(t *testing.T) {
	got, err := ParseActions([]string{"resize", "read"})
	if err != nil || !slices.Equal(got, []Action{ActionResize, ActionRead}) {
		t.Fatalf("ParseActions = %v, %v", got, err)
	}
	for _, bad := range [][]string{nil, {}, {"READ"}, {"read", "read"}, {""}, {"read", "write"}} {
		if _, err := ParseActions(bad); !errors.Is(err, model.ErrInvalid) {
			t.Errorf("ParseActions(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func FuzzVerify(f *testing.F) {
	tk := newTestKeys(f)
	good := tk.issue(f, tk.claims())
	parts := strings.Split(good, ".")
	for _, s := range []string{
		good, "", "alt_", "alt_..", "alt_a.b.c", parts[0] + "." + parts[1] + ".", good[:len(good)-1],
		"alt_" + b64(map[string]any{"alg": "none"}) + "." + parts[1] + ".",
		"alt_" + b64(map[string]any{"alg": "EdDSA", "kid": tk.kid}) + "." + b64(map[string]any{"exp": 1e300}) + "." + parts[2],
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := tk.verifier.Verify(s, tk.now)
		if err != nil {
			if errors.Is(err, ErrTokenExpired) == errors.Is(err, ErrInvalidToken) {
				t.Fatalf("error %v wraps neither or both sentinels", err)
			}
			return
		}
		// Only the issuer's key can make a token that verifies; whatever
		// verifies is well-formed.
		if KindOf(s) != KindAttachment {
			t.Fatalf("verified %q of kind %v", s, KindOf(s))
		}
		if err := c.validate(); err != nil {
			t.Fatalf("verified claims are invalid: %v", err)
		}
		if c.KeyID != tk.kid {
			t.Fatalf("kid %q", c.KeyID)
		}
	})
}
