package blobstore_test

import (
	"testing"

	"github.com/airlockdev/airlock/internal/blobstore"
)

func FuzzParseLinkKind(f *testing.F) {
	for _, s := range []string{"template-archive", "", "A", "a/b", "x-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := blobstore.ParseLinkKind(s)
		if err != nil {
			return
		}
		if k.String() != s || k.IsZero() {
			t.Fatalf("ParseLinkKind(%q) = %q", s, k)
		}
		for _, c := range s {
			if c == '/' || c == '.' {
				t.Fatalf("ParseLinkKind(%q) accepted a path character", s)
			}
		}
	})
}
