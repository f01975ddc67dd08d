package oci

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/retry"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/unixsock"
)

// stateCheckEvery is how often DialAgent, while waiting for the agent,
// checks that the sandbox has not stopped.
const stateCheckEvery = time.Second

// DialAgent connects to the agent's Unix socket, StateRoot/<id>/run/agent.sock,
// retrying until the agent listens or ctx ends. It fails early if the
// sandbox does not exist or has stopped. The socket is reached with
// unixsock.DialIn: never through a symlink the guest planted in its run
// directory, and from a StateRoot of any length despite the 108-byte limit
// of Unix socket addresses.
func (r *Runtime) DialAgent(ctx context.Context, id model.SandboxID) (net.Conn, error) {
	if _, err := model.ParseSandboxID(id.String()); err != nil {
		return nil, fmt.Errorf("dial agent: %w", err)
	}
	runDir := r.dirs(id).agentRunDir()
	// A new sandbox's agent listens within tens of milliseconds: try the
	// socket again as soon as something appears in its directory (the
	// agent binding it; see runDirWatch), else on a short backoff (a failed
	// connect costs microseconds), and ask the runtime (an exec of its
	// binary) only when that takes long.
	wait := dialBackoff().Start(nil)
	lastCheck := time.Now()
	var watch *runDirWatch
	defer func() {
		if watch != nil {
			watch.Close()
		}
	}()
	for {
		conn, err := unixsock.DialIn(ctx, runDir, socketName)
		if err == nil {
			return conn, nil
		}
		if !retryable(err) {
			return nil, fmt.Errorf("dial agent of %s: %w", id, err)
		}
		if watch == nil {
			// Watched from now on; tried again at once, so a socket made
			// between the failed dial and the watch is not missed.
			if watch, err = watchRunDir(runDir); err != nil {
				r.log.Debug("watch the agent's run directory; polling it", "sandbox", id, "err", err)
				watch = &runDirWatch{}
			}
			continue
		}
		if errors.Is(err, os.ErrNotExist) {
			if _, serr := os.Stat(r.dirs(id).state); errors.Is(serr, os.ErrNotExist) {
				return nil, fmt.Errorf("dial agent of %s: %w", id, runtime.ErrNotFound)
			}
		}
		if time.Since(lastCheck) >= stateCheckEvery {
			lastCheck = time.Now()
			st, serr := r.State(ctx, id)
			if serr != nil && ctx.Err() == nil {
				return nil, fmt.Errorf("dial agent of %s: %w", id, serr)
			}
			if serr == nil && st.Phase == runtime.PhaseStopped {
				return nil, fmt.Errorf("dial agent of %s: sandbox is stopped (agent log: %s)", id, errorTail(r.dirs(id).agentLog))
			}
		}
		d := wait.Next()
		if errors.Is(err, unix.ECONNREFUSED) {
			// Bound but not listening yet (listen follows bind at once), or
			// a dead agent's socket: no event will come for it.
			d = min(d, refusedRetry)
		}
		if werr := watch.wait(ctx, d); werr != nil {
			return nil, fmt.Errorf("dial agent of %s: %w (last error: %v)", id, werr, err)
		}
	}
}

// refusedRetry is how soon DialAgent tries a socket that refused the
// connection again.
const refusedRetry = time.Millisecond

// dialBackoff is how often DialAgent tries the agent's socket: from 2 ms,
// doubling, at most 16 ms (±20%).
func dialBackoff() retry.Policy {
	return retry.Policy{Initial: 2 * time.Millisecond, Max: 16 * time.Millisecond, Jitter: 0.2}
}

// retryable reports whether a dial error means "not listening yet".
func retryable(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOENT) ||
		errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, unix.EAGAIN)
}
