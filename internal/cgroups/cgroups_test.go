package cgroups

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/rootfs/mountinfo"
)

func parseMounts(t *testing.T, lines ...string) []mountinfo.Mount {
	t.Helper()
	m, err := mountinfo.Parse(strings.NewReader(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestFromMounts(t *testing.T) {
	hybrid := []string{
		"31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755",
		"32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu",
		"35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory",
		"39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids",
		"40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd",
		"41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw",
	}
	v2 := []string{"31 23 0:28 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw,nsdelegate"}
	v1 := []string{
		"32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct",
		"33 31 0:29 / /mnt/again rw - cgroup cgroup rw,cpu,cpuacct", // same hierarchy twice
		"35 31 0:32 /nested /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory",
	}
	ctrls := func(dir string) ([]string, error) {
		if dir == "/sys/fs/cgroup" {
			return []string{"cpu", "memory", "pids"}, nil
		}
		return []string{"hugetlb"}, nil
	}
	tests := []struct {
		name      string
		lines     []string
		layout    Layout
		dirs      []string
		memoryDir string
		wantErr   bool
	}{
		{"hybrid", hybrid, LayoutHybrid, []string{
			"/sys/fs/cgroup/cpu/a/b", "/sys/fs/cgroup/memory/a/b", "/sys/fs/cgroup/pids/a/b",
			"/sys/fs/cgroup/systemd/a/b", "/sys/fs/cgroup/unified/a/b",
		}, "/sys/fs/cgroup/memory/a/b", false},
		{"pure v2", v2, LayoutV2, []string{"/sys/fs/cgroup/a/b"}, "/sys/fs/cgroup/a/b", false},
		{"v1 with nested root", v1, LayoutV1, []string{"/sys/fs/cgroup/cpu,cpuacct/a/b", "/sys/fs/cgroup/memory/a/b"}, "/sys/fs/cgroup/memory/a/b", false},
		{"none", []string{"22 27 0:21 / /proc rw - proc proc rw"}, "", nil, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host, err := FromMounts(parseMounts(t, tt.lines...), ctrls)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("FromMounts = %+v, want error", host)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if host.Layout != tt.layout {
				t.Fatalf("layout = %s, want %s", host.Layout, tt.layout)
			}
			p := Path("/a/b")
			if tt.name == "v1 with nested root" {
				p = "/nested/a/b" // memory is mounted from /nested; cpu from /
				if got := host.Dirs(p); got[1] != "/sys/fs/cgroup/memory/a/b" {
					t.Fatalf("Dirs(%s) = %q", p, got)
				}
				return
			}
			if got := host.Dirs(p); strings.Join(got, " ") != strings.Join(tt.dirs, " ") {
				t.Fatalf("Dirs = %q, want %q", got, tt.dirs)
			}
			if got, err := host.ControllerDir("memory", p); err != nil || got != tt.memoryDir {
				t.Fatalf("ControllerDir(memory) = %q, %v; want %q", got, err, tt.memoryDir)
			}
			if _, err := host.ControllerDir("rdma", p); tt.layout != LayoutV2 && err == nil {
				t.Fatal("ControllerDir(rdma) found a hierarchy that does not carry it")
			}
		})
	}
}

func TestPath(t *testing.T) {
	for _, bad := range []string{"", "rel", "/a/../b", "/a/", "/a//b"} {
		if _, err := ParsePath(bad); err == nil {
			t.Errorf("ParsePath(%q) accepted", bad)
		}
	}
	p, err := ParsePath("/airlock")
	if err != nil {
		t.Fatal(err)
	}
	if c, err := p.Join("sbx_x"); err != nil || c != "/airlock/sbx_x" {
		t.Fatalf("Join = %q, %v", c, err)
	}
	for _, bad := range []string{"", ".", "..", "a/b"} {
		if _, err := p.Join(bad); err == nil {
			t.Errorf("Join(%q) accepted", bad)
		}
	}
}

func TestParsers(t *testing.T) {
	if v, err := ParseLimit("max\n"); err != nil || v != Unlimited {
		t.Fatalf("ParseLimit(max) = %d, %v", v, err)
	}
	if v, err := ParseLimit("4096\n"); err != nil || v != 4096 {
		t.Fatalf("ParseLimit(4096) = %d, %v", v, err)
	}
	if _, err := ParseLimit("lots"); err == nil {
		t.Fatal("ParseLimit(lots) accepted")
	}
	if q, p, err := ParseCPUMax("200000 100000\n"); err != nil || q != 200000 || p != 100000 {
		t.Fatalf("ParseCPUMax = %d %d %v", q, p, err)
	}
	if q, _, err := ParseCPUMax("max 100000"); err != nil || q != Unlimited {
		t.Fatalf("ParseCPUMax(max) = %d %v", q, err)
	}
	for _, bad := range []string{"", "1", "1 0", "x 1", "1 2 3"} {
		if _, _, err := ParseCPUMax(bad); err == nil {
			t.Errorf("ParseCPUMax(%q) accepted", bad)
		}
	}
	events := "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"
	if v, ok, err := KeyedValue(events, "oom_kill"); err != nil || !ok || v != 3 {
		t.Fatalf("KeyedValue = %d %v %v", v, ok, err)
	}
	if _, ok, _ := KeyedValue(events, "oom"); ok {
		t.Fatal("KeyedValue matched a prefix")
	}
	if _, _, err := KeyedValue("oom_kill x", "oom_kill"); err == nil {
		t.Fatal("KeyedValue accepted a bad value")
	}
}

// TestRealCgroup creates a cgroup in every hierarchy of this host, puts a
// process into it, sets limits, and checks the readers, Kill and Remove.
func TestRealCgroup(t *testing.T) {
	airtest.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	host, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("layout %s, %d hierarchies", host.Layout, len(host.Hierarchies))
	p := Path(fmt.Sprintf("/airlock-cgroups-test-%d", os.Getpid()))
	child, _ := p.Join("child")
	for _, d := range host.Dirs(child) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = host.Kill(ctx, p); _ = host.Remove(ctx, p) })
	if ok, err := host.Exists(p); err != nil || !ok {
		t.Fatalf("Exists = %v, %v", ok, err)
	}
	write := func(controller, file, value string) {
		t.Helper()
		dir, err := host.ControllerDir(controller, p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0); err != nil {
			t.Fatalf("write %s: %v", file, err)
		}
	}
	if host.isV1("memory") {
		write("memory", "memory.limit_in_bytes", "67108864")
		write("cpu", "cpu.cfs_period_us", "100000")
		write("cpu", "cpu.cfs_quota_us", "50000")
	} else {
		write("memory", "memory.max", "67108864")
		write("cpu", "cpu.max", "50000 100000")
	}
	write("pids", "pids.max", "10")
	lim, err := host.Limits(p)
	if err != nil {
		t.Fatal(err)
	}
	if lim != (Limits{MemoryBytes: 64 << 20, PidsMax: 10, CPUQuotaMicros: 50000, CPUPeriodMicros: 100000}) {
		t.Fatalf("Limits = %+v", lim)
	}
	if n, err := host.OOMKills(p); err != nil || n != 0 {
		t.Fatalf("OOMKills = %d, %v", n, err)
	}

	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for _, d := range host.Dirs(child) {
		if strings.Contains(d, "/cpuset/") {
			continue // would need cpuset.cpus and cpuset.mems first
		}
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
			t.Fatalf("join %s: %v", d, err)
		}
	}
	if n, err := host.PidsCurrent(p); err != nil || n != 1 {
		t.Fatalf("PidsCurrent = %d, %v", n, err)
	}
	if procs, err := host.Procs(p); err != nil || len(procs) != 1 || procs[0] != cmd.Process.Pid {
		t.Fatalf("Procs = %v, %v", procs, err)
	}
	if err := host.Remove(ctx, p); err == nil {
		t.Fatal("Remove succeeded with a process inside")
	}
	if err := host.Kill(ctx, p); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("sleep survived Kill")
	}
	if err := host.Remove(ctx, p); err != nil {
		t.Fatal(err)
	}
	if ok, err := host.Exists(p); err != nil || ok {
		t.Fatalf("Exists after Remove = %v, %v", ok, err)
	}
	if err := host.Remove(ctx, p); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
}

