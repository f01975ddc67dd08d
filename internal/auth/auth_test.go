package auth

import (
	"bytes"
	"encoding/hex"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/model"
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
	e2b, _, _, err := GenerateAPIKeyFormat(FormatE2B)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{key, e2b, "e2b_", e2b + "0", e2b[:len(e2b)-1], strings.ToUpper(e2b), "e2b_" + strings.Repeat("f", 96), "e2b_" + strings.Repeat("0", 96), "alt_" + strings.Repeat("a", 52), "", "alk_", "alk__", key + "=", "alk_" + strings.Repeat("a", 26) + "_" + strings.Repeat("a", 52)} {
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
		if strings.HasPrefix(s, e2bKeyPrefix) {
			raw, err := secretEncoding.DecodeString(strings.TrimPrefix(id.String(), "key_"))
			if err != nil {
				t.Fatalf("parsed key ID %q does not decode: %v", id, err)
			}
			again = e2bKeyPrefix + hex.EncodeToString(raw) + hex.EncodeToString(secret)
		}
		if again != s {
			t.Fatalf("re-encoded %q as %q", s, again)
		}
		if len(secret) != secretBytes {
			t.Fatalf("secret of %d bytes", len(secret))
		}
	})
}

// TestE2BKeyRoundTrip: an E2B-form key parses to the ID and secret it was
// made with, matches the pattern older E2B SDKs check, and stores exactly
// like an Airlock-form key.
func TestE2BKeyRoundTrip(t *testing.T) {
	sdkPattern := regexp.MustCompile(`^e2b_[0-9a-f]+$`)
	seen := map[string]bool{}
	for range 100 {
		token, id, hash, err := GenerateAPIKeyFormat(FormatE2B)
		if err != nil {
			t.Fatal(err)
		}
		if seen[token] {
			t.Fatalf("duplicate token %q", token)
		}
		seen[token] = true
		if !sdkPattern.MatchString(token) || len(token) != len("e2b_")+96 {
			t.Fatalf("token %q does not look like an E2B key", token)
		}
		if KindOf(token) != KindAPIKey {
			t.Fatalf("KindOf(%q) = %v", token, KindOf(token))
		}
		gotID, secret, err := ParseAPIKey(token)
		if err != nil {
			t.Fatalf("ParseAPIKey(%q): %v", token, err)
		}
		if gotID != id || len(secret) != secretBytes || !VerifySecret(hash, secret) {
			t.Fatalf("ParseAPIKey(%q) = %q, %x; want %q and the generated secret", token, gotID, secret, id)
		}
		// The same key spelled the Airlock way parses to the same pair.
		alk := apiKeyPrefix + strings.TrimPrefix(id.String(), "key_") + "_" + secretEncoding.EncodeToString(secret)
		aID, aSecret, err := ParseAPIKey(alk)
		if err != nil || aID != id || !bytes.Equal(aSecret, secret) {
			t.Fatalf("Airlock form %q = %q, %x, %v", alk, aID, aSecret, err)
		}
	}
	for _, f := range []APIKeyFormat{FormatAirlock, FormatE2B} {
		got, err := ParseAPIKeyFormat(string(f))
		if err != nil || got != f {
			t.Fatalf("ParseAPIKeyFormat(%q) = %q, %v", f, got, err)
		}
	}
	if got, err := ParseAPIKeyFormat(""); err != nil || got != FormatAirlock {
		t.Fatalf(`ParseAPIKeyFormat("") = %q, %v`, got, err)
	}
	for _, bad := range []string{"E2B", "alk", "e2b ", "x"} {
		if _, err := ParseAPIKeyFormat(bad); !errors.Is(err, model.ErrInvalid) {
			t.Fatalf("ParseAPIKeyFormat(%q) = %v, want model.ErrInvalid", bad, err)
		}
		if _, _, _, err := GenerateAPIKeyFormat(APIKeyFormat(bad)); !errors.Is(err, model.ErrInvalid) {
			t.Fatalf("GenerateAPIKeyFormat(%q) = %v, want model.ErrInvalid", bad, err)
		}
	}
}

func TestParseE2BKeyRejects(t *testing.T) {
	key, _, _, err := GenerateAPIKeyFormat(FormatE2B)
	if err != nil {
		t.Fatal(err)
	}
	hexPart := key[4:]
	cases := []struct {
		name  string
		token string
	}{
		{"prefix only", "e2b_"},
		{"upper-case hex", "e2b_" + strings.ToUpper(hexPart)},
		{"one upper-case digit", "e2b_A" + hexPart[1:]},
		{"upper-case prefix", "E2B_" + hexPart},
		{"odd length", key[:len(key)-1]},
		{"short by a byte", key[:len(key)-2]},
		{"long by a byte", key + "00"},
		{"long by a digit", key + "0"},
		{"id only", key[:4+32]},
		{"non-hex", "e2b_" + hexPart[:95] + "g"},
		{"separator inside", "e2b_" + hexPart[:32] + "_" + hexPart[32:]},
		{"trailing space", key + " "},
		{"leading space", " " + key},
		{"newline", key + "\n"},
		{"0x", "e2b_0x" + hexPart[2:]},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, _, err := ParseAPIKey(c.token); !errors.Is(err, ErrMalformed) {
				t.Fatalf("ParseAPIKey(%q) = %v, want ErrMalformed", c.token, err)
			}
		})
	}
}
