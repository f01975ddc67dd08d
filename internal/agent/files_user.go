package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/agentproto"
)

// File operations as a user (agentproto.QueryFileUser). The agent runs as
// root but, in a sandbox, without CAP_DAC_OVERRIDE or CAP_CHOWN, so it can
// neither enter a user's 0700 home nor give files away. Instead a request
// that names a user runs on one locked OS thread whose filesystem UID and
// GID (setfsuid/setfsgid, per thread, needing CAP_SETUID/CAP_SETGID) are
// that user's: the kernel checks permissions as the user and files created
// belong to it. Supplementary groups stay the agent's own; only the primary
// group is the user's.
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

// runAs runs fn on a locked OS thread whose fsuid and fsgid are u's, and
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

// setFSIDs sets the calling thread's fsgid, then fsuid, to u's and checks
// that both took effect (setfsuid/setfsgid report the previous ID even
// when they fail). It returns the previous IDs, to restore in every case.
func setFSIDs(u agentproto.FileUser) (prevGID, prevUID int, err error) {
	prevGID, err = unix.SetfsgidRetGid(int(u.GID))
	if err != nil {
		return -1, -1, fmt.Errorf("setfsgid %d: %w", u.GID, err)
	}
	prevUID, err = unix.SetfsuidRetUid(int(u.UID))
	if err != nil {
		return prevGID, -1, fmt.Errorf("setfsuid %d: %w", u.UID, err)
	}
	gid, uid, err := currentFSIDs()
	if err != nil {
		return prevGID, prevUID, err
	}
	if gid != int(u.GID) || uid != int(u.UID) {
		return prevGID, prevUID, fmt.Errorf("cannot act as user %s (filesystem IDs are %d:%d): the agent lacks CAP_SETUID/CAP_SETGID", u, uid, gid)
	}
	return prevGID, prevUID, nil
}

// restoreFSIDs sets fsuid, then fsgid, back (an ID of -1 was not changed)
// and checks that they took effect.
func restoreFSIDs(uid, gid int) error {
	var errs []error
	if uid >= 0 {
		if _, err := unix.SetfsuidRetUid(uid); err != nil {
			errs = append(errs, fmt.Errorf("setfsuid %d: %w", uid, err))
		}
	}
	if gid >= 0 {
		if _, err := unix.SetfsgidRetGid(gid); err != nil {
			errs = append(errs, fmt.Errorf("setfsgid %d: %w", gid, err))
		}
	}
	curGID, curUID, err := currentFSIDs()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	if (uid >= 0 && curUID != uid) || (gid >= 0 && curGID != gid) {
		errs = append(errs, fmt.Errorf("filesystem IDs are %d:%d, want %d:%d", curUID, curGID, uid, gid))
	}
	return errors.Join(errs...)
}

// currentFSIDs reads the calling thread's fsgid and fsuid: setfs*id(-1)
// changes nothing (-1 is no valid ID) and returns the current one.
func currentFSIDs() (gid, uid int, err error) {
	if gid, err = unix.SetfsgidRetGid(-1); err != nil {
		return -1, -1, fmt.Errorf("read fsgid: %w", err)
	}
	if uid, err = unix.SetfsuidRetUid(-1); err != nil {
		return -1, -1, fmt.Errorf("read fsuid: %w", err)
	}
	return gid, uid, nil
}
