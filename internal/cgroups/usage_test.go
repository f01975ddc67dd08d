package cgroups

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestUsage reads a cgroup's CPU time and memory on each layout, from
// files laid out as the kernel does (fake hierarchies in a temp dir).
func TestUsage(t *testing.T) {
	const p = Path("/airlock/sbx")
	for _, tc := range []struct {
		name    string
		host    func(root string) Host
		files   map[string]string // path below root → content
		want    Usage
		wantErr bool
	}{
		{
			name: "v1 (hybrid)",
			host: func(root string) Host {
				return Host{Layout: LayoutHybrid, Hierarchies: []Hierarchy{
					{Version: 1, MountPoint: filepath.Join(root, "cpu,cpuacct"), Root: "/", Controllers: []string{"cpu", "cpuacct"}},
					{Version: 1, MountPoint: filepath.Join(root, "memory"), Root: "/", Controllers: []string{"memory"}},
					{Version: 2, MountPoint: filepath.Join(root, "unified"), Root: "/"},
				}}
			},
			files: map[string]string{
				"cpu,cpuacct/airlock/sbx/cpuacct.usage":    "2500000000\n",
				"memory/airlock/sbx/memory.usage_in_bytes": "104857600\n",
				"memory/airlock/sbx/memory.stat":           "cache 1\nrss 2\ntotal_cache 20971520\ntotal_rss 83886080\n",
			},
			want: Usage{CPU: 2500 * time.Millisecond, Memory: 80 << 20, Cache: 20 << 20},
		},
		{
			name: "v2",
			host: func(root string) Host {
				return Host{Layout: LayoutV2, Hierarchies: []Hierarchy{
					{Version: 2, MountPoint: root, Root: "/", Controllers: []string{"cpu", "memory", "pids"}},
				}}
			},
			files: map[string]string{
				"airlock/sbx/cpu.stat":       "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n",
				"airlock/sbx/memory.current": "52428800\n",
				"airlock/sbx/memory.stat":    "anon 41943040\nfile 10485760\n",
			},
			want: Usage{CPU: 1500 * time.Millisecond, Memory: 40 << 20, Cache: 10 << 20},
		},
		{
			name: "v2, cache above the usage (read apart): clipped",
			host: func(root string) Host {
				return Host{Layout: LayoutV2, Hierarchies: []Hierarchy{{Version: 2, MountPoint: root, Root: "/"}}}
			},
			files: map[string]string{
				"airlock/sbx/cpu.stat":       "usage_usec 1\n",
				"airlock/sbx/memory.current": "100\n",
				"airlock/sbx/memory.stat":    "file 200\n",
			},
			want: Usage{CPU: time.Microsecond, Memory: 0, Cache: 100},
		},
		{
			name: "the cgroup is gone",
			host: func(root string) Host {
				return Host{Layout: LayoutV2, Hierarchies: []Hierarchy{{Version: 2, MountPoint: root, Root: "/"}}}
			},
			wantErr: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for name, content := range tc.files {
				path := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := tc.host(root).Usage(p)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("Usage = %+v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Usage = %+v, want %+v", got, tc.want)
			}
		})
	}
}
