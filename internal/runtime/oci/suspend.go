package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/atomicfile"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/procfs"
	"github.com/airlockdev/airlock/internal/retry"
	"github.com/airlockdev/airlock/internal/rootfs"
	"github.com/airlockdev/airlock/internal/runtime"
)

// Suspend and restore.
//
// A suspended sandbox is its state directory without a container: the
// sandbox's own filesystem (disk.img, or fs/ with upper/ and work/), its id
// range (upper/'s files belong to the range's ids), its network marker, and
// for runsc the checkpoint image in checkpoint/. Everything a running
// sandbox holds besides (processes, the container in the runtime, its
// cgroup, the overlay, the idmapped template, the meta tmpfs, the image's
// loop device) is freed. The files of a suspend:
//
//	suspending     written first: a suspend is under way (or done); Create
//	               without Restore refuses the directory from then on
//	checkpoint/    runsc: the image of `runsc checkpoint`, renamed from
//	               checkpoint.tmp/ once complete
//	snapshot.json  written last, atomically: the suspend is complete
//
// Each step is idempotent, so a Suspend that crashed half-way is finished
// by the next one. Create with Spec.Restore consumes the snapshot (removes
// snapshot.json, checkpoint/ and suspending, in that order) once the
// sandbox exists again; a failed restore leaves it for another attempt.

// Snapshot formats, one per flavor family.
const (
	// FormatUpper is a runc or crun snapshot: the overlay's upper layer
	// (on the sandbox's disk image with a disk limit), processes not kept.
	FormatUpper = "oci-upper/1"
	// FormatRunscCheckpoint is a runsc snapshot: `runsc checkpoint`'s
	// image of the sandbox's memory and kernel state, plus the overlay's
	// upper layer (runsc runs with --overlay2=none, so guest writes land
	// there and the image refers to them).
	FormatRunscCheckpoint = "runsc-checkpoint/1"
	// FormatRunscUpper is a runsc filesystem-only snapshot
	// (SuspendFilesystem): the overlay's upper layer as FormatUpper's, but
	// written by a runsc sandbox (files owned by the ids the sandbox saw,
	// no id range shift), processes not kept.
	FormatRunscUpper = "runsc-upper/1"
)

// Names in a sandbox's state directory.
const (
	snapshotManifestName = "snapshot.json"
	suspendingName       = "suspending"
	checkpointName       = "checkpoint"
	checkpointTmpName    = "checkpoint.tmp"
)

var _ runtime.Suspender = (*Runtime)(nil)

// snapshotManifest is snapshot.json.
type snapshotManifest struct {
	Kind      model.SnapshotKind `json:"kind"`
	Format    string             `json:"format"`
	CreatedAt time.Time          `json:"created_at"`
	SizeBytes int64              `json:"size_bytes"`
	// DiskImage records whether the sandbox had a disk limit (its
	// filesystem is disk.img): a restore must ask for one too.
	DiskImage bool `json:"disk_image"`
}

// snapshotFormat is the format of a snapshot of kind this runtime writes
// and restores ("": its default kind), and whether it writes that kind.
func (r *Runtime) snapshotFormat(kind model.SnapshotKind) (model.SnapshotKind, string, bool) {
	if r.flavor == FlavorRunsc {
		switch kind {
		case "", model.SnapshotMemory:
			return model.SnapshotMemory, FormatRunscCheckpoint, true
		case model.SnapshotFilesystem:
			return model.SnapshotFilesystem, FormatRunscUpper, true
		}
		return kind, "", false
	}
	if kind == "" || kind == model.SnapshotFilesystem {
		return model.SnapshotFilesystem, FormatUpper, true
	}
	return kind, "", false
}

// Suspend snapshots a running, paused or created sandbox and frees what
// it holds while running; see the package's suspend notes above. Suspending
// a suspended sandbox returns its snapshot again.
func (r *Runtime) Suspend(ctx context.Context, id model.SandboxID) (runtime.Snapshot, error) {
	return r.suspendAs(ctx, id, "")
}

