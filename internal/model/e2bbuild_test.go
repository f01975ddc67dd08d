package model

import (
	"errors"
	"testing"
)

func TestE2BBuildID(t *testing.T) {
	seen := map[E2BBuildID]bool{}
	for range 100 {
		id := NewE2BBuildID()
		if _, err := ParseE2BBuildID(id.String()); err != nil {
			t.Fatalf("%s does not parse: %v", id, err)
		}
		if seen[id] {
			t.Fatalf("%s drawn twice", id)
		}
		seen[id] = true
	}
	for _, bad := range []string{
		"", "bld_aaaaaaaaaaaaaaaaaaaaaaaaaa",
		"0A1B2C3D-0000-4000-8000-000000000000",  // upper case
		"0a1b2c3d-0000-1000-8000-000000000000",  // not version 4
		"0a1b2c3d-0000-4000-c000-000000000000",  // not the RFC variant
		"0a1b2c3d-0000-4000-8000-0000000000000", // too long
		"0a1b2c3d00004000800000000000000000",
		"../../etc/passwd",
	} {
		if _, err := ParseE2BBuildID(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseE2BBuildID(%q) = %v", bad, err)
		}
	}
}

func TestE2BBuildStatus(t *testing.T) {
	for _, s := range []E2BBuildStatus{E2BBuildWaiting, E2BBuildStarting, E2BBuildBuilding, E2BBuildReady, E2BBuildError} {
		if got, err := ParseE2BBuildStatus(string(s)); err != nil || got != s {
			t.Errorf("ParseE2BBuildStatus(%q) = %q, %v", s, got, err)
		}
		if want := s == E2BBuildReady || s == E2BBuildError; s.Ended() != want {
			t.Errorf("%s.Ended() = %v", s, s.Ended())
		}
	}
	if _, err := ParseE2BBuildStatus("succeeded"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseE2BBuildStatus(succeeded) = %v", err)
	}
}

func FuzzParseE2BBuildID(f *testing.F) {
	f.Add("0a1b2c3d-0000-4000-8000-000000000000")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseE2BBuildID(s)
		if err != nil {
			return
		}
		if string(id) != s || len(s) != 36 {
			t.Fatalf("accepted %q as %q", s, id)
		}
		if again, err := ParseE2BBuildID(id.String()); err != nil || again != id {
			t.Fatalf("round trip of %q: %q, %v", s, again, err)
		}
	})
}
