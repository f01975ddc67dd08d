package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlockdev/airlock/internal/cgroups"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

// The cgroups the agent uses below its sandbox's cgroup (internal/agent's
// DefaultWorkloadCgroup and AgentCgroup).
const (
	// workloadCgroup holds every process the agent starts, with pids.max
	// the sandbox's pids limit (--pids-max).
	workloadCgroup = "airlock-workload"
	// agentLeafCgroup holds the agent on cgroup v2, where the sandbox's
	// cgroup, enabling pids for its children, holds no process itself.
	agentLeafCgroup = "airlock-agent"
)

// cgroupReadyName is the file in a sandbox's state directory that says the
// host's part of its workload cgroup is done (runc and crun): Start
// prepares it first where a create stopped before that.
const cgroupReadyName = "cgroup-ready"

// delegateWorkloadCgroup prepares the workload cgroup of a runc or crun
// sandbox after the runtime created the container and before the agent
// starts (the container's first process waits for `start`). The sandbox's
// root is an unprivileged host user there, which may not create cgroups in
// the sandbox's cgroup (owned by host root): the host creates the workload
// cgroup, sets its pids.max and gives the sandbox's root only what it must
// write to move processes into it (cgroups.DelegatePids; on cgroup v2 it
// also moves the agent into its leaf). The agent then finds the cgroup
// ready and only checks its limit; neither it nor the workload can change
// the limit or create a cgroup, before or after the seal. Nothing to do
// for runsc (gVisor's own cgroupfs, where the agent makes the cgroup
// itself) or without a pids limit.
func (r *Runtime) delegateWorkloadCgroup(id model.SandboxID, dirs sandboxDirs, pidsMax int64) error {
	if r.ids == nil {
		return nil
	}
	if pidsMax > 0 {
		ids, err := readIDRange(dirs.state)
		if err != nil {
			return fmt.Errorf("workload cgroup: %w", err)
		}
		cg, err := r.cgroupPath(id)
		if err != nil {
			return err
		}
		dir, err := r.cgroups.DelegatePids(cg, cgroups.PidsDelegation{
			Child: workloadCgroup, Leaf: agentLeafCgroup, Max: pidsMax,
			UID: int(ids.Host), GID: int(ids.Host),
		})
		if err != nil {
			return fmt.Errorf("workload cgroup: %w", err)
		}
		r.log.Debug("workload cgroup delegated", "sandbox", id, "dir", dir, "pids_max", pidsMax)
	}
	if err := os.WriteFile(filepath.Join(dirs.state, cgroupReadyName), nil, 0o600); err != nil {
		return fmt.Errorf("workload cgroup: %w", err)
	}
	return nil
}

// delegateBeforeRun is delegateWorkloadCgroup for a container not created
// yet, which `run --detach` creates and starts at once (runsOnce): on
// cgroup v1 the host makes the sandbox's pids cgroup first and prepares the
// workload cgroup below it; the runtime then joins the sandbox's cgroup as
// it finds it. The agent thus finds the workload cgroup ready as after a
// create. A create that stops after it leaves a cgroup without a container,
// which the next Create removes (pristine, removeLeftovers).
func (r *Runtime) delegateBeforeRun(id model.SandboxID, dirs sandboxDirs, pidsMax int64) error {
	if r.ids != nil && pidsMax > 0 {
		if !r.cgroups.IsV1("pids") {
			return errors.New("workload cgroup: prepared before the container only on cgroup v1")
		}
		cg, err := r.cgroupPath(id)
		if err != nil {
			return err
		}
		dir, err := r.cgroups.ControllerDir("pids", cg)
		if err != nil {
			return fmt.Errorf("workload cgroup: %w", err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("workload cgroup: %w", err)
		}
	}
	return r.delegateWorkloadCgroup(id, dirs, pidsMax)
}

// ensureWorkloadCgroup runs before `start`: a sandbox whose create stopped
// (a crash of the server) after the runtime created the container but
// before delegateWorkloadCgroup gets its workload cgroup now, while its
// agent has not started. It costs one stat when the cgroup is ready.
func (r *Runtime) ensureWorkloadCgroup(ctx context.Context, id model.SandboxID) error {
	if r.ids == nil {
		return nil
	}
	dirs := r.dirs(id)
	if _, err := os.Stat(filepath.Join(dirs.state, cgroupReadyName)); !errors.Is(err, os.ErrNotExist) {
		return nil
	}
	st, err := r.state(ctx, id)
	if err != nil || st.Phase != runtime.PhaseCreated {
		// Nothing to start (Start reports it), or the agent runs already:
		// too late to move it.
		return nil
	}
	pidsMax, err := bundlePidsMax(dirs.bundle)
	if err != nil {
		return fmt.Errorf("workload cgroup: %w", err)
	}
	r.log.Warn("preparing the workload cgroup of a sandbox whose create stopped before it", "sandbox", id)
	return r.delegateWorkloadCgroup(id, dirs, pidsMax)
}

// bundlePidsMax reads the agent's --pids-max from the bundle's config.json
// (0: none).
func bundlePidsMax(bundle string) (int64, error) {
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return 0, err
	}
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		return 0, fmt.Errorf("%s/config.json: %w", bundle, err)
	}
	if s.Process == nil {
		return 0, fmt.Errorf("%s/config.json: no process", bundle)
	}
	args := s.Process.Args
	for i, a := range args {
		if a == "--pids-max" && i+1 < len(args) {
			n, err := strconv.ParseInt(args[i+1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s/config.json: --pids-max %q", bundle, args[i+1])
			}
			return n, nil
		}
	}
	return 0, nil
}