var _ runtime.FilesystemSuspender = (*Runtime)(nil)

// SuspendFilesystem implements runtime.FilesystemSuspender: Suspend
// keeping only the filesystem. On runc and crun it is Suspend; on runsc
// the sandbox is stopped without `runsc checkpoint` (its processes and
// memory are not kept) and its upper layer stays, from which a wake
// creates a fresh container (FormatRunscUpper). runsc runs with
// --overlay2=none and its gofer writes regular files through host file
// descriptors, so what the guest wrote is in the host's files when the
// sandbox stops.
func (r *Runtime) SuspendFilesystem(ctx context.Context, id model.SandboxID) (runtime.Snapshot, error) {
	return r.suspendAs(ctx, id, model.SnapshotFilesystem)
}

func (r *Runtime) suspendAs(ctx context.Context, id model.SandboxID, kind model.SnapshotKind) (runtime.Snapshot, error) {
	if _, err := model.ParseSandboxID(id.String()); err != nil {
		return runtime.Snapshot{}, fmt.Errorf("suspend: %w", err)
	}
	unlock := r.lock(id)
	defer unlock()
	snap, err := r.suspend(ctx, id, kind)
	if err != nil {
		return runtime.Snapshot{}, fmt.Errorf("suspend %s: %w", id, err)
	}
	return snap, nil
}

func (r *Runtime) suspend(ctx context.Context, id model.SandboxID, want model.SnapshotKind) (runtime.Snapshot, error) {
	kind, format, ok := r.snapshotFormat(want)
	if !ok {
		return runtime.Snapshot{}, fmt.Errorf("%s cannot write a %s snapshot: %w", r.flavor, want, runtime.ErrNotSupported)
	}
	dirs := r.dirs(id)
	st, err := r.observe(ctx, id)
	alive := err == nil && (st.Phase.Alive() || st.Phase == runtime.PhaseCreated)
	switch {
	case err != nil && !errors.Is(err, runtime.ErrNotFound):
		return runtime.Snapshot{}, err
	case alive:
		// A live container makes any snapshot files stale: left by a
		// restore that crashed before it consumed them.
		if err := r.consumeSnapshot(dirs); err != nil {
			return runtime.Snapshot{}, err
		}
	default:
		// No live container: a complete snapshot, a suspend to finish, or
		// nothing to suspend.
		if m, err := runtime.ReadSnapshotManifest[snapshotManifest](dirs.state, snapshotManifestName); err == nil {
			return m.snapshot(dirs.state), nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return runtime.Snapshot{}, err
		}
		if !fileExists(filepath.Join(dirs.state, suspendingName)) {
			if !dirExists(dirs.state) {
				return runtime.Snapshot{}, runtime.ErrNotFound
			}
			phase := "without a container"
			if err == nil {
				phase = string(st.Phase)
			}
			return runtime.Snapshot{}, fmt.Errorf("sandbox is %s, not running or paused: nothing to snapshot", phase)
		}
		r.log.Info("finishing a suspend that stopped half-way", "sandbox", id)
	}
	// A checkpoint left by a memory suspend that a crash cut short makes
	// it one: finish it as such, whatever this request asked.
	if r.flavor == FlavorRunsc && kind == model.SnapshotFilesystem && dirExists(filepath.Join(dirs.state, checkpointName)) {
		kind, format, _ = r.snapshotFormat(model.SnapshotMemory)
	}
	needCheckpoint := kind == model.SnapshotMemory && r.flavor == FlavorRunsc && !dirExists(filepath.Join(dirs.state, checkpointName))
	if needCheckpoint && (!alive || st.Phase == runtime.PhaseCreated) {
		// The sandbox's memory is gone (or its agent never started): a
		// memory snapshot cannot be made.
		return runtime.Snapshot{}, fmt.Errorf("no checkpoint was written and the sandbox is not running (phase %v): a memory snapshot cannot be made; delete it", st.Phase)
	}
	if err := writeFileAtomic(filepath.Join(dirs.state, suspendingName), nil); err != nil {
		return runtime.Snapshot{}, err
	}
	if needCheckpoint {
		if err := r.checkpoint(ctx, id, dirs, st.Phase); err != nil {
			return runtime.Snapshot{}, err
		}
	}
	if err := r.releaseRunning(ctx, id); err != nil {
		return runtime.Snapshot{}, fmt.Errorf("free the sandbox's resources: %w", err)
	}
	// The image must be free before the snapshot counts as complete: a
	// restore mounting it while a lingering loop device still has the old
	// mount's filesystem would mount one ext4 twice.
	if err := r.waitLoopFree(ctx, dirs.image); err != nil {
		return runtime.Snapshot{}, err
	}
	m := snapshotManifest{Kind: kind, Format: format, CreatedAt: time.Now().UTC(), DiskImage: fileExists(dirs.image)}
	if m.SizeBytes, err = snapshotSize(dirs); err != nil {
		return runtime.Snapshot{}, err
	}
	// Durable (contents, then the directory entry): its presence means a
	// complete snapshot.
	if err := writeManifest(filepath.Join(dirs.state, snapshotManifestName), m); err != nil {
		return runtime.Snapshot{}, err
	}
	r.log.Info("sandbox suspended", "sandbox", id, "kind", kind, "size", m.SizeBytes)
	return m.snapshot(dirs.state), nil
}

