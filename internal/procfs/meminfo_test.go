package procfs

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
)

func TestSizeField(t *testing.T) {
	const meminfo = "MemTotal:       24683648 kB\nMemFree:         1000 kB\nMemAvailable:   24120000 kB\nHugePages_Total:       0\nHugepagesize:       2048 kB\nWeird:   12 MB\nNeg:  -1 kB\nHuge: 9223372036854775807 kB\nSpaced:  5  kB  \nTwo: 1 2 kB\nEmpty:\n"
	tests := []struct {
		text, name string
		want       int64
		err        string
	}{
		{meminfo, "MemTotal", 24683648 << 10, ""},
		{meminfo, "MemAvailable", 24120000 << 10, ""},
		{meminfo, "Hugepagesize", 2048 << 10, ""},
		{meminfo, "Spaced", 5 << 10, ""},
		{meminfo, "Mem", 0, "no Mem line"}, // a prefix of names is no name
		{meminfo, "Missing", 0, "no Missing line"},
		{meminfo, "HugePages_Total", 0, "odd HugePages_Total line"}, // a count, not a size
		{meminfo, "Weird", 0, "odd Weird line"},
		{meminfo, "Neg", 0, "odd Neg line"},
		{meminfo, "Huge", 0, "odd Huge line"}, // overflows in bytes
		{meminfo, "Two", 0, "odd Two line"},
		{meminfo, "Empty", 0, "odd Empty line"},
		{"Name:\tbash\nVmRSS:\t    5120 kB\n", "VmRSS", 5120 << 10, ""}, // /proc/PID/status
		{"55d0-7ffd ---p 00000000 00:00 0  [rollup]\nRss:  200 kB\nPss:  100 kB\n", "Pss", 100 << 10, ""},
		{"MemTotal: 1 kB\nMemTotal: 2 kB\n", "MemTotal", 1 << 10, ""}, // the first
		{"MemTotal: 7 kB", "MemTotal", 7 << 10, ""},                   // no final newline
		{"", "MemTotal", 0, "no MemTotal line"},
	}
	for _, tt := range tests {
		got, err := SizeField(tt.text, tt.name)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("SizeField(%s) = %d, %v; want error %q", tt.name, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("SizeField(%s) = %d, %v; want %d", tt.name, got, err, tt.want)
		}
	}
}

func TestSizeFieldOfThisHost(t *testing.T) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Skip(err)
	}
	total, err := SizeField(string(data), "MemTotal")
	if err != nil || total < 64<<20 {
		t.Fatalf("MemTotal = %d, %v", total, err)
	}
	if avail, err := SizeField(string(data), "MemAvailable"); err != nil || avail > total {
		t.Fatalf("MemAvailable = %d, %v (MemTotal %d)", avail, err, total)
	}
}

func FuzzSizeField(f *testing.F) {
	f.Add("MemTotal:       24683648 kB\n", "MemTotal", int64(0))
	f.Add("VmRSS:\t5 kB\nPss: 9223372036854775807 kB\n", "Pss", int64(-1))
	f.Add("X:1 kB", "X", int64(9007199254740991))
	f.Fuzz(func(t *testing.T, text, name string, n int64) {
		got, err := SizeField(text, name)
		if err == nil && (got < 0 || got%1024 != 0 || !strings.Contains(text, name+":")) {
			t.Fatalf("SizeField(%q, %q) = %d", text, name, got)
		}
		// A line in the kernel's format is read back.
		if n < 0 || n > math.MaxInt64>>10 || strings.Contains(name, "\n") {
			return
		}
		line := fmt.Sprintf("%s: %8d kB\n", name, n)
		if got, err := SizeField(line+"Other: 1 kB\n", name); err != nil || got != n<<10 {
			t.Fatalf("SizeField(%q) = %d, %v; want %d", line, got, err, n<<10)
		}
	})
}
