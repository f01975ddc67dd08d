package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

// capability turns a runtime's "cannot do this" into a permanent failure:
// retrying will not give the runtime a capability it lacks.
func capability(err error) error {
	if errors.Is(err, runtime.ErrNotSupported) {
		return fmt.Errorf("%w: %w", ErrPermanent, err)
	}
	return err
}

// Pause freezes every process of a running sandbox, its memory resident.
// Pausing a paused sandbox succeeds.
func (w *Worker) Pause(ctx context.Context, sb model.Sandbox) error {
	p, err := runtime.AsPauser(w.cfg.Runtime)
	if err != nil {
		return capability(err)
	}
	w.cfg.Fault("pause.before-runtime")
	if err := w.rtErr("pause", w.traceRuntime(ctx, "pause", sb.ID, func(ctx context.Context) error { return p.Pause(ctx, sb.ID) })); err != nil {
		return fmt.Errorf("pause sandbox %s: %w", sb.ID, capability(err))
	}
	w.cfg.Fault("pause.after-runtime")
	return nil
}

// Resume continues a paused sandbox and returns once its agent answers.
// Resuming a running sandbox succeeds.
func (w *Worker) Resume(ctx context.Context, sb model.Sandbox) error {
	p, err := runtime.AsPauser(w.cfg.Runtime)
	if err != nil {
		return capability(err)
	}
	w.cfg.Fault("resume.before-runtime")
	if err := w.rtErr("resume", w.traceRuntime(ctx, "resume", sb.ID, func(ctx context.Context) error { return p.Resume(ctx, sb.ID) })); err != nil {
		return fmt.Errorf("resume sandbox %s: %w", sb.ID, capability(err))
	}
	w.cfg.Fault("resume.after-runtime")
	return w.waitAgent(ctx, sb.ID)
}

// Suspend writes the sandbox's snapshot and frees what it holds while
// running, and returns the snapshot's record. Its network stays attached
// (a memory snapshot is restored into the same network namespace, and its
// address is the sandbox's own until it is deleted). Suspending a suspended
// sandbox returns its snapshot again, and suspending one whose suspend
// stopped half-way finishes it. A suspend that fails after the sandbox
// stopped running (its checkpoint taken, its container gone) wraps
// ErrStopped. kind is the kind of snapshot to write ("": the runtime's
// own; model.SnapshotFilesystem on runsc stops the sandbox without a
// checkpoint); a kind the runtime cannot write is refused.
func (w *Worker) Suspend(ctx context.Context, sb model.Sandbox, kind model.SnapshotKind) (model.Snapshot, error) {
	if _, err := runtime.AsSuspender(w.cfg.Runtime); err != nil {
		return model.Snapshot{}, capability(err)
	}
	var err error
	// Its agent connection ends with its processes; streams attached to
	// it end now rather than hang.
	w.dropAgent(sb.ID)
	w.cfg.Fault("suspend.before-runtime")
	var snap runtime.Snapshot
	err = w.traceRuntime(ctx, "suspend", sb.ID, func(ctx context.Context) (err error) {
		snap, err = runtime.SuspendAs(ctx, w.cfg.Runtime, sb.ID, kind)
		return err
	})
	if w.rtErr("suspend", err) != nil {
		err = fmt.Errorf("suspend sandbox %s: %w", sb.ID, capability(err))
		if w.Stopped(ctx, sb.ID) {
			err = fmt.Errorf("%w; %w", err, ErrStopped)
		}
		return model.Snapshot{}, err
	}
	w.cfg.Fault("suspend.after-runtime")
	env := sb.Environment
	if env == "" {
		env = w.cfg.Environment
	}
	return model.Snapshot{
		Kind:        snap.Kind,
		Environment: env,
		Format:      snap.Format,
		Location:    snap.Location,
		SizeBytes:   snap.SizeBytes,
		CreatedAt:   snap.CreatedAt,
	}, nil
}

