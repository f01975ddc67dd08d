package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMemTotal(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		content string
		want    int64
		err     string
	}{
		{"MemTotal:       24683648 kB\nMemFree: 1 kB\n", 24683648, ""},
		{"MemFree: 1 kB\n", 0, "no MemTotal"},
		{"MemTotal: lots kB\n", 0, "odd"},
		{"MemTotal: 5 MB\n", 0, "odd"},
		{"MemTotal: 0 kB\n", 0, "odd"},
	} {
		p := filepath.Join(dir, "meminfo")
		if err := os.WriteFile(p, []byte(tt.content), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := memTotalKiB(p)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: %d, %v; want error %q", tt.content, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%q: %d, %v", tt.content, got, err)
		}
	}
	c, err := nodeCapacity(1.5)
	if err != nil || c.CPUs < 1 || c.MemoryMiB < 64 {
		t.Fatalf("nodeCapacity: %+v, %v", c, err)
	}
}
