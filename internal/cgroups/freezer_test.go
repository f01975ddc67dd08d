package cgroups

import (
	"os"
	"path/filepath"
	"testing"
)

// Freezer reads v1 freezer.state and v2 cgroup.freeze with cgroup.events
// (here from fake hierarchies in directories); a missing cgroup is thawed.
func TestFreezer(t *testing.T) {
	const p = Path("/sbx")
	for _, tc := range []struct {
		name  string
		v1    bool
		files map[string]string // in p's directory; nil: the cgroup does not exist
		want  FreezerState
	}{
		{"v1 thawed", true, map[string]string{"freezer.state": "THAWED\n"}, Thawed},
		{"v1 freezing", true, map[string]string{"freezer.state": "FREEZING\n"}, Freezing},
		{"v1 frozen", true, map[string]string{"freezer.state": "FROZEN\n"}, Frozen},
		{"v1 missing", true, nil, Thawed},
		{"v2 thawed", false, map[string]string{"cgroup.freeze": "0\n", "cgroup.events": "populated 1\nfrozen 0\n"}, Thawed},
		{"v2 freezing", false, map[string]string{"cgroup.freeze": "1\n", "cgroup.events": "populated 1\nfrozen 0\n"}, Freezing},
		{"v2 frozen", false, map[string]string{"cgroup.freeze": "1\n", "cgroup.events": "populated 1\nfrozen 1\n"}, Frozen},
		{"v2 missing", false, nil, Thawed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			h := Host{Layout: LayoutV2, Hierarchies: []Hierarchy{{Version: 2, MountPoint: root, Root: "/"}}}
			if tc.v1 {
				h = Host{Layout: LayoutV1, Hierarchies: []Hierarchy{{Version: 1, MountPoint: root, Root: "/", Controllers: []string{"freezer"}}}}
			}
			if tc.files != nil {
				dir := filepath.Join(root, "sbx")
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				for name, data := range tc.files {
					if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			got, err := h.Freezer(p)
			if err != nil || got != tc.want {
				t.Fatalf("Freezer = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
