package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/procfs"
	"github.com/airlockdev/airlock/internal/retry"
	"github.com/airlockdev/airlock/internal/rootfs"
	"github.com/airlockdev/airlock/internal/runtime"
)

// Create prepares the sandbox's root filesystem and bundle and creates the
// container without starting it. An existing created or running sandbox is
// left alone; a leftover of a create that crashed half-way (state directory,
// mount or cgroup without a live container) is removed first. A state
// directory holding a snapshot (suspend.go) is never a leftover: only a
// Create with spec.Restore makes the sandbox from it (createRestored).
func (r *Runtime) Create(ctx context.Context, spec runtime.Spec) error {
	if _, err := model.ParseSandboxID(spec.ID.String()); err != nil {
		return fmt.Errorf("create: %w", err)
	}
	unlock := r.lock(spec.ID)
	started := false
	defer func() {
		unlock()
		if started {
			// After the lock is given up (which drops the entry), as in
			// Start: the Start that follows needs no exec of the runtime.
			r.rememberStarted(spec.ID)
		}
	}()

	dirs := r.dirs(spec.ID)
	st, err := r.state(ctx, spec.ID)
	switch {
	case err == nil && !dirExists(dirs.agentRunDir()) && !hasSnapshot(dirs):
		// A container whose state directory is gone cannot be reached:
		// a broken leftover, replaced below.
		r.log.Warn("replacing a container that has lost its state directory", "sandbox", spec.ID, "phase", st.Phase)
	case err == nil && (st.Phase == runtime.PhaseCreated || st.Phase == runtime.PhaseRunning):
		// (A restore that stopped after making the container: its
		// snapshot goes with ForgetSnapshot once the sandbox answers.)
		return nil
	case err == nil && st.Phase == runtime.PhaseStopped && spec.Restore != nil && hasSnapshot(dirs):
		// A restore that failed after making the container (the
		// restored sandbox died): restore again, below. (A paused one
		// is alive: never replaced by its older snapshot.)
		r.log.Warn("replacing the container of a failed restore", "sandbox", spec.ID, "phase", st.Phase)
	case err == nil:
		return fmt.Errorf("create %s: sandbox already exists in phase %s", spec.ID, st.Phase)
	case !errors.Is(err, runtime.ErrNotFound):
		return fmt.Errorf("create %s: %w", spec.ID, err)
	}
	if spec.Restore != nil && spec.From != nil {
		return fmt.Errorf("create %s: a sandbox is restored from its own snapshot or made from another's, not both", spec.ID)
	}
	if spec.Restore != nil {
		return r.createRestored(ctx, spec, dirs)
	}
	if spec.From != nil {
		if hasSnapshot(dirs) {
			return fmt.Errorf("create %s: the sandbox is suspended (its state directory holds a snapshot)", spec.ID)
		}
		if started, err = r.createFrom(ctx, spec, dirs); err != nil {
			return fmt.Errorf("create %s from a snapshot: %w", spec.ID, err)
		}
		return nil
	}
	if hasSnapshot(dirs) {
		// Its filesystem is the suspended sandbox: never a leftover.
		return fmt.Errorf("create %s: the sandbox is suspended (its state directory holds a snapshot): wake it with a Create that restores the snapshot, or delete it", spec.ID)
	}
	if pristine, err := r.pristine(spec.ID); err != nil {
		return fmt.Errorf("create %s: %w", spec.ID, err)
	} else if !pristine {
		if err := r.removeLeftovers(ctx, spec.ID); err != nil {
			return fmt.Errorf("create %s: clean up a previous attempt: %w", spec.ID, err)
		}
	}
	if started, err = r.create(ctx, spec, dirs); err != nil {
		if cerr := r.removeLeftovers(context.WithoutCancel(ctx), spec.ID); cerr != nil {
			r.log.Error("clean up after failed create", "sandbox", spec.ID, "err", cerr)
		}
		return fmt.Errorf("create %s: %w", spec.ID, err)
	}
	return nil
}

// createRestored is Create with spec.Restore, under the sandbox's lock,
// with no live container: it frees whatever an earlier attempt left
// running, restores the snapshot and then consumes it. A failure frees
// what the attempt made and keeps the snapshot.
func (r *Runtime) createRestored(ctx context.Context, spec runtime.Spec, dirs sandboxDirs) error {
	if _, err := r.checkRestore(spec, dirs); err != nil {
		return fmt.Errorf("create %s: %w", spec.ID, err)
	}
	if err := r.releaseRunning(ctx, spec.ID); err != nil {
		return fmt.Errorf("create %s: clean up a previous attempt: %w", spec.ID, err)
	}
	if err := r.restore(ctx, spec, dirs); err != nil {
		if cerr := r.releaseRunning(context.WithoutCancel(ctx), spec.ID); cerr != nil {
			r.log.Error("clean up after failed restore", "sandbox", spec.ID, "err", cerr)
		}
		return fmt.Errorf("create %s: restore: %w", spec.ID, err)
	}
	// The snapshot stays until the woken sandbox answers (ForgetSnapshot):
	// if its start or its agent fails, the wake can be tried again.
	return nil
}

