package auth

import (
	"crypto/ed25519"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

func TestKindOfFilesToken(t *testing.T) {
	t.Parallel()
	for tok, want := range map[string]TokenKind{
		"alf_eyJzIjoi.c2ln": KindFiles,
		"alt_abc":           KindAttachment,
		"alk_abc":           KindAPIKey,
		"alx_abc":           KindUnknown,
	} {
		if got := KindOf(tok); got != want {
			t.Errorf("KindOf(%q) = %v, want %v", tok, got, want)
		}
	}
	if KindFiles.String() != "file transfer token" {
		t.Errorf("KindFiles.String() = %q", KindFiles.String())
	}
}

func (tk *testKeys) fileClaims() FileClaims {
	return FileClaims{Sandbox: model.NewSandboxID(), Path: "/data/a b.txt", Direction: apiv1.DirectionUpload, IssuedAt: tk.now}
}

func (tk *testKeys) issueFile(t testing.TB, c FileClaims) string {
	t.Helper()
	tok, err := tk.issuer.IssueFile(c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// fileWire returns the JWT payload IssueFile would write for c.
func (tk *testKeys) fileWire(c FileClaims) jwt.MapClaims {
	return jwt.MapClaims{
		"sbx": c.Sandbox.String(), "path": c.Path.String(), "dir": c.Direction,
		"iss": tokenIssuer, "aud": []any{filesAudience},
		"iat": c.IssuedAt.Unix(), "nbf": c.IssuedAt.Unix(), "exp": c.IssuedAt.Add(FileTokenTTL).Unix(),
	}
}

// signFile is sign with the files prefix.
func signFile(t testing.TB, m jwt.SigningMethod, key any, kid string, payload jwt.MapClaims) string {
	t.Helper()
	return FilesTokenPrefix + strings.TrimPrefix(sign(t, m, key, kid, payload), "alt_")
}

func TestFileTokenRoundTrip(t *testing.T) {
	tk := newTestKeys(t)
	c := tk.fileClaims()
	c.IssuedAt = c.IssuedAt.Add(300 * time.Millisecond)
	tok := tk.issueFile(t, c)
	if KindOf(tok) != KindFiles {
		t.Fatalf("KindOf(%q) = %v", tok, KindOf(tok))
	}
	got, err := tk.verifier.VerifyFile(tok, tk.now)
	if err != nil {
		t.Fatal(err)
	}
	if got.Sandbox != c.Sandbox || got.Path != c.Path || got.Direction != c.Direction || got.KeyID != tk.kid || got.TokenID == "" ||
		!got.IssuedAt.Equal(tk.now) || !got.NotBefore.Equal(tk.now) || !got.ExpiresAt.Equal(tk.now.Add(FileTokenTTL)) {
		t.Fatalf("claims %+v, want %+v", got, c)
	}
	for _, d := range []string{apiv1.DirectionDownload, apiv1.DirectionUpload, apiv1.DirectionTarOut, apiv1.DirectionTarIn, apiv1.DirectionWatch} {
		if apiv1.TransferMethod(d) == "" {
			t.Fatalf("apiv1 has no method for %q", d)
		}
		if _, err := ParseFileDirection(d); err != nil {
			t.Errorf("direction %q: %v", d, err)
		}
	}
}

// TestTokenKindsNeverCross: an attachment token is never a file token and
// the other way round, with or without its prefix swapped.
func TestTokenKindsNeverCross(t *testing.T) {
	tk := newTestKeys(t)
	att := tk.issue(t, tk.claims())
	file := tk.issueFile(t, tk.fileClaims())
	for _, tok := range []string{att, "alf_" + strings.TrimPrefix(att, "alt_")} {
		if c, err := tk.verifier.VerifyFile(tok, tk.now); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("VerifyFile(attachment token %.12s…) = %+v, %v", tok, c, err)
		}
	}
	for _, tok := range []string{file, "alt_" + strings.TrimPrefix(file, "alf_")} {
		if c, err := tk.verifier.Verify(tok, tk.now); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("Verify(file token %.12s…) = %+v, %v", tok, c, err)
		}
	}
}

// TestVerifyFileRefuses is the attacker's table for file tokens.
func TestVerifyFileRefuses(t *testing.T) {
	tk := newTestKeys(t)
	other := newTestKeys(t)
	c := tk.fileClaims()
	good := tk.issueFile(t, c)
	parts := strings.Split(strings.TrimPrefix(good, "alf_"), ".")
	header, payload, sig := parts[0], parts[1], parts[2]
	withPayload := func(mut func(jwt.MapClaims)) jwt.MapClaims {
		p := tk.fileWire(c)
		mut(p)
		return p
	}
	otherPath := withPayload(func(p jwt.MapClaims) { p["path"] = "/etc/shadow" })
	pub := []byte(tk.priv.Public().(ed25519.PublicKey))
	cases := []struct {
		name  string
		token string
		now   time.Time
		want  error
	}{
		{"valid", good, tk.now, nil},
		{"within skew before nbf", good, tk.now.Add(-ClockSkew), nil},
		{"within skew after exp", good, tk.now.Add(FileTokenTTL + ClockSkew - time.Second), nil},
		{"expired", good, tk.now.Add(FileTokenTTL + ClockSkew + time.Second), ErrTokenExpired},
		{"not yet valid beyond skew", good, tk.now.Add(-ClockSkew - time.Second), ErrInvalidToken},
		{"signed by another key with our kid", signFile(t, jwt.SigningMethodEdDSA, other.priv, tk.kid, tk.fileWire(c)), tk.now, ErrInvalidToken},
		{"signed by another key with its kid", other.issueFile(t, c), tk.now, ErrInvalidToken},
		{"no kid", signFile(t, jwt.SigningMethodEdDSA, tk.priv, "", tk.fileWire(c)), tk.now, ErrInvalidToken},
		{"unknown kid", signFile(t, jwt.SigningMethodEdDSA, tk.priv, newKeyID(), tk.fileWire(c)), tk.now, ErrInvalidToken},
		{"tampered payload", "alf_" + header + "." + b64(otherPath) + "." + sig, tk.now, ErrInvalidToken},
		{"tampered payload bit", "alf_" + header + "." + flip(payload) + "." + sig, tk.now, ErrInvalidToken},
		{"tampered signature", "alf_" + header + "." + payload + "." + flip(sig), tk.now, ErrInvalidToken},
		{"alg none", "alf_" + b64(map[string]any{"alg": "none", "typ": "JWT", "kid": tk.kid}) + "." + b64(otherPath) + ".", tk.now, ErrInvalidToken},
		{"HS256 with the public key as secret", signFile(t, jwt.SigningMethodHS256, pub, tk.kid, otherPath), tk.now, ErrInvalidToken},
		{"attachment audience", signFile(t, jwt.SigningMethodEdDSA, tk.priv, tk.kid, withPayload(func(p jwt.MapClaims) { p["aud"] = tokenAudience })), tk.now, ErrInvalidToken},
		{"wrong issuer", signFile(t, jwt.SigningMethodEdDSA, tk.priv, tk.kid, withPayload(func(p jwt.MapClaims) { p["iss"] = "evil" })), tk.now, ErrInvalidToken},
		{"unknown direction", signFile(t, jwt.SigningMethodEdDSA, tk.priv, tk.kid, withPayload(func(p jwt.MapClaims) { p["dir"] = "exec" })), tk.now, ErrInvalidToken},
		{"relative path", signFile(t, jwt.SigningMethodEdDSA, tk.priv, tk.kid, withPayload(func(p jwt.MapClaims) { p["path"] = "../etc" })), tk.now, ErrInvalidToken},
		{"bad sandbox", signFile(t, jwt.SigningMethodEdDSA, tk.priv, tk.kid, withPayload(func(p jwt.MapClaims) { p["sbx"] = "sbx_x" })), tk.now, ErrInvalidToken},
		{"no exp", signFile(t, jwt.SigningMethodEdDSA, tk.priv, tk.kid, withPayload(func(p jwt.MapClaims) { delete(p, "exp") })), tk.now, ErrInvalidToken},
		{"attachment prefix", "alt_" + strings.TrimPrefix(good, "alf_"), tk.now, ErrInvalidToken},
		{"no prefix", strings.TrimPrefix(good, "alf_"), tk.now, ErrInvalidToken},
		{"trailing junk", good + ".x", tk.now, ErrInvalidToken},
		{"empty", "", tk.now, ErrInvalidToken},
		{"too long", "alf_" + strings.Repeat("a", maxFileTokenLen), tk.now, ErrInvalidToken},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tk.verifier.VerifyFile(tc.token, tc.now)
			if tc.want == nil {
				if err != nil || got.Path != c.Path {
					t.Fatalf("VerifyFile = %+v, %v", got, err)
				}
				return
			}
			if !errors.Is(err, tc.want) || (errors.Is(err, ErrTokenExpired) && errors.Is(err, ErrInvalidToken)) {
				t.Fatalf("VerifyFile = %+v, %v; want %v", got, err, tc.want)
			}
			if got != (FileClaims{}) {
				t.Fatal("claims returned with an error")
			}
		})
	}
}

