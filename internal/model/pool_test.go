package model

import (
	"errors"
	"testing"
	"time"
)

func TestSystemProjectParses(t *testing.T) {
	if id, err := ParseProjectID(string(SystemProject)); err != nil || id != SystemProject {
		t.Fatalf("ParseProjectID(SystemProject) = %q, %v", id, err)
	}
}

func TestParseSource(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Source
		ok   bool
	}{
		{"", SourceCold, true},
		{"cold", SourceCold, true},
		{"pool", SourcePool, true},
		{"snapshot", SourceSnapshot, true},
		{"Pool", "", false},
		{"warm", "", false},
	} {
		got, err := ParseSource(tc.in)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("ParseSource(%q) = %q, %v", tc.in, got, err)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseSource(%q): error %v does not wrap ErrInvalid", tc.in, err)
		}
	}
}

func TestPoolValidateReleasesDrained(t *testing.T) {
	ref, err := ParseTemplateRef("python")
	if err != nil {
		t.Fatal(err)
	}
	ok := Pool{Key: PoolKey{Template: ref, CPUs: 1, MemoryMiB: 512}, Size: 2}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]Pool{
		"negative size": {Key: ok.Key, Size: -1},
		"too big":       {Key: ok.Key, Size: MaxPoolSize + 1},
		"no template":   {Key: PoolKey{CPUs: 1, MemoryMiB: 512}, Size: 1},
		"no cpus":       {Key: PoolKey{Template: ref, MemoryMiB: 512}, Size: 1},
	} {
		if err := p.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Validate = %v, want ErrInvalid", name, err)
		}
	}
	a, b := DigestFromSHA256([32]byte{1}), DigestFromSHA256([32]byte{2})
	for _, tc := range []struct {
		cur, prev TemplateDigest
		want      int
	}{{"", "", 0}, {a, "", 1}, {a, b, 2}, {a, a, 1}} {
		if got := (Pool{Current: tc.cur, Previous: tc.prev}).Releases(); len(got) != tc.want {
			t.Errorf("Releases(%s, %s) = %v", tc.cur, tc.prev, got)
		}
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := Pool{CreatedAt: t0}
	if p.Drained(t0.Add(time.Hour), time.Hour) || !p.Drained(t0.Add(time.Hour+1), time.Hour) {
		t.Error("a never-used pool drains an hour after its creation")
	}
	p.LastUsed = t0.Add(time.Hour)
	if p.Drained(t0.Add(90*time.Minute), time.Hour) {
		t.Error("a used pool drains from its last use")
	}
}

func FuzzParsePoolID(f *testing.F) {
	f.Add(NewPoolID().String())
	f.Add("pool_")
	f.Add("sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParsePoolID(s)
		if err != nil {
			return
		}
		if id.String() != s || len(s) != 5+idRandomLen {
			t.Fatalf("accepted %q as %q", s, id)
		}
	})
}