// create prepares the sandbox and creates its container; with spec.Start,
// where nothing must happen between the container's creation and its start
// (runsOnce), it starts it too, in one exec of the runtime, and reports
// that it did.
func (r *Runtime) create(ctx context.Context, spec runtime.Spec, dirs sandboxDirs) (started bool, err error) {
	if err := r.prepare(ctx, spec, dirs); err != nil {
		return false, err
	}
	if spec.Start && r.runsOnce(spec) {
		if err := r.delegateBeforeRun(spec.ID, dirs, spec.Resources.PidsLimit); err != nil {
			return false, err
		}
		if err := r.runDetached(ctx, dirs.agentLog, netnsOf(spec), "run", "--detach", "--bundle", dirs.bundle, "--pid-file", dirs.pidFile, spec.ID.String()); err != nil {
			return false, err
		}
		return true, nil
	}
	if err := r.runDetached(ctx, dirs.agentLog, netnsOf(spec), "create", "--bundle", dirs.bundle, "--pid-file", dirs.pidFile, spec.ID.String()); err != nil {
		return false, err
	}
	return false, r.delegateWorkloadCgroup(spec.ID, dirs, spec.Resources.PidsLimit)
}

// runsOnce reports whether the sandbox's container may be created and
// started by one `run --detach`, which saves an exec of the runtime on the
// create path: the host has nothing to do between the two. That holds where
// delegateWorkloadCgroup has no cgroup to prepare (runsc, whose agent makes
// its workload cgroup in gVisor's cgroupfs; no user namespace; no pids
// limit) and where it can prepare it before the container exists
// (delegateBeforeRun: pids on cgroup v1). On cgroup v2 the agent must be
// moved into its leaf cgroup before it starts: create, delegate, start.
func (r *Runtime) runsOnce(spec runtime.Spec) bool {
	return r.ids == nil || spec.Resources.PidsLimit <= 0 || r.cgroups.IsV1("pids")
}

// rememberStarted records a sandbox that Create started (spec.Start) as
// running in the live cache, so that its Start is answered from it.
func (r *Runtime) rememberStarted(id model.SandboxID) {
	if pid, err := readPidFile(r.dirs(id).pidFile); err == nil {
		r.rememberLive(id, pid, runtime.PhaseRunning)
	}
}

// prepare sets up the sandbox's filesystem, writes the bundle and mounts
// the root filesystem.
func (r *Runtime) prepare(ctx context.Context, spec runtime.Spec, dirs sandboxDirs) error {
	lower := spec.RootFS.Lower
	if !filepath.IsAbs(lower) {
		return fmt.Errorf("template dir %q must be absolute", lower)
	}
	if fi, err := os.Stat(lower); err != nil || !fi.IsDir() {
		return fmt.Errorf("template dir %q: not a directory (%v)", lower, err)
	}
	for _, d := range []string{dirs.state, dirs.bundle, dirs.rootfs} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	// After the state directory exists: ReleaseAgentFS sees the sandbox.
	agent, err := r.agent.install(spec.AgentBinary)
	if err != nil {
		return err
	}
	ids, err := r.idRange(spec.ID.String(), dirs)
	if err != nil {
		return err
	}
	if err := r.prepareStorage(ctx, spec.Resources.DiskBytes, spec.Restore != nil || spec.From != nil, dirs, ids); err != nil {
		return err
	}
	if spec.From != nil {
		if err := adoptForkedFS(spec, dirs, ids); err != nil {
			return fmt.Errorf("adopt the snapshot's filesystem: %w", err)
		}
	}
	oci, err := r.bundleSpec(spec, dirs, ids, agent)
	if err != nil {
		return err
	}
	volumes, err := r.mountVolumes(ctx, spec, dirs, ids, agent)
	if err != nil {
		return err
	}
	oci.Mounts = append(oci.Mounts, volumes...)
	data, err := json.MarshalIndent(oci, "", "\t")
	if err != nil {
		return fmt.Errorf("encode config.json: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(dirs.bundle, "config.json"), data); err != nil {
		return err
	}
	if err := r.mountRootfs(ctx, lower, dirs, ids, agent); err != nil {
		return err
	}
	return ensureTmp(dirs.rootfs, ids)
}

// mountRootfs mounts the overlay of the sandbox's root filesystem: over
// the template itself, or, with a user namespace, over an idmapped view of
// it in which the template's owners are shifted into the sandbox's range
// by the sandbox's own user namespace (sandboxUserns: made here if need
// be, with the agent's binary agent).
func (r *Runtime) mountRootfs(ctx context.Context, template string, dirs sandboxDirs, ids *rootfs.IDRange, agent string) error {
	if ids == nil {
		return rootfs.MountOverlay(template, dirs.upper, dirs.work, dirs.rootfs)
	}
	userns, err := r.sandboxUserns(ctx, dirs, *ids, agent)
	if err != nil {
		return err
	}
	defer userns.Close()
	return rootfs.MountOverlayIDMapped(ctx, r.log, template, dirs.lower, dirs.upper, dirs.work, dirs.rootfs, userns)
}

// ensureTmp gives a root filesystem without /tmp one (mode 1777, owned by
// the sandbox's root), so it can be mounted over (see runscTmpMount).
func ensureTmp(root string, ids *rootfs.IDRange) error {
	tmp := filepath.Join(root, "tmp")
	if _, err := os.Lstat(tmp); err == nil || !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.Mkdir(tmp, 0o777); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o777|os.ModeSticky); err != nil { // after the umask
		return err
	}
	return giveToRoot(ids, tmp)
}

