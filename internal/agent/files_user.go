package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/agentproto"
)

// File operations as a user (agentproto.QueryFileUser). The agent runs as
// root but, in a sandbox, without CAP_DAC_OVERRIDE or CAP_CHOWN, so it can
// neither enter a user's 0700 home nor give files away. Instead a request
// that names a user runs on one locked OS thread whose effective UID and
// GID (per-thread setresuid/setresgid, needing CAP_SETUID/CAP_SETGID; the
// filesystem IDs follow them) are that user's: the kernel checks
// permissions as the user and files created belong to it. Supplementary
// groups stay the agent's own; only the primary group is the user's.
//
// The thread runs on a goroutine of its own, so the change can never leak:
// if restoring the agent's IDs fails, that goroutine ends still locked and
// the Go runtime discards its thread. (The handler's goroutine also serves
// the connection's next requests, so it must never own such a thread.)

// queryFileUser parses the optional user query parameter; nil when absent.
// It writes the refusal and returns false.
func queryFileUser(w http.ResponseWriter, r *http.Request) (*agentproto.FileUser, bool) {
	vals, ok := r.URL.Query()[agentproto.QueryFileUser]
	if !ok {
		return nil, true
	}
	if len(vals) != 1 {
		writeError(w, http.StatusBadRequest, agentproto.CodeInvalidFileUser, "give the user query parameter at most once")
		return nil, false
	}
	u, err := agentproto.ParseFileUser(vals[0])
	if err != nil {
		writeError(w, http.StatusBadRequest, agentproto.CodeInvalidFileUser, err.Error())
		return nil, false
	}
	return &u, true
}

// asFileUser wraps a file handler: with a user query parameter the whole
// handler runs as that user (see runAs).
func (s *Server) asFileUser(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		u, ok := queryFileUser(w, r)
		if !ok {
			return
		}
		if u == nil {
			h(w, r)
			return
		}
		if err := runAs(s.logger, *u, func() { h(w, r) }); err != nil {
			s.logger.Warn("cannot act as file user", "user", u.String(), "err", err)
			writeError(w, http.StatusInternalServerError, agentproto.CodeInternal, err.Error())
		}
	}
}

// runAs runs fn on a locked OS thread whose effective UID and GID are u's, and
// waits for it. It returns an error, without running fn, if the IDs could
// not be set. A panic in fn is re-raised in the caller.
func runAs(logger *slog.Logger, u agentproto.FileUser, fn func()) error {
	type result struct {
		err      error
		panicked bool
		p        any
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		prevGID, prevUID, err := setFSIDs(u)
		if err != nil {
			// setFSIDs restored what it changed, or failed to: in that
			// case leave the thread locked (discarded on return).
			done <- result{err: err}
			if restoreErr := restoreFSIDs(prevUID, prevGID); restoreErr != nil {
				logger.Error("file user: cannot restore the agent's filesystem IDs; discarding the thread", "err", restoreErr)
				return
			}
			runtime.UnlockOSThread()
			return
		}
		res := result{}
		func() {
			defer func() {
				if p := recover(); p != nil {
					res.panicked, res.p = true, p
				}
			}()
			fn()
		}()
		if restoreErr := restoreFSIDs(prevUID, prevGID); restoreErr != nil {
			logger.Error("file user: cannot restore the agent's filesystem IDs; discarding the thread", "err", restoreErr)
			done <- res
			return // still locked: the runtime ends this thread
		}
		runtime.UnlockOSThread()
		done <- res
	}()
	res := <-done
	if res.panicked {
		panic(res.p)
	}
	return res.err
}

// setFSIDs makes the calling thread act as u on the filesystem: its
// effective GID, then effective UID, become u's (raw setresgid/setresuid,
// which change one thread; the real and saved IDs stay the agent's, so the
// change can be undone, and the filesystem IDs follow the effective ones).
// setfsuid would be narrower but gVisor does not implement it. It checks
// that both took effect and returns the previous effective IDs, to restore
// in every case. While the thread's effective UID is not 0 it has no
// effective capabilities; they come back with the UID.
func setFSIDs(u agentproto.FileUser) (prevGID, prevUID int, err error) {
	prevGID, prevUID, err = currentFSIDs()
	if err != nil {
		return -1, -1, err
	}
	if err := setEffective(unix.SYS_SETRESGID, int(u.GID)); err != nil {
		return prevGID, -1, fmt.Errorf("cannot act as user %s: set the effective GID: %w (the agent lacks CAP_SETUID/CAP_SETGID?)", u, err)
	}
	if err := setEffective(unix.SYS_SETRESUID, int(u.UID)); err != nil {
		return prevGID, -1, fmt.Errorf("cannot act as user %s: set the effective UID: %w (the agent lacks CAP_SETUID/CAP_SETGID?)", u, err)
	}
	gid, uid, err := currentFSIDs()
	if err != nil {
		return prevGID, prevUID, err
	}
	if gid != int(u.GID) || uid != int(u.UID) {
		return prevGID, prevUID, fmt.Errorf("cannot act as user %s (effective IDs are %d:%d): the agent lacks CAP_SETUID/CAP_SETGID", u, uid, gid)
	}
	return prevGID, prevUID, nil
}

// setEffective sets the calling thread's effective UID or GID (nr is
// SYS_SETRESUID or SYS_SETRESGID), leaving the real and saved ones.
func setEffective(nr uintptr, id int) error {
	keep := ^uintptr(0) // -1: unchanged
	if _, _, errno := unix.RawSyscall(nr, keep, uintptr(id), keep); errno != 0 {
		return errno
	}
	return nil
}

// restoreFSIDs sets the effective UID, then GID, back (an ID of -1 was not
// changed) and checks that they took effect. The UID comes first: the
// saved UID lets the thread take it back, and with it the capability the
// GID needs.
func restoreFSIDs(uid, gid int) error {
	var errs []error
	if uid >= 0 {
		if err := setEffective(unix.SYS_SETRESUID, uid); err != nil {
			errs = append(errs, fmt.Errorf("set the effective UID %d: %w", uid, err))
		}
	}
	if gid >= 0 {
		if err := setEffective(unix.SYS_SETRESGID, gid); err != nil {
			errs = append(errs, fmt.Errorf("set the effective GID %d: %w", gid, err))
		}
	}
	curGID, curUID, err := currentFSIDs()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	if (uid >= 0 && curUID != uid) || (gid >= 0 && curGID != gid) {
		errs = append(errs, fmt.Errorf("effective IDs are %d:%d, want %d:%d", curUID, curGID, uid, gid))
	}
	return errors.Join(errs...)
}

// currentFSIDs reads the calling thread's effective GID and UID (raw
// getresgid/getresuid: this thread's, not the process's).
func currentFSIDs() (gid, uid int, err error) {
	var r, e, s uint32
	if _, _, errno := unix.RawSyscall(unix.SYS_GETRESGID, uintptr(unsafe.Pointer(&r)), uintptr(unsafe.Pointer(&e)), uintptr(unsafe.Pointer(&s))); errno != 0 {
		return -1, -1, fmt.Errorf("read the effective GID: %w", errno)
	}
	gid = int(e)
	if _, _, errno := unix.RawSyscall(unix.SYS_GETRESUID, uintptr(unsafe.Pointer(&r)), uintptr(unsafe.Pointer(&e)), uintptr(unsafe.Pointer(&s))); errno != 0 {
		return -1, -1, fmt.Errorf("read the effective UID: %w", errno)
	}
	return gid, int(e), nil
}
