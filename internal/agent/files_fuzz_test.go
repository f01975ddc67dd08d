package agent

import (
	"io/fs"
	"strings"
	"testing"
)

func FuzzTarEntryName(f *testing.F) {
	for _, s := range []string{"a", "./a/b/", "../x", "/abs", "a/../../b", "a//b", ".", "./", "a\x00b", strings.Repeat("a", 256)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := entryName(s)
		if err != nil || n == "." {
			return
		}
		if !fs.ValidPath(n) || strings.HasPrefix(n, "/") || len(n) > 4096 {
			t.Fatalf("entryName(%q) = %q: not a clean relative path", s, n)
		}
		for _, c := range strings.Split(n, "/") {
			if c == ".." || c == "." || c == "" || len(c) > 255 {
				t.Fatalf("entryName(%q) = %q: bad component %q", s, n, c)
			}
		}
	})
}
