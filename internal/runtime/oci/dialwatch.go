package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/retry"
)

// runDirWatch is an inotify watch on an agent's run directory: DialAgent
// waits on it between attempts, so that it connects as soon as the agent
// binds its socket rather than at the next step of its backoff (which
// cost a new sandbox up to the longest step, 16 ms). An event only wakes
// the dial, which opens the socket as before (unixsock.DialIn): what a guest does in
// the directory can wake it early, never make it connect elsewhere. The zero
// runDirWatch (no watch could be made) waits out the timeout.
type runDirWatch struct {
	f *os.File // the inotify descriptor, non-blocking, in the runtime poller
}

// watchRunDir watches dir (not followed if a symlink) for entries created
// or moved into it.
func watchRunDir(dir string) (*runDirWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	mask := uint32(unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW)
	if _, err := unix.InotifyAddWatch(fd, dir, mask); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("inotify watch %s: %w", dir, err)
	}
	return &runDirWatch{f: os.NewFile(uintptr(fd), "inotify:"+dir)}, nil
}

// wait returns after an event in the directory (reading every event
// queued), after d, or with ctx's error once ctx ends.
func (w *runDirWatch) wait(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if w.f == nil {
		return retry.Sleep(ctx, retry.SystemClock(), d)
	}
	if err := w.f.SetReadDeadline(time.Now().Add(d)); err != nil {
		return retry.Sleep(ctx, retry.SystemClock(), d) // not in the poller: no deadlines
	}
	// A deadline in the past ends the read at once.
	stop := context.AfterFunc(ctx, func() { _ = w.f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	var buf [4096]byte // whole events; a read returns as many as fit
	_, err := w.f.Read(buf[:])
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err == nil || errors.Is(err, os.ErrDeadlineExceeded):
		return nil
	default:
		return fmt.Errorf("wait for the agent's socket: %w", err)
	}
}

// Close removes the watch.
func (w *runDirWatch) Close() error {
	if w.f == nil {
		return nil
	}
	return w.f.Close()
}