// checkpoint runs `runsc checkpoint` of a running or paused sandbox into
// checkpoint.tmp/ and renames it to checkpoint/ once complete. The sandbox
// exits once checkpointed. runsc takes the global flags the sandbox was
// created with (its network mode).
func (r *Runtime) checkpoint(ctx context.Context, id model.SandboxID, dirs sandboxDirs, phase runtime.Phase) error {
	tmp := filepath.Join(dirs.state, checkpointTmpName)
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return err
	}
	if _, err := r.releaseForCheckpoint(ctx, id, dirs, phase); err != nil {
		return err
	}
	start := time.Now()
	if _, err := r.runNet(ctx, r.joinsNetns(id), "checkpoint", "--image-path", tmp, id.String()); err != nil {
		// The sandbox may still run (a save that failed before it
		// stopped the kernel): let its agent listen again.
		if rerr := r.reacquireAgentSocket(context.WithoutCancel(ctx), id, dirs); rerr != nil {
			r.log.Warn("let the agent listen again", "sandbox", id, "err", rerr)
		}
		return fmt.Errorf("checkpoint: %w", err)
	}
	r.log.Debug("runsc checkpoint", "sandbox", id, "took", time.Since(start))
	if err := syncTree(tmp); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dirs.state, checkpointName)); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return atomicfile.SyncDir(dirs.state)
}

// releaseForCheckpoint readies a runsc sandbox in phase for `runsc
// checkpoint`: running (runsc checkpoints a running sandbox; a paused one
// is resumed, its tasks run for the few milliseconds until the checkpoint
// or a freeze) and its agent's host socket let go (releaseAgentSocket,
// which the agent does only while running). resumed says whether it was
// resumed, also when the release then failed.
func (r *Runtime) releaseForCheckpoint(ctx context.Context, id model.SandboxID, dirs sandboxDirs, phase runtime.Phase) (resumed bool, err error) {
	if phase == runtime.PhasePaused {
		if err := r.resume(ctx, id); err != nil {
			return false, fmt.Errorf("resume before checkpoint: %w", err)
		}
		resumed = true
	}
	return resumed, r.releaseAgentSocket(ctx, id, dirs)
}

