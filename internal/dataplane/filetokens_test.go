package dataplane

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/model"
)

func TestHMACFileTokens(t *testing.T) {
	t.Parallel()
	tokens := NewHMACFileTokens()
	now := time.Unix(1_800_000_000, 0).UTC()
	c := FileClaims{Sandbox: model.NewSandboxID(), Path: "/a/b", Direction: "download", Expiry: now.Add(FileTokenTTL)}
	tok, err := tokens.Issue(c)
	if err != nil {
		t.Fatal(err)
	}
	if auth.KindOf(tok) != auth.KindFiles {
		t.Fatalf("KindOf(%q) = %v", tok, auth.KindOf(tok))
	}
	got, err := tokens.Verify(tok, now)
	if err != nil || got != c {
		t.Fatalf("Verify = %+v, %v; want %+v", got, err, c)
	}
	if _, err := tokens.Verify(tok, c.Expiry); !errors.Is(err, ErrTokenExpired) {
		t.Fatalf("at expiry: %v", err)
	}
	if _, err := NewHMACFileTokens().Verify(tok, now); !errors.Is(err, ErrTokenInvalid) {
		t.Fatalf("another key: %v", err)
	}
	payload, sig, _ := strings.Cut(strings.TrimPrefix(tok, "alf_"), ".")
	for _, bad := range []string{"", "alf_", "alt_" + payload + "." + sig, "alf_" + payload, "alf_" + payload + "x." + sig, "alf_" + payload + "." + sig + "A", tok[:len(tok)-1]} {
		if _, err := tokens.Verify(bad, now); !errors.Is(err, ErrTokenInvalid) {
			t.Errorf("Verify(%q) = %v, want ErrTokenInvalid", bad, err)
		}
	}
}

func FuzzFileTokenVerify(f *testing.F) {
	tokens := NewHMACFileTokens()
	now := time.Unix(1_800_000_000, 0)
	tok, _ := tokens.Issue(FileClaims{Sandbox: model.NewSandboxID(), Path: "/x", Direction: "upload", Expiry: now.Add(time.Minute)})
	f.Add(tok)
	f.Add("alf_.")
	f.Add("alf_e30.AAAA")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := tokens.Verify(s, now)
		if err == nil && s != tok {
			t.Fatalf("forged token %q accepted: %+v", s, c)
		}
	})
}
