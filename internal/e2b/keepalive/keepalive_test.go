package keepalive

import (
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"", Default, false},
		{"50", 50 * time.Second, false},
		{" 1 ", time.Second, false},
		{"0", time.Second, false},
		{"3600", time.Hour, false},
		{"999999", time.Hour, false},
		{"99999999999", time.Hour, false},
		{"999999999999999999999999", time.Hour, false},
		{"-1", 0, true},
		{"+1", 0, true},
		{"1.5", 0, true},
		{"1_000", 0, true},
		{"x", 0, true},
	}
	for _, tc := range tests {
		got, err := Parse(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("Parse(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "0", "50", "4294967295", "-1", " 7 ", "1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := Parse(s)
		if err != nil {
			return
		}
		if d < Min || d > Max {
			t.Fatalf("Parse(%q) = %v out of %v–%v", s, d, Min, Max)
		}
		if v := strings.TrimSpace(s); strings.TrimLeft(v, "0123456789") != "" {
			t.Fatalf("Parse(%q) accepted a non-digit", s)
		}
	})
}
