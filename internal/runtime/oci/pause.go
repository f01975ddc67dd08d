package oci

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/cgroups"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/retry"
	"github.com/airlockdev/airlock/internal/runtime"
)

var _ runtime.Pauser = (*Runtime)(nil)

// freezeTimeout bounds the wait for a runc or crun sandbox's cgroup to
// freeze.
const freezeTimeout = 10 * time.Second

// Pause freezes every process of a running sandbox (`runc|crun pause`: the
// cgroup freezer; `runsc pause`: the sentry stops its tasks). Pausing a
// paused sandbox is a no-op.
func (r *Runtime) Pause(ctx context.Context, id model.SandboxID) error {
	pid, err := r.pause(ctx, id)
	if err == nil && pid > 0 {
		r.rememberLive(id, pid, runtime.PhasePaused) // after the lock drops the entry
	}
	return err
}

func (r *Runtime) pause(ctx context.Context, id model.SandboxID) (int, error) {
	unlock := r.lock(id)
	defer unlock()
	st, err := r.observe(ctx, id)
	if err != nil {
		return 0, fmt.Errorf("pause %s: %w", id, err)
	}
	switch st.Phase {
	case runtime.PhasePaused:
		return st.Pid, nil
	case runtime.PhaseRunning:
	default:
		return 0, fmt.Errorf("pause %s: sandbox is %s, not running", id, st.Phase)
	}
	if err := r.freeze(ctx, id); err != nil {
		return 0, fmt.Errorf("pause %s: %w", id, err)
	}
	if err := r.waitFrozen(ctx, id); err != nil {
		// Thaw what froze: a failed pause leaves the sandbox running.
		if rerr := r.resume(context.WithoutCancel(ctx), id); rerr != nil {
			err = errors.Join(err, fmt.Errorf("thaw after the failed pause: %w", rerr))
		}
		return 0, fmt.Errorf("pause %s: %w", id, err)
	}
	return st.Pid, nil
}

// freeze runs `pause`. runc's cgroup v1 freezer gives up ("unable to
// freeze", the cgroup left thawed) when a task does not reach the frozen
// state within its own retries: a task in uninterruptible sleep on a host
// busy with I/O (seen in CI: a PauseResume conformance case). That is
// transient: it is tried again for up to freezeTimeout; any other failure
// is returned at once.
func (r *Runtime) freeze(ctx context.Context, id model.SandboxID) error {
	return retry.Do(ctx, retry.Policy{Initial: 20 * time.Millisecond, Max: 500 * time.Millisecond, Jitter: 0.2, MaxElapsed: freezeTimeout}, nil,
		func() error {
			_, err := r.run(ctx, "pause", id.String())
			if err != nil && !strings.Contains(err.Error(), "unable to freeze") {
				return retry.Permanent(err)
			}
			return err
		}, nil)
}

// Resume continues a paused sandbox. Resuming a running sandbox is a
// no-op.
func (r *Runtime) Resume(ctx context.Context, id model.SandboxID) error {
	pid, err := r.resumeLocked(ctx, id)
	if err == nil && pid > 0 {
		r.rememberLive(id, pid, runtime.PhaseRunning) // after the lock drops the entry
	}
	return err
}

func (r *Runtime) resumeLocked(ctx context.Context, id model.SandboxID) (int, error) {
	unlock := r.lock(id)
	defer unlock()
	st, err := r.observe(ctx, id)
	if err != nil {
		return 0, fmt.Errorf("resume %s: %w", id, err)
	}
	switch st.Phase {
	case runtime.PhaseRunning:
		return st.Pid, nil
	case runtime.PhasePaused:
	default:
		return 0, fmt.Errorf("resume %s: sandbox is %s, not paused", id, st.Phase)
	}
	if err := r.resume(ctx, id); err != nil {
		return 0, fmt.Errorf("resume %s: %w", id, err)
	}
	return st.Pid, nil
}

// resume is Resume of a sandbox known to be paused, under its lock.
func (r *Runtime) resume(ctx context.Context, id model.SandboxID) error {
	_, err := r.run(ctx, "resume", id.String())
	return err
}

func (r *Runtime) freezer(id model.SandboxID) (cgroups.FreezerState, error) {
	cg, err := r.cgroupPath(id)
	if err != nil {
		return "", err
	}
	return r.cgroups.Freezer(cg)
}

// waitFrozen waits until every task of a runc or crun sandbox is frozen:
// crun's pause returns while the v1 freezer is still FREEZING, and calls
// the container running until it is FROZEN. runsc pauses synchronously
// (and not with the freezer).
func (r *Runtime) waitFrozen(ctx context.Context, id model.SandboxID) error {
	if r.flavor == FlavorRunsc {
		return nil
	}
	// Bounded: a task that never freezes (stuck in the kernel) must not
	// hold the sandbox's lock, and a delete waiting behind it, forever.
	wait := retry.Policy{Initial: 100 * time.Microsecond, Max: 20 * time.Millisecond, Jitter: 0.2, MaxElapsed: freezeTimeout}.Start(nil)
	for {
		st, err := r.freezer(id)
		if err != nil {
			return err
		}
		if st == cgroups.Frozen {
			return nil
		}
		if err := wait.Wait(ctx); err != nil {
			return fmt.Errorf("cgroup still %s: %w", st, err)
		}
	}
}
