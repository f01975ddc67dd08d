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
	"github.com/airlockdev/airlock/internal/runtime"
)

// stateCheckEvery is how often DialAgent, while waiting for the agent,
// checks that the sandbox has not stopped.
const stateCheckEvery = time.Second

// DialAgent connects to the agent's Unix socket, StateRoot/<id>/run/agent.sock,
// retrying until the agent listens or ctx ends. It fails early if the
// sandbox does not exist or has stopped. The socket is reached through a
// short /proc/self/fd path, so a StateRoot of any length works despite the
// 108-byte limit of Unix socket addresses.
func (r *Runtime) DialAgent(ctx context.Context, id model.SandboxID) (net.Conn, error) {
	if _, err := model.ParseSandboxID(id.String()); err != nil {
		return nil, fmt.Errorf("dial agent: %w", err)
	}
	runDir := r.dirs(id).run
	// A new sandbox's agent listens within tens of milliseconds: poll the
	// socket often (a failed connect costs microseconds) and ask the runtime
	// (an exec of its binary) only when that takes long.
	delay := 2 * time.Millisecond
	lastCheck := time.Now()
	for {
		conn, err := dialIn(ctx, runDir, socketName)
		if err == nil {
			return conn, nil
		}
		if !retryable(err) {
			return nil, fmt.Errorf("dial agent of %s: %w", id, err)
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
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("dial agent of %s: %w (last error: %v)", id, ctx.Err(), err)
		case <-time.After(delay):
		}
		if delay < 10*time.Millisecond {
			delay *= 2
		}
	}
}

// dialIn connects to the Unix socket name inside dir through
// /proc/self/fd/N/name, where N is an O_PATH descriptor of dir.
func dialIn(ctx context.Context, dir, name string) (net.Conn, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	var d net.Dialer
	return d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d/%s", fd, name))
}

// retryable reports whether a dial error means "not listening yet".
func retryable(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOENT) ||
		errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, unix.EAGAIN)
}
