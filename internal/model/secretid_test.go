package model

import (
	"errors"
	"testing"
	"time"
)

func TestSecretIDOf(t *testing.T) {
	at := time.UnixMicro(1_700_000_000_123_456)
	a := SecretIDOf("prj_a", "key", at)
	if _, err := ParseSecretID(string(a)); err != nil {
		t.Fatalf("%s does not parse: %v", a, err)
	}
	for _, other := range []SecretID{
		SecretIDOf("prj_b", "key", at),
		SecretIDOf("prj_a", "key2", at),
		SecretIDOf("prj_a", "key", at.Add(time.Microsecond)),
	} {
		if other == a {
			t.Fatalf("two secrets share the ID %s", a)
		}
	}
	if SecretIDOf("prj_a", "key", at) != a {
		t.Fatal("the ID is not stable")
	}
	for _, bad := range []string{"", "sec_", "sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa", "sec_AAAAAAAAAAAAAAAAAAAAAAAAAA", "sec_aaaaaaaaaaaaaaaaaaaaaaaaa1", "key"} {
		if _, err := ParseSecretID(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseSecretID(%q) = %v", bad, err)
		}
	}
}

func FuzzParseSecretID(f *testing.F) {
	f.Add("sec_aaaaaaaaaaaaaaaaaaaaaaaaaa")
	f.Add("sec_")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseSecretID(s)
		if err != nil {
			return
		}
		if string(id) != s || len(s) != 30 {
			t.Fatalf("accepted %q as %q", s, id)
		}
		if again, err := ParseSecretID(id.String()); err != nil || again != id {
			t.Fatalf("round trip of %q: %q, %v", s, again, err)
		}
	})
}