func TestIssueFileRefusesBadClaims(t *testing.T) {
	tk := newTestKeys(t)
	for name, mut := range map[string]func(*FileClaims){
		"no sandbox":     func(c *FileClaims) { c.Sandbox = "" },
		"relative path":  func(c *FileClaims) { c.Path = "a/b" },
		"unclean path":   func(c *FileClaims) { c.Path = "/a/../b" },
		"no direction":   func(c *FileClaims) { c.Direction = "" },
		"bad direction":  func(c *FileClaims) { c.Direction = "exec" },
		"no issue time":  func(c *FileClaims) { c.IssuedAt = time.Time{} },
		"exp before iat": func(c *FileClaims) { c.ExpiresAt = c.IssuedAt.Add(-time.Second) },
	} {
		c := tk.fileClaims()
		mut(&c)
		if tok, err := tk.issuer.IssueFile(c); err == nil {
			t.Errorf("%s: issued %s", name, tok)
		}
	}
}

// TestFileTokenSurvivesKeyringReload: a token issued before a restart
// verifies after it, with the keyring re-opened from its directory.
func TestFileTokenSurvivesKeyringReload(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "attach")
	clock := &fakeClock{t: time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)}
	ring, err := OpenKeyring(dir, KeyringOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	c := FileClaims{Sandbox: model.NewSandboxID(), Path: "/x", Direction: apiv1.DirectionDownload, IssuedAt: clock.Now()}
	tok, err := ring.Issuer().IssueFile(c)
	if err != nil {
		t.Fatal(err)
	}
	again, err := OpenKeyring(dir, KeyringOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	got, err := again.Verifier().VerifyFile(tok, clock.Now().Add(time.Minute))
	if err != nil || got.Sandbox != c.Sandbox || got.Path != c.Path {
		t.Fatalf("after reload: %+v, %v", got, err)
	}
}

func FuzzVerifyFile(f *testing.F) {
	tk := newTestKeys(f)
	good := tk.issueFile(f, tk.fileClaims())
	parts := strings.Split(good, ".")
	for _, s := range []string{
		good, "", "alf_", "alf_..", "alf_a.b.c", parts[0] + "." + parts[1] + ".", good[:len(good)-1],
		"alf_" + b64(map[string]any{"alg": "none"}) + "." + parts[1] + ".",
		tk.issue(f, tk.claims()),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := tk.verifier.VerifyFile(s, tk.now)
		if err != nil {
			if errors.Is(err, ErrTokenExpired) == errors.Is(err, ErrInvalidToken) {
				t.Fatalf("error %v wraps neither or both sentinels", err)
			}
			return
		}
		if KindOf(s) != KindFiles {
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
