package model

import "testing"

func TestBuildValues(t *testing.T) {
	id := NewBuildID()
	if got, err := ParseBuildID(id.String()); err != nil || got != id {
		t.Fatalf("ParseBuildID(%q) = %q, %v", id, got, err)
	}
	for _, bad := range []string{"", "bld_", "op_aaaaaaaaaaaaaaaaaaaaaaaaaa", "bld_AAAAAAAAAAAAAAAAAAAAAAAAAA"} {
		if _, err := ParseBuildID(bad); err == nil {
			t.Errorf("ParseBuildID(%q) accepted", bad)
		}
	}
	if _, err := ParseBuildKind("recipe"); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseBuildKind("docker"); err == nil {
		t.Fatal("ParseBuildKind(docker) accepted")
	}
	if s, err := ParseBuildState("running"); err != nil || s.Done() {
		t.Fatalf("running: %v %v", s, err)
	}
	if s, err := ParseBuildState("failed"); err != nil || !s.Done() {
		t.Fatalf("failed: %v %v", s, err)
	}
}

func FuzzParseBuildID(f *testing.F) {
	f.Add(NewBuildID().String())
	f.Add("bld_")
	f.Add("bld_aaaaaaaaaaaaaaaaaaaaaaaaa1")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseBuildID(s)
		if err != nil {
			return
		}
		if id.String() != s || len(s) != 4+idRandomLen {
			t.Fatalf("accepted %q as %q", s, id)
		}
		if _, err := ParseBuildID(id.String()); err != nil {
			t.Fatalf("round trip of %q: %v", s, err)
		}
	})
}
