// Package textclip shortens text shown to people — values echoed in error
// messages, table cells — without splitting a UTF-8 character, and marks
// what it cut.
package textclip

import (
	"strconv"
	"unicode/utf8"
)

// Marker ends a text that was cut.
const Marker = "…"

// Prefix returns the longest prefix of s of at most n bytes that does not
// end inside a UTF-8 character: s itself if it is short enough. Invalid
// bytes count as characters of one byte.
func Prefix(s string, n int) string {
	n = max(n, 0)
	if len(s) <= n {
		return s
	}
	// The character s[n] belongs to starts at most UTFMax-1 bytes before.
	for i := n; i >= max(0, n-(utf8.UTFMax-1)); i-- {
		if !utf8.RuneStart(s[i]) {
			continue
		}
		if _, size := utf8.DecodeRuneInString(s[i:]); i < n && i+size > n {
			return s[:i] // the character at i straddles n
		}
		break
	}
	return s[:n]
}

// Bytes returns s if it is at most n bytes long, else its Prefix of n
// bytes followed by Marker (which is not counted in n).
func Bytes(s string, n int) string {
	if p := Prefix(s, n); len(p) < len(s) {
		return p + Marker
	}
	return s
}

// Counted is Bytes that also says how much was cut: the Prefix of n bytes,
// then "… (K more bytes)".
func Counted(s string, n int) string {
	if p := Prefix(s, n); len(p) < len(s) {
		return p + Marker + " (" + strconv.Itoa(len(s)-len(p)) + " more bytes)"
	}
	return s
}

// Runes returns s if it has at most n characters (runes), else its first
// n-1 followed by Marker: n characters in all, for a column of width n.
func Runes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	i := 0
	for range n - 1 {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s[:i] + Marker
}
