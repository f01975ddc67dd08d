package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/model"
)

// tempCgroup creates a throwaway child of parent (a cgroup directory), or
// skips if it cannot.
func tempCgroup(t testing.TB, parent string) string {
	t.Helper()
	airtest.RequireRoot(t)
	dir := filepath.Join(parent, fmt.Sprintf("airlock-spawn-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("needs a writable cgroup under %s: %v", parent, err)
	}
	t.Cleanup(func() {
		for i := 0; i < 50; i++ { // exited children leave the cgroup asynchronously
			if err := syscall.Rmdir(dir); err == nil || errors.Is(err, syscall.ENOENT) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Errorf("cgroup %s not removed", dir)
	})
	return dir
}

// runIn starts `cat /proc/self/cgroup` with the spawner's current
// mechanism and returns what it printed.
func runIn(t *testing.T, s *cgroupSpawner) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	attr := &os.ProcAttr{Files: []*os.File{nil, w, w}, Sys: &syscall.SysProcAttr{Setpgid: true}}
	p, err := s.start(s.current(), "/bin/cat", []string{"cat", "/proc/self/cgroup"}, attr)
	w.Close()
	if err != nil {
		t.Fatalf("start with %s: %v", s.current(), err)
	}
	out, _ := io.ReadAll(r)
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// On cgroup v1 a locked thread joins the cgroup for the fork: the child is
// in it, and no thread of this process stays there.
func TestCgroupSpawnerThreadV1(t *testing.T) {
	if fi, err := os.Stat("/sys/fs/cgroup/pids"); err != nil || !fi.IsDir() {
		t.Skip("needs a cgroup v1 pids hierarchy at /sys/fs/cgroup/pids")
	}
	dir := tempCgroup(t, "/sys/fs/cgroup/pids")
	s, err := newCgroupSpawner(dir, false, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	if s.current() != spawnViaThread {
		t.Fatalf("mechanism %q (%s), want %q", s.current(), s.reason, spawnViaThread)
	}
	for i := 0; i < 3; i++ {
		out := runIn(t, s)
		if !strings.Contains(out, ":pids:/"+filepath.Base(dir)+"\n") && !strings.Contains(out, "/"+filepath.Base(dir)+"\n") {
			t.Fatalf("child's cgroups:\n%s\nwant pids in %s", out, dir)
		}
	}
	tasks, err := os.ReadFile(filepath.Join(dir, "tasks"))
	if err != nil {
		t.Fatal(err)
	}
	if len(bytes.TrimSpace(tasks)) != 0 {
		t.Fatalf("threads left in the workload cgroup: %q", tasks)
	}
}

// Under a user namespace the agent may not write its own cgroup's tasks
// (home is nil): one resident thread then lives in the cgroup and forks
// every child there; after close it ends, and no thread of this process
// stays in the cgroup.
func TestCgroupSpawnerThreadV1WithoutReturn(t *testing.T) {
	if fi, err := os.Stat("/sys/fs/cgroup/pids"); err != nil || !fi.IsDir() {
		t.Skip("needs a cgroup v1 pids hierarchy at /sys/fs/cgroup/pids")
	}
	dir := tempCgroup(t, "/sys/fs/cgroup/pids")
	s, err := newCgroupSpawner(dir, false, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close) // again: a no-op after the close below
	s.home.Close()
	s.home = nil
	s.startResident()
	for i := 0; i < 3; i++ {
		out := runIn(t, s)
		if !strings.Contains(out, ":pids:/"+filepath.Base(dir)+"\n") && !strings.Contains(out, "/"+filepath.Base(dir)+"\n") {
			t.Fatalf("child's cgroups:\n%s\nwant pids in %s", out, dir)
		}
	}
	if s.current() != spawnViaThread {
		t.Fatalf("fell back to %q", s.current())
	}
	tasks, err := os.ReadFile(filepath.Join(dir, "tasks"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(string(tasks))); n != 1 {
		t.Fatalf("%d threads in the workload cgroup, want the resident one: %q", n, tasks)
	}
	s.close()
	// The resident thread leaves the cgroup as it ends.
	for i := 0; ; i++ {
		tasks, err := os.ReadFile(filepath.Join(dir, "tasks"))
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(tasks)) == 0 {
			break
		}
		if i == 100 {
			t.Fatalf("threads left in the workload cgroup: %q", tasks)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// On cgroup v2, clone3 with CLONE_INTO_CGROUP places the child. This host
// kind has only a hugetlb-only cgroup2 mount next to v1, which is enough
// to check the placement.
func TestCgroupSpawnerCloneIntoV2(t *testing.T) {
	parent := ""
	for _, p := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		var st syscall.Statfs_t
		if syscall.Statfs(p, &st) == nil && st.Type == 0x63677270 { // CGROUP2_SUPER_MAGIC
			parent = p
			break
		}
	}
	if parent == "" {
		t.Skip("needs a cgroup v2 mount")
	}
	dir := tempCgroup(t, parent)
	s, err := newCgroupSpawner(dir, false, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	if s.current() != spawnViaCloneInto {
		t.Fatalf("mechanism %q (%s), want %q", s.current(), s.reason, spawnViaCloneInto)
	}
	out := runIn(t, s)
	if !strings.Contains(out, "0::/"+filepath.Base(dir)+"\n") {
		t.Fatalf("child's cgroups:\n%s\nwant 0::/%s", out, filepath.Base(dir))
	}
}

// BenchmarkStartTrue starts and waits for `true` through the Server's
// start path: without a cgroup, directly in a cgroup (thread or clone3),
// and through the re-exec helper.
func BenchmarkStartTrue(b *testing.B) {
	if _, err := os.Stat("/sys/fs/cgroup/pids"); err != nil {
		b.Skip("needs a cgroup v1 pids hierarchy")
	}
	for _, mode := range []string{"none", "direct", "direct-no-return", "helper"} {
		b.Run(mode, func(b *testing.B) {
			opts := Options{Env: []string{"PATH=/usr/bin:/bin"}, DrainTimeout: time.Second}
			if mode != "none" {
				opts.CgroupDir = tempCgroup(b, "/sys/fs/cgroup/pids")
				opts.SpawnHelperOnly = mode == "helper"
			}
			srv, err := New(opts)
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			if mode == "direct-no-return" {
				srv.cgroup.home.Close()
				srv.cgroup.home = nil
				srv.cgroup.startResident()
			}
			for b.Loop() {
				c, pio, err := srv.startProcess(startSpec{id: model.NewProcessID(), args: []string{"true"}, cwd: "/"})
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, pio.stdout)
				<-c.exited
				pio.closeAll()
			}
		})
	}
}
