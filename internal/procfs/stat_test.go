package procfs

import (
	"os"
	"testing"
)

func TestParseStat(t *testing.T) {
	tests := []struct {
		in   string
		want Stat
		ok   bool
	}{
		{"42 (sleep) S 1 42 42 0 -1 4194560 88 0 0 0 0 0 0 0 20 0 1 0 12345 2568192 200 184467", Stat{'S', 1, 12345}, true},
		{"42 (a) b) (c) Z 1 42 42 0 -1 4194560 88 0 0 0 0 0 0 0 20 0 1 0 777 0 0", Stat{'Z', 1, 777}, true},
		{"42 (x) S 1 2", Stat{}, false},
		{"no paren", Stat{}, false},
		{"42 (x) S 1 42 42 0 -1 4194560 88 0 0 0 0 0 0 0 20 0 1 0 notanumber 0", Stat{}, false},
		{"42 (x) S x 42 42 0 -1 4194560 88 0 0 0 0 0 0 0 20 0 1 0 5 0", Stat{}, false},
		{"42 (x) SS 1 42 42 0 -1 4194560 88 0 0 0 0 0 0 0 20 0 1 0 5 0", Stat{}, false},
	}
	for _, tt := range tests {
		got, ok := ParseStat(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseStat(%q) = %+v, %v; want %+v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestReadStatSelf(t *testing.T) {
	st, ok := ReadStat(os.Getpid())
	if !ok || st.State == 'Z' || st.PPid != os.Getppid() || st.StartTime == 0 {
		t.Fatalf("ReadStat(self) = %+v, %v; want alive, parent %d, a start time", st, ok, os.Getppid())
	}
}

func TestAlive(t *testing.T) {
	if !Alive(os.Getpid()) {
		t.Error("this process is not alive")
	}
	if Alive(1<<22 + 1) { // above pid_max's ceiling: no such process
		t.Error("a pid that cannot exist is alive")
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add("42 (sleep) S 1 42 42 0 -1 4194560 88 0 0 0 0 0 0 0 20 0 1 0 12345 2568192 200 184467")
	f.Add("1 ()) R")
	f.Fuzz(func(t *testing.T, s string) {
		st, ok := ParseStat(s)
		if !ok && st != (Stat{}) {
			t.Fatalf("ParseStat(%q) = %+v but not ok", s, st)
		}
	})
}
