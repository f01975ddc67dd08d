package oci

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/rootfs"
	"github.com/airlockdev/airlock/internal/runtime"
)

// TestAgentFSSharedAcrossRestart creates a sandbox, then "restarts the
// server" (a second Runtime on the same directories), which must reuse the
// shared agent filesystem's mount rather than stack a new one; a new agent
// version adds a file beside the first; every sandbox's agent, the one
// created before the restart included, still answers. ReleaseAgentFS
// refuses while sandboxes exist and unmounts once they are gone.
func TestAgentFSSharedAcrossRestart(t *testing.T) {
	airtest.RequireRoot(t)
	agent := airtest.BuildAgent(t)
	template := airtest.BusyboxRootfs(t)
	// A second agent version: the same program with a byte appended.
	data, err := os.ReadFile(agent)
	if err != nil {
		t.Fatal(err)
	}
	agent2 := filepath.Join(t.TempDir(), "airlock-agent")
	if err := os.WriteFile(agent2, append(data, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, flavor := range allFlavors {
		t.Run(string(flavor), func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t, flavor)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			dir := filepath.Join(cfg.StateRoot, agentFSName)
			r1, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var ids []model.SandboxID
			t.Cleanup(func() {
				for _, id := range ids {
					if err := r1.Delete(context.Background(), id); err != nil {
						t.Errorf("Delete %s: %v", id, err)
					}
				}
				if err := r1.ReleaseAgentFS(context.Background()); err != nil {
					t.Errorf("ReleaseAgentFS: %v", err)
				}
				if at, err := rootfs.MountsAt(dir); err != nil || len(at) > 0 {
					t.Errorf("the shared agent filesystem is still mounted: %+v (%v)", at, err)
				}
				if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s still there (%v)", dir, err)
				}
			})
			start := func(r *Runtime, agentBinary string) model.SandboxID {
				t.Helper()
				spec := runtime.Spec{ID: model.NewSandboxID(), RootFS: runtime.RootFS{Lower: template}, AgentBinary: agentBinary,
					Resources: runtime.Resources{CPUs: 1, MemoryBytes: 256 << 20, PidsLimit: 64}}
				ids = append(ids, spec.ID)
				if err := r.Create(ctx, spec); err != nil {
					t.Fatal(err)
				}
				if err := r.Start(ctx, spec.ID); err != nil {
					t.Fatal(err)
				}
				return spec.ID
			}
			oneMount := func() int {
				t.Helper()
				at, err := rootfs.MountsAt(dir)
				if err != nil || len(at) != 1 || at[0].FSType != "tmpfs" || at[0].Source != agentFSSource {
					t.Fatalf("mounts at %s = %+v, %v; want one tmpfs", dir, at, err)
				}
				return at[0].ID
			}
			files := func() []string {
				t.Helper()
				entries, err := os.ReadDir(dir)
				if err != nil {
					t.Fatal(err)
				}
				var names []string
				for _, e := range entries {
					fi, err := e.Info()
					if err != nil {
						t.Fatal(err)
					}
					st := fi.Sys().(*syscall.Stat_t)
					if fi.Mode() != 0o555 || st.Uid != 0 || st.Gid != 0 {
						t.Errorf("%s: mode %v, owner %d:%d; want 0555, host root's", e.Name(), fi.Mode(), st.Uid, st.Gid)
					}
					names = append(names, e.Name())
				}
				return names
			}

			before := start(r1, agent)
			mountID := oneMount()
			if got := files(); len(got) != 1 {
				t.Fatalf("agent files = %q, want one", got)
			}
			if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o600); !errors.Is(err, syscall.EROFS) {
				t.Errorf("writing into the shared agent filesystem: %v, want EROFS", err)
			}

			r2, err := New(cfg) // the restarted server
			if err != nil {
				t.Fatal(err)
			}
			after := start(r2, agent)
			if id := oneMount(); id != mountID {
				t.Errorf("the restarted runtime mounted a new agent filesystem (mount %d, was %d)", id, mountID)
			}
			if got := files(); len(got) != 1 {
				t.Fatalf("agent files after the restart = %q, want the same one", got)
			}
			newer := start(r2, agent2)
			oneMount()
			if got := files(); len(got) != 2 {
				t.Fatalf("agent files after a new version = %q, want two", got)
			}
			if err := r2.ReleaseAgentFS(ctx); err == nil {
				t.Error("ReleaseAgentFS succeeded while the runtime has sandboxes")
			}
			oneMount()

			for _, id := range []model.SandboxID{before, after, newer} {
				c := agentclient.New(func(ctx context.Context) (net.Conn, error) { return r2.DialAgent(ctx, id) }, testLogger(t))
				res, err := c.Run(ctx, agentproto.StartRequest{ID: model.NewProcessID().String(), Args: []string{"echo", "alive"}})
				c.Close()
				if err != nil || string(res.Stdout) != "alive\n" {
					t.Errorf("sandbox %s: echo = %+v, %v", id, res, err)
				}
			}
		})
	}
}
