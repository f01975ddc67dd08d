package oci

import (
	"os"
	"testing"
)

func TestParseProcStat(t *testing.T) {
	tests := []struct {
		in    string
		state byte
		start uint64
		ok    bool
	}{
		{"42 (sleep) S 1 42 42 0 -1 4194560 88 0 0 0 0 0 0 0 20 0 1 0 12345 2568192 200 184467", 'S', 12345, true},
		{"42 (a) b) (c) Z 1 42 42 0 -1 4194560 88 0 0 0 0 0 0 0 20 0 1 0 777 0 0", 'Z', 777, true},
		{"42 (x) S 1 2", 0, 0, false},
		{"no paren", 0, 0, false},
		{"42 (x) S 1 42 42 0 -1 4194560 88 0 0 0 0 0 0 0 20 0 1 0 notanumber 0", 0, 0, false},
	}
	for _, tt := range tests {
		state, start, ok := parseProcStat(tt.in)
		if state != tt.state || start != tt.start || ok != tt.ok {
			t.Errorf("parseProcStat(%q) = %c %d %v", tt.in, state, start, ok)
		}
	}
	if !processAlive(os.Getpid()) || processAlive(1<<22+1) {
		t.Error("processAlive")
	}
}
