package agent

import (
	"slices"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/rootfs/mountinfo"
)

const hybridMountInfo = `22 27 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
31 22 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
32 31 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
40 31 0:35 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:21 - cgroup cgroup rw,pids
41 31 0:36 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:22 - cgroup cgroup rw,memory
50 27 0:40 / /mnt/with\040space rw - ext4 /dev/sda1 rw
`

const hybridProcCgroup = `9:name=systemd:/
8:pids:/user.slice/session-1
4:memory:/process_api/abc
0::/
`

func TestParseHybridMountInfo(t *testing.T) {
	m, err := mountinfo.Parse(strings.NewReader(hybridMountInfo))
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 6 {
		t.Fatalf("got %d mounts", len(m))
	}
	if m[3].MountPoint != "/sys/fs/cgroup/pids" || m[3].FSType != "cgroup" || !m[3].HasSuperOption("pids") {
		t.Fatalf("pids mount = %+v", m[3])
	}
	if m[5].MountPoint != "/mnt/with space" {
		t.Fatalf("unescaped mount point = %q", m[5].MountPoint)
	}
}

func TestParseProcCgroup(t *testing.T) {
	g, err := parseProcCgroup(strings.NewReader(hybridProcCgroup))
	if err != nil {
		t.Fatal(err)
	}
	if len(g) != 4 || g[1].Path != "/user.slice/session-1" || !slices.Equal(g[1].Controllers, []string{"pids"}) || len(g[3].Controllers) != 0 {
		t.Fatalf("parsed %+v", g)
	}
	for _, bad := range []string{"x:pids:/\n", "1:pids\n"} {
		if _, err := parseProcCgroup(strings.NewReader(bad)); err == nil {
			t.Errorf("parseProcCgroup(%q) succeeded", bad)
		}
	}
}

func TestFindPidsCgroup(t *testing.T) {
	v2Mounts := `30 22 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw
`
	nsMounts := `30 22 0:26 /kubepods/pod1 /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw
`
	tests := []struct {
		name           string
		mounts, groups string
		dirs           []string
		want           string
		wantVersion    int
	}{
		{"hybrid uses v1 pids", hybridMountInfo, hybridProcCgroup, []string{"/sys/fs/cgroup/pids/user.slice/session-1"}, "/sys/fs/cgroup/pids/user.slice/session-1", 1},
		{"hybrid, own cgroup not visible", hybridMountInfo, hybridProcCgroup, nil, "/sys/fs/cgroup/pids", 1},
		{"v2 in a cgroup namespace", v2Mounts, "0::/\n", []string{"/sys/fs/cgroup"}, "/sys/fs/cgroup", 2},
		{"v2 nested", v2Mounts, "0::/a/b\n", []string{"/sys/fs/cgroup/a/b"}, "/sys/fs/cgroup/a/b", 2},
		{"v2 mount root is a sub-cgroup", nsMounts, "0::/kubepods/pod1/c\n", []string{"/sys/fs/cgroup/c"}, "/sys/fs/cgroup/c", 2},
		{"v2 outside the mount root", nsMounts, "0::/other\n", []string{"/sys/fs/cgroup/other"}, "/sys/fs/cgroup", 2},
		{"v2 path escaping the mount", v2Mounts, "0::/../../etc\n", []string{"/etc"}, "/sys/fs/cgroup", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := mountinfo.Parse(strings.NewReader(tt.mounts))
			if err != nil {
				t.Fatal(err)
			}
			g, err := parseProcCgroup(strings.NewReader(tt.groups))
			if err != nil {
				t.Fatal(err)
			}
			dir, v, err := findPidsCgroup(m, g, func(p string) bool { return slices.Contains(tt.dirs, p) })
			if err != nil || dir != tt.want || v != tt.wantVersion {
				t.Fatalf("findPidsCgroup = %q, v%d, %v; want %q, v%d", dir, v, err, tt.want, tt.wantVersion)
			}
		})
	}
	if _, _, err := findPidsCgroup(nil, nil, func(string) bool { return true }); err == nil {
		t.Fatal("findPidsCgroup without mounts succeeded")
	}
}

// TestParentOfAgentLeaf: an agent the host moved into its cgroup v2 leaf
// makes its workload cgroup next to the leaf; on cgroup v1 it stays where
// it is.
func TestParentOfAgentLeaf(t *testing.T) {
	for _, tt := range []struct {
		dir     string
		version int
		want    string
	}{
		{"/sys/fs/cgroup/" + AgentCgroup, 2, "/sys/fs/cgroup"},
		{"/sys/fs/cgroup/a/" + AgentCgroup, 2, "/sys/fs/cgroup/a"},
		{"/sys/fs/cgroup", 2, "/sys/fs/cgroup"},
		{"/sys/fs/cgroup/pids/" + AgentCgroup, 1, "/sys/fs/cgroup/pids/" + AgentCgroup},
		{"/sys/fs/cgroup/pids", 1, "/sys/fs/cgroup/pids"},
	} {
		if got := parentOfAgentLeaf(tt.dir, tt.version); got != tt.want {
			t.Errorf("parentOfAgentLeaf(%q, %d) = %q, want %q", tt.dir, tt.version, got, tt.want)
		}
	}
}

func TestDiscoverPidsCgroupOnThisHost(t *testing.T) {
	dir, v, err := discoverPidsCgroup()
	if err != nil {
		t.Skipf("no cgroup hierarchy visible on this host: %v", err)
	}
	if !strings.HasPrefix(dir, "/") || (v != 1 && v != 2) {
		t.Fatalf("discoverPidsCgroup = %q, v%d", dir, v)
	}
	t.Logf("this process's pids cgroup: %s (v%d)", dir, v)
}

func FuzzFindPidsCgroupMounts(f *testing.F) {
	f.Add(hybridMountInfo)
	f.Add(`1 2 0:1 / /a\040b rw - cgroup2 none rw` + "\n")
	f.Add(`\0`)
	f.Fuzz(func(t *testing.T, s string) {
		m, err := mountinfo.Parse(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, x := range m {
			if x.FSType == "" {
				t.Fatalf("mount without fstype from %q", s)
			}
		}
		g, _ := parseProcCgroup(strings.NewReader(s))
		dir, _, err := findPidsCgroup(m, g, func(string) bool { return true })
		if err == nil && dir == "" {
			t.Fatal("empty dir without error")
		}
	})
}

func FuzzParseProcCgroup(f *testing.F) {
	f.Add(hybridProcCgroup)
	f.Add("0::/\n")
	f.Add("1:a,b:/x:y\n")
	f.Fuzz(func(t *testing.T, s string) {
		g, err := parseProcCgroup(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, x := range g {
			if slices.Contains(x.Controllers, "") && len(x.Controllers) == 1 {
				t.Fatalf("empty controller list parsed as [\"\"] from %q", s)
			}
		}
		m, _ := mountinfo.Parse(strings.NewReader(hybridMountInfo))
		dir, _, err := findPidsCgroup(m, g, func(string) bool { return true })
		if err == nil && !strings.HasPrefix(dir, "/sys/fs/cgroup") {
			t.Fatalf("dir %q escapes the cgroup mounts", dir)
		}
	})
}
