package model

import (
	"errors"
	"strings"
	"testing"
)

func TestParseSignal(t *testing.T) {
	tests := []struct {
		in   string
		want Signal
		err  bool
	}{
		{"TERM", 15, false}, {"SIGTERM", 15, false}, {"term", 15, false}, {" KILL ", 9, false},
		{"9", 9, false}, {"64", 64, false}, {"WINCH", 28, false}, {"IOT", 6, false},
		{"", 0, true}, {"0", 0, true}, {"65", 0, true}, {"-9", 0, true}, {"SIG", 0, true}, {"NOPE", 0, true},
		{strings.Repeat("X", 100), 0, true},
	}
	for _, tt := range tests {
		got, err := ParseSignal(tt.in)
		if tt.err {
			if err == nil || !errors.Is(err, ErrInvalid) {
				t.Errorf("ParseSignal(%q) = %v, %v; want an ErrInvalid error", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseSignal(%q) = %v, %v; want %d", tt.in, got, err, tt.want)
		}
	}
	if Signal(15).String() != "TERM" || Signal(40).String() != "SIG40" || Signal(15).AgentName() != "TERM" || Signal(28).AgentName() != "28" {
		t.Error("signal names")
	}
}

func TestParseTermSizeAndUser(t *testing.T) {
	if _, err := ParseTermSize(24, 80); err != nil {
		t.Fatal(err)
	}
	for _, rc := range [][2]int{{0, 80}, {24, 0}, {1001, 80}, {-1, -1}} {
		if _, err := ParseTermSize(rc[0], rc[1]); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseTermSize(%v) = %v", rc, err)
		}
	}
	if u, err := ParseUserIDs(65534, 100); err != nil || u.UID != 65534 || u.GID != 100 {
		t.Fatal(u, err)
	}
	for _, ug := range [][2]int64{{-1, 0}, {0, -1}, {1 << 31, 0}, {0, 1<<32 - 1}} {
		if _, err := ParseUserIDs(ug[0], ug[1]); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseUserIDs(%v) = %v", ug, err)
		}
	}
}

func FuzzParseSignal(f *testing.F) {
	for _, s := range []string{"TERM", "sigkill", "9", "0", "", "RTMIN", "SIG64"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sig, err := ParseSignal(s)
		if err != nil {
			return
		}
		if sig < 1 || sig > 64 {
			t.Fatalf("ParseSignal(%q) = %d, out of range", s, sig)
		}
		again, err := ParseSignal(sig.String())
		if err != nil || again != sig {
			t.Fatalf("round trip of %q: %v → %q → %v, %v", s, sig, sig.String(), again, err)
		}
	})
}
