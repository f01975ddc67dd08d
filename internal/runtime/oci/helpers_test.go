package oci

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	mathrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/cgroups"
	"github.com/airlockdev/airlock/internal/rootfs"
	"github.com/airlockdev/airlock/internal/runtime"
)

var allFlavors = []Flavor{FlavorRunc, FlavorCrun, FlavorRunsc}

// testConfig returns a configuration with its own runtime root, its own
// cgroup parent and a very long state root (beyond the 108-byte limit of
// Unix socket addresses). When the test ends it fails if a cgroup was
// leaked under the parent, and removes what the runtime keeps in its root
// (runsc keeps a null-netns bind mount there) and the shared agent
// filesystem.
// testIDRanges is the size of a test configuration's id pool.
const testIDRanges = 64

func testConfig(t testing.TB, flavor Flavor) Config {
	t.Helper()
	airtest.RequireRoot(t)
	airtest.SkipShort(t, "a real OCI runtime")
	if _, err := exec.LookPath(string(flavor)); err != nil {
		t.Skipf("needs %s in PATH (install it as .ci/run does)", flavor)
	}
	base := t.TempDir()
	// runc and crun sandboxes reach their state directories as an
	// unprivileged host user (see stateRootSearchable).
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	var b [6]byte
	rand.Read(b[:])
	cfg := Config{
		Flavor:       string(flavor),
		RootDir:      filepath.Join(base, "root"),
		StateRoot:    filepath.Join(base, strings.Repeat("a-long-state-root-", 8), "sandboxes"),
		Logger:       testLogger(t),
		CgroupParent: "/airlock-test/" + hex.EncodeToString(b[:]),
		// A pool of its own, at a random place of the default one: tests
		// (and test processes) that run at once never give two sandboxes
		// the same host ids, which would share the kernel's per-user
		// budgets of their namespaces' owner (InotifyBudgetIsPerSandbox).
		IDPool: runtime.IDPool{Base: DefaultIDBase + uint32(mathrand.IntN(DefaultIDRanges-testIDRanges))*IDRangeSize, Count: testIDRanges},
	}
	host, err := cgroups.Detect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		parent := cgroups.Path(cfg.CgroupParent)
		for _, dir := range host.Dirs(parent) {
			if entries, err := os.ReadDir(dir); err == nil {
				for _, e := range entries {
					if e.IsDir() {
						t.Errorf("leaked cgroup %s", filepath.Join(dir, e.Name()))
					}
				}
			}
		}
		ctx := context.Background()
		if err := host.Kill(ctx, parent); err != nil {
			t.Errorf("kill leaked cgroups: %v", err)
		}
		if err := host.Remove(ctx, parent); err != nil {
			t.Errorf("remove cgroup parent: %v", err)
		}
		mounts, err := rootfs.MountsUnder(base)
		if err != nil {
			t.Errorf("mounts under the test dir: %v", err)
		}
		// The shared agent filesystem stays mounted while sandboxes may
		// exist (a server never unmounts it): unmounted here.
		agentFS := filepath.Join(cfg.StateRoot, agentFSName)
		for _, m := range mounts {
			if !strings.HasPrefix(m, cfg.RootDir+"/") && m != agentFS {
				t.Errorf("leaked mount %s", m)
			}
			if err := rootfs.Unmount(ctx, nil, m); err != nil {
				t.Errorf("unmount %s: %v", m, err)
			}
		}
	})
	return cfg
}

func testLogger(t testing.TB) *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("AIRLOCK_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: level}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
