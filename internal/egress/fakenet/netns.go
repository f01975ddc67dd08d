package fakenet

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// newNetns makes a fresh network namespace and returns it as an open file.
// The namespace lives as long as the file (and any socket or process in it):
// no bind mount, so nothing of it can outlive a crashed test.
func newNetns() (*os.File, error) {
	type result struct {
		f   *os.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread goes back to its own namespace afterwards; if it
		// cannot, it stays locked and ends with the goroutine (a main
		// thread would be wedged, never reused).
		runtime.LockOSThread()
		orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer orig.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("unshare network namespace: %w", err)}
			return
		}
		f, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if rerr := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); rerr != nil {
			if f != nil {
				f.Close()
			}
			ch <- result{err: fmt.Errorf("restore network namespace: %w", rerr)}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{f, err}
	}()
	r := <-ch
	return r.f, r.err
}

// errGoexit is inNetns's result when fn ended its goroutine (a test's
// FailNow) instead of returning.
var errGoexit = errors.New("fakenet: the function run in the namespace did not return")

// inNetns runs fn on an OS thread that has entered the namespace ns, and
// brings the thread back to its own namespace afterwards. Sockets fn opens
// stay in ns and may be used from any goroutine. When the thread cannot be
// brought back (or fn ends the goroutine) it stays locked and ends with its
// goroutine.
func inNetns(ns *os.File, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		result := errGoexit
		defer func() { done <- result }()
		runtime.LockOSThread()
		orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			result = err
			return
		}
		defer orig.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			result = fmt.Errorf("setns: %w", err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			result = fmt.Errorf("restore network namespace: %w (after: %v)", err, ferr)
			return // the thread stays locked and is discarded
		}
		runtime.UnlockOSThread()
		result = ferr
	}()
	return <-done
}

// netnsID is the namespace's identity ("net:[inode]"), as /proc shows it.
func netnsID(ns *os.File) (string, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(ns.Fd()), &st); err != nil {
		return "", err
	}
	return fmt.Sprintf("net:[%d]", st.Ino), nil
}
