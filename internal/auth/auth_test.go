package auth

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestAPIKeyRoundTrip(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		token, id, hash := GenerateAPIKey()
		if seen[token] {
			t.Fatalf("duplicate token %q", token)
		}
		seen[token] = true
		if KindOf(token) != KindAPIKey {
			t.Fatalf("KindOf(%q) = %v", token, KindOf(token))
		}
		gotID, secret, err := ParseAPIKey(token)
		if err != nil {
			t.Fatalf("ParseAPIKey(%q): %v", token, err)
		}
		if gotID != id {
			t.Fatalf("id = %q, want %q", gotID, id)
		}
		if len(secret) != 32 {
			t.Fatalf("secret is %d bytes, want 32", len(secret))
		}
		if !VerifySecret(hash, secret) {
			t.Fatal("VerifySecret rejects the generated secret")
		}
		if !bytes.Equal(hash, HashSecret(secret)) {
			t.Fatal("hash differs from HashSecret(secret)")
		}
		if strings.Contains(token, string(secret)) {
			t.Fatal("raw secret bytes appear in the token")
		}
	}
}

func TestKindsNeverInterchangeable(t *testing.T) {
	key, _, _ := GenerateAPIKey()
	tk := newTestKeys(t)
	att := tk.issue(t, tk.claims())
	if _, err := tk.verifier.Verify(key, tk.now); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("Verify(api key) = %v, want ErrInvalidToken", err)
	}
	if KindOf(att) != KindAttachment {
		t.Fatalf("KindOf(%q) = %v", att, KindOf(att))
	}
	if _, _, err := ParseAPIKey(att); !errors.Is(err, ErrMalformed) {
		t.Fatalf("ParseAPIKey(attachment token) = %v, want ErrMalformed", err)
	}
	if KindOf("Bearer x") != KindUnknown || KindOf("") != KindUnknown {
		t.Fatal("Kind of a foreign string is not unknown")
	}
}

func TestParseRejects(t *testing.T) {
	key, _, _ := GenerateAPIKey()
	tk := newTestKeys(t)
	att := tk.issue(t, tk.claims())
	idPart := key[4:30]
	secretPart := key[31:]
	cases := []struct {
		name  string
		token string
	}{
		{"empty", ""},
		{"prefix only", "alk_"},
		{"no secret", "alk_" + idPart},
		{"empty secret", "alk_" + idPart + "_"},
		{"short secret", key[:len(key)-1]},
		{"long secret", key + "a"},
		{"upper case", strings.ToUpper(key[:4]) + key[4:]},
		{"upper secret", "alk_" + idPart + "_" + strings.ToUpper(secretPart)},
		{"bad id char", "alk_" + strings.Repeat("1", 26) + "_" + secretPart},
		{"short id", "alk_" + idPart[1:] + "_" + secretPart},
		{"extra part", "alk_" + idPart + "_" + secretPart + "_x"},
		{"non-canonical tail", "alk_" + idPart + "_" + secretPart[:51] + "b"},
		{"padding", key + "===="},
		{"whitespace", key + " "},
		{"attachment", att},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, _, err := ParseAPIKey(c.token); !errors.Is(err, ErrMalformed) {
				t.Fatalf("ParseAPIKey(%q) = %v, want ErrMalformed", c.token, err)
			}
		})
	}
}

func TestVerifySecretRejectsBadHash(t *testing.T) {
	_, secret, _ := ParseAPIKey(func() string { k, _, _ := GenerateAPIKey(); return k }())
	for _, h := range [][]byte{nil, {}, HashSecret(secret)[:31], append(HashSecret(secret), 0)} {
		if VerifySecret(h, secret) {
			t.Fatalf("VerifySecret(%x) accepted", h)
		}
	}
}

func FuzzParseAPIKey(f *testing.F) {
	key, _, _ := GenerateAPIKey()
	for _, s := range []string{key, "alt_" + strings.Repeat("a", 52), "", "alk_", "alk__", key + "=", "alk_" + strings.Repeat("a", 26) + "_" + strings.Repeat("a", 52)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, secret, err := ParseAPIKey(s)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		if KindOf(s) != KindAPIKey {
			t.Fatalf("parsed %q but Kind = %v", s, KindOf(s))
		}
		// One spelling per key: re-encoding gives back the input.
		again := apiKeyPrefix + strings.TrimPrefix(id.String(), "key_") + "_" + secretEncoding.EncodeToString(secret)
		if again != s {
			t.Fatalf("re-encoded %q as %q", s, again)
		}
		if len(secret) != secretBytes {
			t.Fatalf("secret of %d bytes", len(secret))
		}
	})
}
