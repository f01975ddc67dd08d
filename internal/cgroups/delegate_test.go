package cgroups

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
)

// TestDelegatePids prepares a workload cgroup in this host's pids
// hierarchy: the child exists with its limit, only its cgroup.procs (and
// tasks on cgroup v1) belong to the delegate, a second call changes
// nothing, and Remove takes the child with the cgroup.
func TestDelegatePids(t *testing.T) {
	airtest.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	host, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	p := Path(fmt.Sprintf("/airlock-delegate-test-%d", os.Getpid()))
	dir, err := host.ControllerDir("pids", p)
	if err != nil {
		t.Skipf("no pids controller: %v", err)
	}
	if !host.isV1("pids") {
		// Pure cgroup v2 (which this test then exercises) needs pids in
		// the root's subtree_control.
		if data, _ := os.ReadFile(filepath.Join(filepath.Dir(dir), "cgroup.subtree_control")); !strings.Contains(string(data), "pids") {
			t.Skip("pids is not enabled in the cgroup v2 root's subtree_control")
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = host.Kill(ctx, p); _ = host.Remove(ctx, p) })
	d := PidsDelegation{Child: "work", Leaf: "agent", Max: 7, UID: 1 << 30, GID: 1<<30 + 1}
	if _, err := host.DelegatePids(p, PidsDelegation{Child: "work", Max: 0}); err == nil {
		t.Fatal("max 0 accepted")
	}
	if _, err := host.DelegatePids(p, PidsDelegation{Child: "../x", Max: 1}); err == nil {
		t.Fatal("bad child name accepted")
	}
	if _, err := host.DelegatePids(Path("/airlock-no-such-cgroup-test"), d); err == nil {
		t.Fatal("a cgroup that does not exist accepted")
	}
	for range 2 {
		child, err := host.DelegatePids(p, d)
		if err != nil {
			t.Fatal(err)
		}
		if child != filepath.Join(dir, "work") {
			t.Fatalf("child %s", child)
		}
		if got, _ := os.ReadFile(filepath.Join(child, "pids.max")); strings.TrimSpace(string(got)) != "7" {
			t.Fatalf("pids.max = %q", got)
		}
		delegated := map[string]bool{filepath.Join(child, "cgroup.procs"): true}
		if host.isV1("pids") {
			delegated[filepath.Join(child, "tasks")] = true
		} else {
			delegated[filepath.Join(dir, "cgroup.procs")] = true
		}
		check := []string{child, filepath.Join(child, "pids.max"), dir, filepath.Join(dir, "pids.max"), filepath.Join(dir, "cgroup.subtree_control")}
		for f := range delegated {
			check = append(check, f)
		}
		for _, f := range check {
			fi, err := os.Stat(f)
			if err != nil {
				if os.IsNotExist(err) && !strings.HasPrefix(f, child) {
					continue // the root-level file of the other version
				}
				t.Fatal(err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			want := [2]uint32{0, 0}
			if delegated[f] {
				want = [2]uint32{uint32(d.UID), uint32(d.GID)}
			}
			if got := [2]uint32{st.Uid, st.Gid}; got != want {
				t.Errorf("%s is owned by %v, want %v", f, got, want)
			}
		}
	}
	// A process in the child, and Remove refuses, then takes it all.
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if err := os.WriteFile(filepath.Join(dir, "work", "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	if n, err := host.PidsCurrent(p); err != nil || n != 1 {
		t.Fatalf("PidsCurrent = %d, %v", n, err)
	}
	if err := host.Kill(ctx, p); err != nil {
		t.Fatal(err)
	}
	<-done
	if err := host.Remove(ctx, p); err != nil {
		t.Fatal(err)
	}
	if ok, err := host.Exists(p); err != nil || ok {
		t.Fatalf("Exists after Remove = %v, %v", ok, err)
	}
}

// TestDelegatePidsV2MovesProcesses runs the cgroup v2 part of DelegatePids
// on this host's cgroup2 hierarchy as if it were the only one: the
// cgroup's processes move into the leaf before pids is enabled for the
// children. On a hybrid host pids is bound to cgroup v1, so the delegation
// then fails there, saying so.
func TestDelegatePidsV2MovesProcesses(t *testing.T) {
	airtest.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	host, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	unified, ok := host.Unified()
	if !ok {
		t.Skip("no cgroup2 hierarchy")
	}
	v2 := Host{Layout: LayoutV2, Hierarchies: []Hierarchy{unified}}
	p := Path(fmt.Sprintf("/airlock-delegate-v2-test-%d", os.Getpid()))
	dir := unified.Dir(p)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v2.Kill(ctx, p); _ = v2.Remove(ctx, p) })
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	pid := strconv.Itoa(cmd.Process.Pid)
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(pid), 0); err != nil {
		t.Fatal(err)
	}
	_, err = v2.DelegatePids(p, PidsDelegation{Child: "work", Leaf: "agent", Max: 7, UID: 1 << 30, GID: 1 << 30})
	pidsInV2 := unified.Has("pids")
	switch {
	case pidsInV2 && err != nil:
		t.Fatal(err)
	case !pidsInV2 && (err == nil || !strings.Contains(err.Error(), "not available")):
		t.Fatalf("DelegatePids without pids in cgroup v2: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs")); strings.TrimSpace(string(got)) != "" {
		t.Errorf("processes left in the cgroup: %q", got)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "agent", "cgroup.procs")); strings.TrimSpace(string(got)) != pid {
		t.Errorf("processes in the leaf: %q, want %s", got, pid)
	}
	if err := v2.Kill(ctx, p); err != nil {
		t.Fatal(err)
	}
	<-done
	if err := v2.Remove(ctx, p); err != nil {
		t.Fatal(err)
	}
}
