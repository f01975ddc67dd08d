package oci

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agent"
	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

func TestWorkloadCgroupNamesAreTheAgents(t *testing.T) {
	if workloadCgroup != agent.DefaultWorkloadCgroup || agentLeafCgroup != agent.AgentCgroup {
		t.Fatalf("oci names %q, %q; the agent's %q, %q", workloadCgroup, agentLeafCgroup, agent.DefaultWorkloadCgroup, agent.AgentCgroup)
	}
}

// TestWorkloadCgroupDelegated checks, on runc and crun, the workload
// cgroup the host prepares between create and start, or before a `run
// --detach` (its limit; only what moves processes in belongs to the
// sandbox's root), and that Start prepares it for a sandbox whose create
// stopped right after the runtime's create, and Create for one that
// stopped after the cgroup was prepared before the container; its
// processes then run in it.
func TestWorkloadCgroupDelegated(t *testing.T) {
	airtest.RequireRoot(t)
	agentBin := airtest.BuildAgent(t)
	template := airtest.BusyboxRootfs(t)
	for _, flavor := range []Flavor{FlavorRunc, FlavorCrun} {
		t.Run(string(flavor), func(t *testing.T) {
			t.Parallel()
			airtest.RequireBinary(t, string(flavor))
			r, err := New(testConfig(t, flavor))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			const limit = 24
			newSpec := func() runtime.Spec {
				spec := runtime.Spec{ID: model.NewSandboxID(), RootFS: runtime.RootFS{Lower: template}, AgentBinary: agentBin,
					Resources: runtime.Resources{CPUs: 1, MemoryBytes: 256 << 20, PidsLimit: limit}}
				t.Cleanup(func() {
					if err := r.Delete(context.Background(), spec.ID); err != nil {
						t.Errorf("Delete: %v", err)
					}
				})
				return spec
			}
			check := func(id model.SandboxID) {
				t.Helper()
				cg, _ := r.cgroupPath(id)
				child, _ := cg.Join(workloadCgroup)
				dir, err := r.cgroups.ControllerDir("pids", child)
				if err != nil {
					t.Fatal(err)
				}
				if got, err := os.ReadFile(filepath.Join(dir, "pids.max")); err != nil || strings.TrimSpace(string(got)) != "24" {
					t.Fatalf("pids.max = %q, %v", got, err)
				}
				ids, err := readIDRange(r.dirs(id).state)
				if err != nil {
					t.Fatal(err)
				}
				for _, f := range []string{"", "pids.max", "cgroup.procs", "tasks"} {
					fi, err := os.Stat(filepath.Join(dir, f))
					if os.IsNotExist(err) && f == "tasks" {
						continue // cgroup v2
					}
					if err != nil {
						t.Fatal(err)
					}
					uid := fi.Sys().(*syscall.Stat_t).Uid
					want := uint32(0)
					if f == "cgroup.procs" || f == "tasks" {
						want = ids.Host
					}
					if uid != want {
						t.Errorf("%s/%s is owned by %d, want %d", dir, f, uid, want)
					}
				}
			}
			inWorkload := func(id model.SandboxID) {
				t.Helper()
				c := agentclient.New(func(ctx context.Context) (net.Conn, error) { return r.DialAgent(ctx, id) }, testLogger(t))
				defer c.Close()
				var res agentclient.RunResult
				var err error
				for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
					if res, err = c.Run(ctx, agentproto.StartRequest{ID: model.NewProcessID().String(), Args: []string{"cat", "/proc/self/cgroup"}}); err == nil {
						break
					}
				}
				if err != nil || !strings.Contains(string(res.Stdout), "/"+workloadCgroup+"\n") {
					t.Fatalf("a process's cgroups: %q, %v; want %s", res.Stdout, err, workloadCgroup)
				}
			}

			spec := newSpec()
			if err := r.Create(ctx, spec); err != nil {
				t.Fatal(err)
			}
			check(spec.ID)
			if err := r.Start(ctx, spec.ID); err != nil {
				t.Fatal(err)
			}
			inWorkload(spec.ID)

			// A create that stopped between the runtime's create and the
			// delegation.
			crashed := newSpec()
			dirs := r.dirs(crashed.ID)
			if err := r.prepare(ctx, crashed, dirs); err != nil {
				t.Fatal(err)
			}
			if err := r.runDetached(ctx, dirs.agentLog, "", "create", "--bundle", dirs.bundle, "--pid-file", dirs.pidFile, crashed.ID.String()); err != nil {
				t.Fatal(err)
			}
			if err := r.Start(ctx, crashed.ID); err != nil {
				t.Fatal(err)
			}
			check(crashed.ID)
			inWorkload(crashed.ID)

			// A create the worker starts at once (spec.Start): one `run
			// --detach` where the cgroup can be prepared before it (v1).
			started := newSpec()
			started.Start = true
			if err := r.Create(ctx, started); err != nil {
				t.Fatal(err)
			}
			check(started.ID)
			if err := r.Start(ctx, started.ID); err != nil {
				t.Fatal(err)
			}
			inWorkload(started.ID)

			// One that stopped after the workload cgroup was prepared
			// before the container: the next Create starts again.
			if r.runsOnce(started) {
				early := newSpec()
				early.Start = true
				dirs := r.dirs(early.ID)
				if err := r.prepare(ctx, early, dirs); err != nil {
					t.Fatal(err)
				}
				if err := r.delegateBeforeRun(early.ID, dirs, limit); err != nil {
					t.Fatal(err)
				}
				if err := r.Create(ctx, early); err != nil {
					t.Fatal(err)
				}
				check(early.ID)
				if err := r.Start(ctx, early.ID); err != nil {
					t.Fatal(err)
				}
				inWorkload(early.ID)
			}
		})
	}
}
