// Package airtest holds test helpers shared by Airlock's packages: building
// the guest agent, making a small busybox root filesystem, and skipping with
// a clear message when the host lacks a capability. Only tests import it.
package airtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/filelock"
	"github.com/airlockdev/airlock/internal/procfs"
)

// ModuleRoot returns the directory that holds Airlock's go.mod.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		t.Fatalf("not inside the Airlock module")
	}
	return filepath.Dir(gomod)
}

var builds struct {
	mu    sync.Mutex
	paths map[string]string
}

// RaceServersEnv, when set, makes BuildBinary build ./cmd/airlock (the
// server the integration tests start) with the race detector, so the
// servers under test carry it: scripts/test.sh --race-servers.
const RaceServersEnv = "AIRLOCK_TEST_RACE_SERVERS"

// BuildBinary builds the main package at pkg (relative to the module root,
// e.g. "./cmd/airlock-agent") as a static binary, once per test process, and
// returns its path.
func BuildBinary(t testing.TB, pkg string) string {
	t.Helper()
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if p, ok := builds.paths[pkg]; ok {
		return p
	}
	root := ModuleRoot(t)
	dir, err := buildDir()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if pkg == "./cmd/airlock" && os.Getenv(RaceServersEnv) != "" {
		// The server under test with the race detector (cgo, so not static:
		// it runs on the host, never inside a sandbox as the agent does).
		cmd = exec.Command("go", "build", "-race", "-o", out, pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, stderr.String())
	}
	if builds.paths == nil {
		builds.paths = map[string]string{}
	}
	builds.paths[pkg] = out
	return out
}

// buildDir returns a new directory for this test process's binaries,
// named after the process (pid and start time) under os.TempDir()/airtest-bin,
// after removing those of test processes that are gone: a test process
// builds once and cannot know when its last test ends, so the next one
// cleans up after it.
func buildDir() (string, error) {
	parent := filepath.Join(os.TempDir(), "airtest-bin")
	// Searchable by everyone: a runc or crun sandbox's root, an
	// unprivileged host user, must reach a binary bind-mounted from here.
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", err
	}
	if err := os.Chmod(parent, 0o755); err != nil {
		return "", err
	}
	entries, err := os.ReadDir(parent)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if !processLives(e.Name()) {
			_ = os.RemoveAll(filepath.Join(parent, e.Name()))
		}
	}
	self, ok := procfs.ReadStat(os.Getpid())
	if !ok {
		return "", fmt.Errorf("read /proc/%d/stat", os.Getpid())
	}
	dir, err := os.MkdirTemp(parent, fmt.Sprintf("%d-%d-", os.Getpid(), self.StartTime))
	if err != nil {
		return "", err
	}
	return dir, os.Chmod(dir, 0o755)
}

// processLives reports whether the test process a build directory is named
// after ("PID-STARTTIME-…") still runs; names of another form are kept.
func processLives(name string) bool {
	f := strings.SplitN(name, "-", 3)
	if len(f) != 3 {
		return true
	}
	pid, err1 := strconv.Atoi(f[0])
	start, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return true
	}
	st, ok := procfs.ReadStat(pid)
	return ok && st.Alive() && st.StartTime == start
}

// BuildAgent returns the path of a freshly built static airlock-agent.
func BuildAgent(t testing.TB) string {
	t.Helper()
	return BuildBinary(t, "./cmd/airlock-agent")
}

// RequireRoot skips the test unless it runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (namespaces, mounts, cgroups): run the suite as root as CI does")
	}
}

// SkipShort skips t under -short, the fast tier (scripts/test.sh --fast):
// for tests that need what is slow to start or is not there on a fresh
// checkout (a real OCI runtime, a VM, PostgreSQL, the S3 gateway, a
// browser, npm) or take seconds. The full tier runs them. what says what
// the test needs.
func SkipShort(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short (the fast tier): needs %s; the full tier runs it", what)
	}
}

// heavyBinary reports whether a test that needs the program name belongs
// to the full tier only: real runtimes, VMs, Debian bootstraps, browsers,
// Node.js and PostgreSQL.
func heavyBinary(name string) bool {
	switch name {
	case "runc", "crun", "runsc", "qemu-system-x86_64", "qemu-img", "qemu-io", "mmdebstrap", "chromium", "node", "npm", "initdb", "postgres", "pg_ctl":
		return true
	}
	return false
}

// RequireBinary skips the test unless name is in PATH and returns its path.
// Under -short it skips tests that need a real runtime, VM, Debian
// bootstrap, browser, Node.js or PostgreSQL (see SkipShort).
func RequireBinary(t testing.TB, name string) string {
	t.Helper()
	if heavyBinary(name) {
		SkipShort(t, name)
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("needs %s in PATH (install it as .ci/run does)", name)
	}
	return p
}

// BusyboxPath returns the path of a statically linked busybox, skipping the
// test if there is none (Debian package busybox-static).
func BusyboxPath(t testing.TB) string {
	t.Helper()
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p
		}
	}
	t.Skip("needs a static busybox (Debian package busybox-static)")
	return ""
}

// BusyboxRootfs builds a minimal root filesystem in a new temporary directory:
// busybox with its applet links in /bin, and the usual empty mount points.
// It is removed when the test ends.
func BusyboxRootfs(t testing.TB) string {
	t.Helper()
	bb := BusyboxPath(t)
	root := t.TempDir()
	for _, d := range []string{"bin", "dev", "proc", "sys", "tmp", "etc", "root", "run"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bb, "--list").Output()
	if err != nil {
		t.Fatalf("busybox --list: %v", err)
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" {
			continue
		}
		if err := os.Symlink("busybox", filepath.Join(root, "bin", applet)); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
		"etc/group":  "root:x:0:\nnogroup:x:65534:\n",
		"etc/hosts":  "127.0.0.1 localhost\n::1 localhost\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestCache returns the directory that keeps the tests' expensive inputs
// between runs (tool builds, the guest kernel, recipe builds, npm
// installs, each keyed by its version inside): $AIRLOCK_TEST_CACHE when
// set (scripts/test.sh --fresh points it at an empty directory), else
// /var/cache/airlock-test for root (where scripts/install-deps.sh builds
// into), else the user's cache directory.
func TestCache() (string, error) {
	if d := os.Getenv("AIRLOCK_TEST_CACHE"); d != "" {
		return d, nil
	}
	if os.Geteuid() == 0 {
		return "/var/cache/airlock-test", nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no test cache directory: %w", err)
	}
	return filepath.Join(d, "airlock-test"), nil
}

// LockShared takes an exclusive lock on path (a cache directory that test
// processes share, e.g. a template store in TestCache), waiting while
// another process holds it, and returns its release: a test that checks
// the state of what it shares (no staging leftovers) must not see another
// process's work in progress.
func LockShared(t testing.TB, path string) (unlock func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	f, err := filelock.Lock(ctx, path+".lock")
	if err != nil {
		t.Fatalf("lock %s: %v", path, err)
	}
	return func() { f.Close() }
}
