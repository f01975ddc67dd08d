package model

import (
	"errors"
	"strings"
	"testing"
)

func TestParseTaggedName(t *testing.T) {
	for in, want := range map[string]TaggedName{
		"python":          {"python", "latest"},
		"python:3.12":     {"python", "3.12"},
		"default":         DefaultTemplate,
		"a:_x":            {"a", "_x"},
		"py-3.12:Slim_v1": {"py-3.12", "Slim_v1"},
	} {
		got, err := ParseTaggedName(in)
		if err != nil || got != want {
			t.Errorf("ParseTaggedName(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", ":", "python:", ":tag", "Python", "python:.x", "python:a/b", "a:b:c", "sha256:" + strings.Repeat("0", 64)[:10] + "/", "python:" + strings.Repeat("x", 129), "sha256", "sha512:x", "sha384:latest"} {
		if got, err := ParseTaggedName(bad); err == nil || !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseTaggedName(%q) = %+v, %v; want ErrInvalid", bad, got, err)
		}
	}
	if DefaultTemplate.String() != "default:latest" {
		t.Errorf("DefaultTemplate = %s", DefaultTemplate)
	}
	if (TaggedName{"a", "b"}).Compare(TaggedName{"a", "c"}) >= 0 || (TaggedName{"b", "a"}).Compare(TaggedName{"a", "z"}) <= 0 {
		t.Error("Compare orders wrongly")
	}
}

func FuzzParseTaggedName(f *testing.F) {
	for _, s := range []string{"python", "python:3.12", "a:", ":b", "a:b:c", "A:b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseTaggedName(s)
		if err != nil {
			return
		}
		if s != n.String() && s+":latest" != n.String() {
			t.Fatalf("%q parsed as %q", s, n)
		}
		again, err := ParseTaggedName(n.String())
		if err != nil || again != n {
			t.Fatalf("%q does not round-trip: %+v %v", s, again, err)
		}
	})
}
