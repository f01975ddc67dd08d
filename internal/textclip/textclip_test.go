package textclip

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestPrefix(t *testing.T) {
	tests := []struct {
		s    string
		n    int
		want string
	}{
		{"", 3, ""},
		{"abc", 3, "abc"},
		{"abcd", 3, "abc"},
		{"abc", 0, ""},
		{"abc", -1, ""},
		{"aé", 2, "a"},                         // é is 2 bytes: not split
		{"aé", 3, "aé"},                        // fits
		{"a€b", 3, "a"},                        // € is 3 bytes
		{"a€b", 4, "a€"},                       // ends right after it
		{"a😀b", 4, "a"},                        // 4 bytes
		{"😀😀", 7, "😀"},                         // the second one's last byte is past n
		{"a\x80\x80\x80\x80b", 3, "a\x80\x80"}, // continuation bytes without a start: cut as they are
		{"a\xe2\x82z", 2, "a\xe2"},             // a start byte of a character that never ends: invalid bytes
		{"\xff\xfe", 1, "\xff"},
	}
	for _, tt := range tests {
		if got := Prefix(tt.s, tt.n); got != tt.want {
			t.Errorf("Prefix(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
		}
	}
}

func TestBytesAndCounted(t *testing.T) {
	tests := []struct {
		s              string
		n              int
		bytes, counted string
	}{
		{"short", 80, "short", "short"},
		{"abcdef", 3, "abc…", "abc… (3 more bytes)"},
		{"aébc", 2, "a…", "a… (4 more bytes)"},
		{strings.Repeat("x", 81), 80, strings.Repeat("x", 80) + "…", strings.Repeat("x", 80) + "… (1 more bytes)"},
	}
	for _, tt := range tests {
		if got := Bytes(tt.s, tt.n); got != tt.bytes {
			t.Errorf("Bytes(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.bytes)
		}
		if got := Counted(tt.s, tt.n); got != tt.counted {
			t.Errorf("Counted(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.counted)
		}
	}
}

func TestRunes(t *testing.T) {
	tests := []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 3, "abc"},
		{"abcd", 3, "ab…"},
		{"ééé", 3, "ééé"},
		{"éééé", 3, "éé…"},
		{"abc", 1, "…"},
		{"abc", 0, ""},
	}
	for _, tt := range tests {
		if got := Runes(tt.s, tt.n); got != tt.want {
			t.Errorf("Runes(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
		}
	}
}

func FuzzPrefix(f *testing.F) {
	for _, s := range []string{"", "abc", "aé€😀", "a\x80\x80\x80\x80b", "\xe2\x82\xe2\x82\xac", "\xff"} {
		f.Add(s, 3)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		p := Prefix(s, n)
		if !strings.HasPrefix(s, p) || len(p) > max(n, 0) && len(p) != len(s) {
			t.Fatalf("Prefix(%q, %d) = %q: not a prefix of at most n bytes", s, n, p)
		}
		if len(s) > n && len(p) < n-(utf8.UTFMax-1) {
			t.Fatalf("Prefix(%q, %d) = %q: cut more than a character", s, n, p)
		}
		// Nothing valid is split: the characters of p are those s starts with.
		if utf8.ValidString(s) && !utf8.ValidString(p) {
			t.Fatalf("Prefix(%q, %d) = %q splits a character", s, n, p)
		}
		if b := Bytes(s, n); b != s && b != p+Marker {
			t.Fatalf("Bytes(%q, %d) = %q", s, n, b)
		}
		if r := Runes(s, n); utf8.RuneCountInString(r) > max(n, 0) || !strings.HasPrefix(s, strings.TrimSuffix(r, Marker)) {
			t.Fatalf("Runes(%q, %d) = %q", s, n, r)
		}
	})
}