// Stopped reports whether the runtime says the sandbox runs no more: it
// has no container (a suspended sandbox has none), or one in which nothing
// runs. A runtime that cannot say is taken to mean it may still run. The
// controller asks it of a suspend that failed for good without saying
// ErrStopped (one whose runtime call succeeded but whose result could not
// be recorded).
func (w *Worker) Stopped(ctx context.Context, id model.SandboxID) bool {
	st, err := w.Observe(ctx, id)
	return errors.Is(err, runtime.ErrNotFound) || err == nil && !st.Phase.Alive()
}

// Wake restores a suspended sandbox from its snapshot and returns once its
// agent answers. A snapshot taken in another execution environment than
// this worker's is refused. If a previous attempt already restored it, the
// sandbox is adopted as it is.
func (w *Worker) Wake(ctx context.Context, sb model.Sandbox) error {
	snap := sb.Snapshot
	if snap == nil {
		return fmt.Errorf("%w: sandbox %s has no snapshot to wake from", ErrPermanent, sb.ID)
	}
	if snap.Environment != "" && w.cfg.Environment != "" && snap.Environment != w.cfg.Environment {
		return fmt.Errorf("%w: sandbox %s: its snapshot was taken in environment %s, and this worker runs %s; a snapshot is restored only into its own environment",
			ErrPermanent, sb.ID, snap.Environment.Short(), w.cfg.Environment.Short())
	}
	rt := w.cfg.Runtime
	s, err := runtime.AsSuspender(rt)
	if err != nil {
		return capability(err)
	}
	st, err := rt.State(ctx, sb.ID)
	_ = w.rtErr("state", err)
	switch {
	case errors.Is(err, runtime.ErrNotFound) || err == nil && st.Phase == runtime.PhaseStopped:
		// Not restored yet, or a restore whose sandbox died: (again) from
		// the snapshot, which the runtime keeps until a restore succeeds.
		spec, err := w.spec(ctx, sb)
		if err != nil {
			return err
		}
		spec.Restore = &runtime.Snapshot{
			Kind:      snap.Kind,
			Format:    snap.Format,
			Location:  snap.Location,
			SizeBytes: snap.SizeBytes,
			CreatedAt: snap.CreatedAt,
		}
		w.cfg.Fault("wake.before-runtime-create")
		if err := w.rtErr("restore", w.traceRuntime(ctx, "restore", sb.ID, func(ctx context.Context) error { return rt.Create(ctx, spec) })); err != nil {
			return fmt.Errorf("restore sandbox %s: %w", sb.ID, capability(err))
		}
		w.cfg.Fault("wake.after-runtime-create")
		st, err = rt.State(ctx, sb.ID)
		if w.rtErr("state", err) != nil {
			return fmt.Errorf("observe restored sandbox %s: %w", sb.ID, err)
		}
	case err != nil:
		return fmt.Errorf("observe sandbox %s: %w", sb.ID, err)
	}
	if err := w.startAndWait(ctx, sb, st.Phase, "wake"); err != nil {
		return err
	}
	if snap.Kind == model.SnapshotFilesystem {
		// Its processes start again: so does the template's start
		// command. A ready command that does not succeed is logged, not
		// a failed wake: the sandbox runs (a failed wake would leave it
		// recorded as suspended while its container runs).
		if err := w.startTemplate(ctx, sb); err != nil {
			if !errors.Is(err, ErrPermanent) {
				return err
			}
			w.log.WarnContext(ctx, "woke a sandbox whose template is not ready", "sandbox", sb.ID, "err", err)
		}
	}
	// Only now: a wake that failed before keeps its snapshot to try again.
	if err := w.rtErr("forget_snapshot", s.ForgetSnapshot(ctx, sb.ID)); err != nil {
		return fmt.Errorf("sandbox %s: remove the snapshot it woke from: %w", sb.ID, err)
	}
	return nil
}
