package server

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/rootfs"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/runtime/oci"
)

func TestResolveSandboxDir(t *testing.T) {
	if got, err := resolveSandboxDir(""); err != nil || got != "" {
		t.Fatalf(`resolveSandboxDir("") = %q, %v; want "" (the default under the data dir)`, got, err)
	}
	base := t.TempDir()
	real := filepath.Join(base, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	got, err := resolveSandboxDir(filepath.Join(link, "sandboxes"))
	if err != nil {
		t.Fatal(err)
	}
	realBase, _ := filepath.EvalSymlinks(real)
	if got != filepath.Join(realBase, "sandboxes") {
		t.Fatalf("resolveSandboxDir = %q, want %q (created, symlinks resolved)", got, filepath.Join(realBase, "sandboxes"))
	}
	if fi, err := os.Stat(got); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("created dir: %v, %v; want a 0700 directory", fi, err)
	}
}

// TestSandboxDirSearchableForUserns: with runc, whose sandboxes' roots are
// unprivileged host users, a --sandbox-dir the server created 0700 is made
// searchable (not readable) by others, so the start-up probe's container
// (made as a sandbox is) reaches its state directory below it.
func TestSandboxDirSearchableForUserns(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runc")
	agent := airtest.BuildAgent(t)
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	dd, err := openDataDir(filepath.Join(base, "data"))
	if err != nil {
		t.Fatal(err)
	}
	defer dd.close()
	sandboxDir, err := resolveSandboxDir(filepath.Join(base, "sandboxes"))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	// A pool of its own, far from the default one of servers on this host.
	ids := runtime.IDPool{Base: oci.DefaultIDBase + 1<<29, Count: 2}
	rt, err := runtimes{ids: ids, dd: dd, sandboxDir: sandboxDir, agentBin: agent, log: log}.open(context.Background(), environment.NameRunc)
	if err != nil {
		t.Fatalf("runc with --sandbox-dir: %v", err)
	}
	// The probe mounted the runtime's shared agent filesystem, which a
	// server leaves mounted for its sandboxes.
	agentFS := filepath.Join(sandboxDir, "runc", ".agentfs")
	t.Cleanup(func() {
		if err := rt.(agentFSReleaser).ReleaseAgentFS(context.Background()); err != nil {
			t.Errorf("ReleaseAgentFS: %v", err)
		}
		if mounted, err := rootfs.IsMounted(agentFS); err != nil || mounted {
			t.Errorf("%s still mounted (%v)", agentFS, err)
		}
	})
	if mounted, err := rootfs.IsMounted(agentFS); err != nil || !mounted {
		t.Errorf("the shared agent filesystem %s is not mounted (%v)", agentFS, err)
	}
	for dir, want := range map[string]os.FileMode{sandboxDir: 0o711, filepath.Join(sandboxDir, "runc"): 0o711} {
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, %v; want mode %v", dir, fi, err, want)
		}
	}
	if entries, err := os.ReadDir(filepath.Join(sandboxDir, "runc")); err != nil || len(entries) != 1 || entries[0].Name() != ".agentfs" {
		t.Errorf("the probe left %d entries in the state root, not just the shared agent filesystem (%v)", len(entries), err)
	}
}