func TestRemoveRefusesRoot(t *testing.T) {
	if err := (Host{}).Remove(context.Background(), "/"); err == nil {
		t.Fatal("Remove(/) accepted")
	}
}

func FuzzParseLimit(f *testing.F) {
	f.Add("max")
	f.Add("123\n")
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseLimit(s)
		if err == nil && v < 0 && v != Unlimited && !strings.Contains(s, "-") {
			t.Fatalf("ParseLimit(%q) = %d", s, v)
		}
	})
}

func FuzzParseCPUMax(f *testing.F) {
	f.Add("max 100000")
	f.Add("5 7")
	f.Fuzz(func(t *testing.T, s string) {
		_, p, err := ParseCPUMax(s)
		if err == nil && p <= 0 {
			t.Fatalf("ParseCPUMax(%q) period %d", s, p)
		}
	})
}

func FuzzKeyedValue(f *testing.F) {
	f.Add("oom_kill 3\n", "oom_kill")
	f.Fuzz(func(t *testing.T, data, key string) {
		_, _, _ = KeyedValue(data, key)
	})
}

func FuzzParsePath(f *testing.F) {
	f.Add("/airlock/sbx")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePath(s)
		if err == nil && (!strings.HasPrefix(string(p), "/") || strings.Contains(string(p), "/../")) {
			t.Fatalf("ParsePath accepted %q", s)
		}
	})
}