// releaseRunning frees what a sandbox holds only while it runs, keeping
// its snapshot: the container and its processes, every mount below its
// state directory (overlay, idmapped template, meta tmpfs, disk image) and
// the image's loop device, its cgroups, and the files that describe the
// running container. Its own filesystem, id range, network marker, bundle
// and agent log stay. Each step tolerates having been done already.
func (r *Runtime) releaseRunning(ctx context.Context, id model.SandboxID) error {
	cg, err := r.cgroupPath(id)
	if err != nil {
		return err
	}
	// Without state files the runtime knows no container (see state):
	// skip its kill and delete, two execs of the runtime on the way to a
	// restore.
	if files, err := r.runtimeFiles(id); err != nil {
		return err
	} else if len(files) > 0 {
		if err := r.removeContainer(ctx, id); err != nil {
			return err
		}
	} else if err := r.cgroups.Kill(ctx, cg); err != nil {
		return err
	}
	dirs := r.dirs(id)
	if err := r.unmountAll(ctx, dirs.state); err != nil {
		return err
	}
	if err := r.cgroups.Remove(ctx, cg); err != nil {
		return err
	}
	for _, f := range []string{dirs.pidFile, dirs.stopMarker, filepath.Join(dirs.state, cgroupReadyName), filepath.Join(dirs.state, checkpointTmpName), filepath.Join(dirs.state, restoredName)} {
		if err := os.RemoveAll(f); err != nil {
			return err
		}
	}
	return nil
}

// ForgetSnapshot implements runtime.Suspender: the snapshot of a sandbox
// that was restored from it and runs again is removed. Without a live
// container it does nothing (the snapshot is the sandbox then).
func (r *Runtime) ForgetSnapshot(ctx context.Context, id model.SandboxID) error {
	unlock := r.lock(id)
	defer unlock()
	st, err := r.observe(ctx, id)
	if err != nil || !st.Phase.Alive() {
		if errors.Is(err, runtime.ErrNotFound) {
			err = nil
		}
		return err
	}
	return r.consumeSnapshot(r.dirs(id))
}

// consumeSnapshot removes a snapshot's files once the sandbox exists again
// (or a live container shows them stale): the manifest first, so a crash
// half-way never leaves a manifest whose checkpoint is gone.
func (r *Runtime) consumeSnapshot(dirs sandboxDirs) error {
	for _, name := range []string{snapshotManifestName, checkpointTmpName, checkpointName, suspendingName} {
		if err := os.RemoveAll(filepath.Join(dirs.state, name)); err != nil {
			return fmt.Errorf("remove the consumed snapshot: %w", err)
		}
	}
	return nil
}

// hasSnapshot reports whether the state directory holds a snapshot or a
// suspend under way: its filesystem is then the sandbox, never a leftover.
func hasSnapshot(dirs sandboxDirs) bool {
	for _, name := range []string{snapshotManifestName, suspendingName, checkpointName} {
		if _, err := os.Lstat(filepath.Join(dirs.state, name)); err == nil {
			return true
		}
	}
	return false
}

// snapshot is the runtime's handle on the snapshot m describes, at location.
func (m snapshotManifest) snapshot(location string) runtime.Snapshot {
	return runtime.Snapshot{Kind: m.Kind, Format: m.Format, Location: location, SizeBytes: m.SizeBytes, CreatedAt: m.CreatedAt}
}

// writeManifest writes a snapshot's manifest m to path durably.
func writeManifest(path string, m any) error {
	data, err := json.MarshalIndent(m, "", "\t")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, data, 0o600); err != nil {
		return fmt.Errorf("write the snapshot manifest: %w", err)
	}
	return nil
}

