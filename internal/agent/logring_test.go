package agent

import (
	"strings"
	"testing"
)

func TestLogRing(t *testing.T) {
	r := NewLogRing(20)
	for _, l := range []string{"one\n", "two\n", "three\n", "four\n", "five\n"} {
		r.Write([]byte(l))
	}
	got := string(r.Snapshot())
	if !strings.HasSuffix(got, "two\nthree\nfour\nfive\n") || !strings.HasPrefix(got, "(1 older lines dropped)") {
		t.Fatalf("snapshot %q", got)
	}
	r.Write([]byte(strings.Repeat("x", 100) + "\n"))
	if n := len(r.buf); n > 20 {
		t.Fatalf("ring holds %d bytes", n)
	}
}