func dirExists(dir string) bool {
	fi, err := os.Stat(dir)
	return err == nil && fi.IsDir()
}

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Start starts the guest agent. Starting a running sandbox is a no-op.
func (r *Runtime) Start(ctx context.Context, id model.SandboxID) error {
	if err := r.start(ctx, id); err != nil {
		return err
	}
	// After the lock is given up (which drops the entry): the next State,
	// Pause or Suspend needs no exec of the runtime.
	if pid, err := readPidFile(r.dirs(id).pidFile); err == nil {
		r.rememberLive(id, pid, runtime.PhaseRunning)
	}
	return nil
}

func (r *Runtime) start(ctx context.Context, id model.SandboxID) error {
	unlock := r.lock(id)
	defer unlock()
	if r.flavor == FlavorRunsc && r.startedByRestore(id) {
		return nil
	}
	if phase, _, ok := r.cachedPhase(id); ok && phase == runtime.PhaseRunning {
		return nil // started by its Create (spec.Start), or started before
	}
	if err := r.ensureWorkloadCgroup(ctx, id); err != nil {
		return fmt.Errorf("start %s: %w", id, err)
	}
	// Optimistic: starting a created container is the common case, and
	// asking for its state first would cost another exec of the runtime.
	_, startErr := r.runNet(ctx, r.joinsNetns(id), "start", id.String())
	if startErr == nil {
		return nil
	}
	st, err := r.state(ctx, id)
	if err != nil {
		return fmt.Errorf("start %s: %w (start: %v)", id, err, startErr)
	}
	switch st.Phase {
	case runtime.PhaseRunning:
		return nil
	case runtime.PhasePaused:
		return fmt.Errorf("start %s: sandbox is paused (resume it)", id)
	case runtime.PhaseStopped:
		return fmt.Errorf("start %s: sandbox is stopped (agent log: %s)", id, errorTail(r.dirs(id).agentLog))
	}
	return fmt.Errorf("start %s: %w (agent log: %s)", id, startErr, errorTail(r.dirs(id).agentLog))
}

// pristine reports whether nothing of the sandbox exists on the host: no
// runtime state, no state directory, no cgroup. Then a create needs no
// clean-up (which costs several execs of the runtime).
func (r *Runtime) pristine(id model.SandboxID) (bool, error) {
	files, err := r.runtimeFiles(id)
	if err != nil || len(files) > 0 {
		return false, err
	}
	if _, err := os.Lstat(r.dirs(id).state); !errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	cg, err := r.cgroupPath(id)
	if err != nil {
		return false, err
	}
	exists, err := r.cgroups.Exists(cg)
	return !exists, err
}

// State reports the sandbox's phase. A container whose process is gone is
// stopped even if the runtime still calls it running (runsc does when the
// host OOM-killed its sentry).
func (r *Runtime) State(ctx context.Context, id model.SandboxID) (runtime.Status, error) {
	if phase, pid, ok := r.cachedPhase(id); ok {
		return runtime.Status{ID: id, Phase: phase, Pid: pid}, nil
	}
	st, err := r.state(ctx, id)
	if err != nil {
		return runtime.Status{}, fmt.Errorf("state %s: %w", id, err)
	}
	if st.Phase.Alive() && st.Pid > 0 {
		r.rememberLive(id, st.Pid, st.Phase)
	}
	return st, nil
}