// checkRestore checks that snap is a snapshot this runtime wrote of the
// sandbox whose directories are dirs, and that the state directory holds
// it complete; it returns its manifest.
func (r *Runtime) checkRestore(spec runtime.Spec, dirs sandboxDirs) (snapshotManifest, error) {
	snap := spec.Restore
	kind, format, ok := r.snapshotFormat(snap.Kind)
	if !ok || snap.Format != format || snap.Kind != kind {
		def, defFormat, _ := r.snapshotFormat("")
		return snapshotManifest{}, fmt.Errorf("restore: a %s snapshot in format %q cannot be restored by %s (it restores %s snapshots in format %q): %w",
			snap.Kind, snap.Format, r.flavor, def, defFormat, runtime.ErrNotSupported)
	}
	if filepath.Clean(snap.Location) != dirs.state {
		return snapshotManifest{}, fmt.Errorf("restore: the snapshot at %q is not this sandbox's (%s)", snap.Location, dirs.state)
	}
	m, err := runtime.ReadSnapshotManifest[snapshotManifest](dirs.state, snapshotManifestName)
	if errors.Is(err, fs.ErrNotExist) {
		return m, fmt.Errorf("restore: no complete snapshot in %s (suspended half-way, or already restored): %w", dirs.state, runtime.ErrNotFound)
	}
	if err != nil {
		return m, fmt.Errorf("restore: %w", err)
	}
	if m.Format != format || m.Kind != kind {
		return m, fmt.Errorf("restore: the snapshot in %s is a %s snapshot in format %q: %w", dirs.state, m.Kind, m.Format, runtime.ErrNotSupported)
	}
	if want := spec.Resources.DiskBytes > 0; want != m.DiskImage {
		return m, fmt.Errorf("restore: the snapshot was taken with disk image %v, the spec asks for %v (a disk limit cannot be added or removed by a restore)", m.DiskImage, want)
	}
	if format == FormatRunscCheckpoint && !dirExists(filepath.Join(dirs.state, checkpointName)) {
		return m, fmt.Errorf("restore: the checkpoint image %s is missing", filepath.Join(dirs.state, checkpointName))
	}
	return m, nil
}

// loopFreeTimeout bounds the wait for an unmounted image's loop device to
// go.
const loopFreeTimeout = 15 * time.Second

// waitLoopFree waits until no loop device is bound to image. The kernel
// clears an autoclear loop device once its last user goes, which is not
// the unmount on the host: the lazily detached root of a container's
// mount namespace, or crun's private mount namespace (command), hold the
// mount until their last process has gone, and the clearing itself runs
// asynchronously. Mounting the image again before would mount one ext4
// filesystem twice.
func (r *Runtime) waitLoopFree(ctx context.Context, image string) error {
	wait := retry.Policy{Initial: time.Millisecond, Max: 50 * time.Millisecond, Jitter: 0.2, MaxElapsed: loopFreeTimeout}.Start(nil)
	for {
		devs, err := rootfs.LoopDevices(image)
		if err != nil {
			return err
		}
		if len(devs) == 0 {
			if waited := wait.Elapsed(); waited > 10*time.Millisecond {
				r.log.Debug("waited for the disk image's loop device to go", "image", image, "took", waited)
			}
			return nil
		}
		switch err := wait.Wait(ctx); {
		case errors.Is(err, retry.ErrExhausted):
			return fmt.Errorf("the disk image is still bound to %v after %v; try again", devs, loopFreeTimeout)
		case err != nil:
			return fmt.Errorf("wait for the disk image's loop device %v to go: %w", devs, err)
		}
	}
}

