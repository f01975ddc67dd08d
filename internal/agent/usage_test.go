package agent

import (
	"os"
	"path/filepath"
	"testing"
)

func TestGuestUsage(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		meminfo string
		wantErr bool
	}{
		{"full", "MemTotal:        1024 kB\nMemFree:          100 kB\nMemAvailable:     512 kB\nBuffers:           16 kB\nCached:           128 kB\n", false},
		{"no Buffers line", "MemTotal: 1024 kB\nMemAvailable: 512 kB\nCached: 144 kB\n", false},
		{"no MemAvailable", "MemTotal: 1024 kB\nCached: 144 kB\n", true},
		{"garbage", "MemTotal: lots\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name)
			if err := os.WriteFile(path, []byte(tc.meminfo), 0o600); err != nil {
				t.Fatal(err)
			}
			u, err := guestUsage(path, dir)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("guestUsage = %+v, want an error", u)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if u.MemTotal != 1024<<10 || u.MemAvailable != 512<<10 || u.MemCache != 144<<10 {
				t.Errorf("memory %+v", u)
			}
			if u.DiskTotal <= 0 || u.DiskUsed < 0 || u.DiskUsed > u.DiskTotal {
				t.Errorf("disk %+v", u)
			}
		})
	}
	if _, err := guestUsage(filepath.Join(dir, "missing"), dir); err == nil {
		t.Error("a missing meminfo is no error")
	}
}
