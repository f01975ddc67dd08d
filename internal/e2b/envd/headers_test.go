package envd

import (
	"strings"
	"testing"
	"time"
)

func TestParseLifetime(t *testing.T) {
	tests := []struct {
		in      string
		want    Lifetime
		secs    int
		wantErr bool
	}{
		{"", 0, 0, false},
		{"0", 0, 0, false},
		{"1", Lifetime(time.Millisecond), 1, false},
		{"60000", Lifetime(time.Minute), 60, false},
		{"1500", Lifetime(1500 * time.Millisecond), 2, false},
		{"9999999999", Lifetime(maxLifetime), 604800, false},
		{"12345678901", 0, 0, true},
		{"-5", 0, 0, true},
		{"1.5", 0, 0, true},
		{"abc", 0, 0, true},
	}
	for _, tc := range tests {
		got, err := ParseLifetime(tc.in)
		if (err != nil) != tc.wantErr {
			t.Fatalf("ParseLifetime(%q) error %v, want error %v", tc.in, err, tc.wantErr)
		}
		if got != tc.want || got.Secs() != tc.secs {
			t.Errorf("ParseLifetime(%q) = %v (%d s), want %v (%d s)", tc.in, time.Duration(got), got.Secs(), time.Duration(tc.want), tc.secs)
		}
	}
}

func FuzzParseLifetime(f *testing.F) {
	for _, s := range []string{"", "0", "60000", "9999999999", "-1", "1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLifetime(s)
		if err != nil {
			return
		}
		if l < 0 || time.Duration(l) > maxLifetime || l.Secs() < 0 || l.Secs() > 604800 {
			t.Fatalf("ParseLifetime(%q) = %v out of range", s, time.Duration(l))
		}
		if l > 0 && l.Secs() == 0 {
			t.Fatalf("ParseLifetime(%q) = %v: a lifetime rounds to 0 s (no limit)", s, time.Duration(l))
		}
		if strings.TrimLeft(s, "0123456789") != "" {
			t.Fatalf("ParseLifetime(%q) accepted a non-digit", s)
		}
	})
}

func TestEndEvent(t *testing.T) {
	tests := []struct {
		code     int
		signal   string
		want     int32
		exited   bool
		status   string
		hasError bool
	}{
		{0, "", 0, true, "exit status 0", false},
		{3, "", 3, true, "exit status 3", true},
		{-1, "KILL", -1, false, "signal: killed", true},
		{-1, "TERM", -1, false, "signal: terminated", true},
		{-1, "SIG40", -1, false, "signal: signal 40", true},
	}
	for _, tc := range tests {
		e := endEvent(tc.code, tc.signal)
		if e.GetExitCode() != tc.want || e.GetExited() != tc.exited || e.GetStatus() != tc.status || (e.Error != nil) != tc.hasError {
			t.Errorf("endEvent(%d, %q) = %v", tc.code, tc.signal, e)
		}
		if tc.hasError && e.GetError() != tc.status {
			t.Errorf("endEvent(%d, %q) error %q, want the status", tc.code, tc.signal, e.GetError())
		}
	}
}