// restore makes the container of a sandbox whose snapshot checkRestore
// accepted: the kept filesystem is mounted again (prepare), then runc and
// crun create a container (Start boots a fresh agent over the kept files)
// and runsc restores its checkpoint, so the sandbox runs after Create.
func (r *Runtime) restore(ctx context.Context, spec runtime.Spec, dirs sandboxDirs) error {
	// A suspend that finished checks this too; one that a crash cut short
	// and a restore that failed after mounting may leave a device behind.
	if err := r.waitLoopFree(ctx, dirs.image); err != nil {
		return err
	}
	if err := r.prepare(ctx, spec, dirs); err != nil {
		return err
	}
	if spec.Restore.Format != FormatRunscCheckpoint {
		// A filesystem snapshot (runc, crun, or runsc's
		// SuspendFilesystem): a fresh container over the kept files.
		if err := r.runDetached(ctx, dirs.agentLog, netnsOf(spec), "create", "--bundle", dirs.bundle, "--pid-file", dirs.pidFile, spec.ID.String()); err != nil {
			return err
		}
		return r.delegateWorkloadCgroup(spec.ID, dirs, spec.Resources.PidsLimit)
	}
	if spec.Network != nil {
		if err := readdressNetns(spec.Network); err != nil {
			return fmt.Errorf("prepare the network for the restore: %w", err)
		}
	}
	start := time.Now()
	if err := r.runDetached(ctx, dirs.agentLog, netnsOf(spec), "restore", "--detach",
		"--image-path", filepath.Join(dirs.state, checkpointName),
		"--bundle", dirs.bundle, "--pid-file", dirs.pidFile, spec.ID.String()); err != nil {
		return fmt.Errorf("runsc restore: %w", err)
	}
	r.log.Debug("runsc restore", "sandbox", spec.ID, "took", time.Since(start))
	// The restored agent has no socket (it released it for the
	// checkpoint): let it listen again now rather than after
	// agent.ReleaseTimeout.
	if err := r.reacquireAgentSocket(ctx, spec.ID, dirs); err != nil {
		return fmt.Errorf("restored agent: %w", err)
	}
	return writeFileAtomic(filepath.Join(dirs.state, restoredName), nil)
}

// restoredName is the file Create writes in the state directory of a
// sandbox that runsc restored: it runs already, and the Start that
// follows needs no `runsc start` (which fails on a running sandbox) and
// `runsc state` to find that out — two execs of runsc on the way to the
// woken sandbox's first answer.
const restoredName = "restored"

// startedByRestore reports whether sandbox id was restored by Create and
// still runs (its runsc sandbox process is alive), removing the marker:
// Start then has nothing to do.
func (r *Runtime) startedByRestore(id model.SandboxID) bool {
	d := r.dirs(id)
	marker := filepath.Join(d.state, restoredName)
	if !fileExists(marker) {
		return false
	}
	if err := os.Remove(marker); err != nil {
		r.log.Warn("remove the restore marker", "sandbox", id, "err", err)
		return false
	}
	pid, err := readPidFile(d.pidFile)
	return err == nil && procfs.Alive(pid)
}

// readPidFile reads a runtime's --pid-file.
func readPidFile(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid file %s: not a pid: %q", path, data)
	}
	return pid, nil
}

// The signals with which agents before agentproto.FeatureListenerRelease
// released their socket and took it again, as `runsc kill` names them: a
// snapshot of such an agent (made before an upgrade) is still restored.
const (
	legacyReleaseSignal   = "USR1"
	legacyReacquireSignal = "USR2"
)

// releasedBySignalName is the file in the state directory of a sandbox
// whose old agent released its socket on legacyReleaseSignal: it needs
// legacyReacquireSignal to listen again, not the trigger.
const releasedBySignalName = "agent-released-by-signal"

// agentReleaseTimeout bounds the wait for the agent to let go of its
// socket.
const agentReleaseTimeout = 10 * time.Second