// PhaseOf maps the status an OCI runtime reports (runc, crun and runsc
// alike) to a phase.
func PhaseOf(status string) (runtime.Phase, error) {
	switch status {
	case "creating", "created":
		return runtime.PhaseCreated, nil
	case "running":
		return runtime.PhaseRunning, nil
	case "paused":
		return runtime.PhasePaused, nil
	case "stopped":
		return runtime.PhaseStopped, nil
	}
	return "", fmt.Errorf("runtime reports unknown status %q", status)
}

func (r *Runtime) state(ctx context.Context, id model.SandboxID) (runtime.Status, error) {
	// The runtime knows a container only through its state files under
	// RootDir; without any, it has none (and asking would cost an exec).
	if files, err := r.runtimeFiles(id); err != nil {
		return runtime.Status{}, err
	} else if len(files) == 0 {
		return runtime.Status{}, runtime.ErrNotFound
	}
	out, err := r.run(ctx, "state", id.String())
	if err != nil {
		known, lerr := r.known(ctx, id)
		if lerr != nil {
			return runtime.Status{}, errors.Join(err, lerr)
		}
		if !known {
			return runtime.Status{}, runtime.ErrNotFound
		}
		return runtime.Status{}, err
	}
	cs, err := ParseState(out)
	if err != nil {
		return runtime.Status{}, err
	}
	phase, err := PhaseOf(cs.Status)
	if err != nil {
		return runtime.Status{}, err
	}
	st := runtime.Status{ID: id, Pid: cs.Pid, Phase: phase}
	live := cs.Pid > 0 && procfs.Alive(cs.Pid)
	if !live {
		st.Phase = runtime.PhaseStopped
		st.Pid = 0
	}
	if st.Phase == runtime.PhaseStopped {
		st.OOMKilled = r.oomKilled(id)
	}
	return st, nil
}

// oomKilled reports whether the kernel OOM-killed something in the stopped
// sandbox's cgroup and the stop was not requested by Stop.
func (r *Runtime) oomKilled(id model.SandboxID) bool {
	if _, err := os.Stat(r.dirs(id).stopMarker); err == nil {
		return false
	}
	cg, err := r.cgroupPath(id)
	if err != nil {
		return false
	}
	n, err := r.cgroups.OOMKills(cg)
	if err != nil {
		r.log.Debug("read OOM kill count", "sandbox", id, "err", err)
		return false
	}
	return n > 0
}

// Stop kills every process of the sandbox and waits until they are gone.
func (r *Runtime) Stop(ctx context.Context, id model.SandboxID) error {
	unlock := r.lock(id)
	defer unlock()
	st, err := r.state(ctx, id)
	if err != nil {
		return fmt.Errorf("stop %s: %w", id, err)
	}
	if st.Phase == runtime.PhaseStopped {
		return nil
	}
	if err := os.WriteFile(r.dirs(id).stopMarker, nil, 0o600); err != nil {
		return fmt.Errorf("stop %s: %w", id, err)
	}
	if st.Phase == runtime.PhasePaused {
		// Frozen tasks do not die of SIGKILL under the v1 freezer, and
		// runsc's paused sentry would not deliver it.
		if err := r.resume(ctx, id); err != nil {
			return fmt.Errorf("stop %s: %w", id, err)
		}
	}
	if _, err := r.run(ctx, "kill", "--all", id.String(), "KILL"); err != nil {
		// It may have stopped on its own meanwhile.
		if st2, serr := r.state(ctx, id); serr == nil && st2.Phase == runtime.PhaseStopped {
			return nil
		}
		return fmt.Errorf("stop %s: %w", id, err)
	}
	if err := waitExit(ctx, st.Pid); err != nil {
		return fmt.Errorf("stop %s: %w", id, err)
	}
	return nil
}

// waitExit polls until pid is gone or a zombie whose other threads have
// exited too: a thread group's leader turns zombie while its other threads
// may still be exiting, and they hold its descriptors (the agent's
// listening socket, which would still accept a connection).
func waitExit(ctx context.Context, pid int) error {
	wait := retry.Policy{Initial: time.Millisecond, Max: 50 * time.Millisecond, Jitter: 0.2}.Start(nil)
	for procfs.Alive(pid) || threadsLeft(pid) {
		if err := wait.Wait(ctx); err != nil {
			return fmt.Errorf("process %d still alive: %w", pid, err)
		}
	}
	return nil
}

// threadsLeft reports whether thread group pid has threads besides its
// (zombie) leader.
func threadsLeft(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	return err == nil && len(tasks) > 1
}
