// Package filelock takes exclusive advisory locks on files (flock(2))
// across processes, waiting for a lock as long as a context allows.
package filelock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/retry"
)

// Lock takes an exclusive flock on path (created, mode 0600, if missing)
// and returns the open, locked file: closing it releases the lock. It
// polls while another holder has it (from 2 ms, doubling, at most
// 100 ms), so that ctx can end the wait. Holders may remove the file while
// they hold it (a prune): a lock taken on a file that is no longer at
// path is dropped and path is locked again, so two holders never hold
// different files of the same path.
func Lock(ctx context.Context, path string) (*os.File, error) {
	w := retry.Policy{Initial: 2 * time.Millisecond, Max: 100 * time.Millisecond}.Start(nil)
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, fmt.Errorf("lock: %w", err)
		}
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			var a, b unix.Stat_t
			if unix.Fstat(int(f.Fd()), &a) == nil && unix.Stat(path, &b) == nil && a.Dev == b.Dev && a.Ino == b.Ino {
				return f, nil
			}
			f.Close() // removed meanwhile: lock the new one
			continue
		}
		f.Close()
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if werr := w.Wait(ctx); werr != nil {
			return nil, fmt.Errorf("wait for the lock %s: %w", path, werr)
		}
	}
}