// releaseAgentSocket makes the agent of a runsc sandbox close its
// host-backed listening socket and the connections accepted on it, which
// gVisor cannot checkpoint ("Cannot save endpoint with bound host socket"),
// and waits until the socket file is gone (the agent removes it last). It
// asks over a connection of its own (POST /v1/listener/release): nothing a
// workload sends the agent makes it let go.
func (r *Runtime) releaseAgentSocket(ctx context.Context, id model.SandboxID, dirs sandboxDirs) error {
	trigger := filepath.Join(dirs.agentRunDir(), agentproto.RelistenTrigger)
	if err := os.Remove(trigger); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove a stale %s: %w", trigger, err)
	}
	_ = os.Remove(filepath.Join(dirs.state, releasedBySignalName))
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) { return r.DialAgent(ctx, id) }, r.log)
	err := c.ReleaseListener(ctx)
	c.Close()
	if errors.Is(err, agentclient.ErrUnsupported) {
		r.log.Info("the agent predates the release request: releasing its socket by signal", "sandbox", id)
		if err := writeFileAtomic(filepath.Join(dirs.state, releasedBySignalName), nil); err != nil {
			return err
		}
		if _, err := r.run(ctx, "kill", id.String(), legacyReleaseSignal); err != nil {
			return fmt.Errorf("ask the agent to release its socket: %w", err)
		}
	} else if aerr := (*agentclient.Error)(nil); errors.As(err, &aerr) || ctx.Err() != nil {
		return fmt.Errorf("ask the agent to release its socket: %w", err)
	} else if err != nil {
		// No answer (the connection broke): whether the agent
		// released shows below. The agent keeps the asking connection
		// open until this side closes it, so the answer normally comes.
		r.log.Debug("release request: no answer; waiting for the socket to go", "sandbox", id, "err", err)
	}
	sock := filepath.Join(dirs.agentRunDir(), socketName)
	wait := retry.Policy{Initial: time.Millisecond, Max: 10 * time.Millisecond, Jitter: 0.2, MaxElapsed: agentReleaseTimeout}.Start(nil)
	for fileExists(sock) {
		err := wait.Wait(ctx)
		if err == nil {
			continue
		}
		if rerr := r.reacquireAgentSocket(context.WithoutCancel(ctx), id, dirs); rerr != nil {
			r.log.Warn("let the agent listen again", "sandbox", id, "err", rerr)
		}
		if errors.Is(err, retry.ErrExhausted) {
			return fmt.Errorf("the agent did not release its socket within %v: %w", agentReleaseTimeout, runtime.ErrNotSupported)
		}
		return fmt.Errorf("wait for the agent to release its socket: %w", err)
	}
	return nil
}

// reacquireAgentSocket lets the agent of a sandbox whose socket was
// released listen again (after `runsc restore`, or when the checkpoint did
// not happen): it creates agentproto.RelistenTrigger in the agent's run
// directory, which the agent looks for every few milliseconds and which no
// process of the sandbox can create (the directory is read-only there);
// an old agent gets legacyReacquireSignal instead. Without either, the
// agent listens again after agent.ReleaseTimeout.
func (r *Runtime) reacquireAgentSocket(ctx context.Context, id model.SandboxID, dirs sandboxDirs) error {
	marker := filepath.Join(dirs.state, releasedBySignalName)
	if fileExists(marker) {
		if _, err := r.run(ctx, "kill", id.String(), legacyReacquireSignal); err != nil {
			return fmt.Errorf("let the agent listen again: %w", err)
		}
		return os.Remove(marker)
	}
	f, err := os.OpenFile(filepath.Join(dirs.agentRunDir(), agentproto.RelistenTrigger), os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("let the agent listen again: %w", err)
	}
	return f.Close()
}

// snapshotSize is the host disk space the snapshot takes: the disk image's
// allocated blocks (or the upper and work directories' without a limit)
// plus the checkpoint image's.
func snapshotSize(dirs sandboxDirs) (int64, error) {
	roots := []string{filepath.Join(dirs.state, checkpointName)}
	if fileExists(dirs.image) {
		roots = append(roots, dirs.image)
	} else {
		roots = append(roots, dirs.upper, dirs.work)
	}
	return blocksUnder(roots...)
}

// blocksUnder is the host disk space the files below roots take (a root
// that does not exist takes none).
func blocksUnder(roots ...string) (int64, error) {
	var total int64
	for _, root := range roots {
		err := filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				total += st.Blocks * 512
			}
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("snapshot size: %w", err)
		}
	}
	return total, nil
}

// syncTree fsyncs every regular file below dir and the directories, so a
// renamed checkpoint image is complete on disk, not only in the page cache.
func syncTree(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	})
}

func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
