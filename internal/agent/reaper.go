package agent

import (
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// exitStatus is how a child ended.
type exitStatus struct {
	code   int    // exit code, or -1 if killed by a signal
	signal string // protocol name of the signal that killed it
}

func statusFromWait(ws syscall.WaitStatus) exitStatus {
	switch {
	case ws.Exited():
		return exitStatus{code: ws.ExitStatus()}
	case ws.Signaled():
		return exitStatus{code: -1, signal: signalName(ws.Signal())}
	default:
		return exitStatus{code: -1, signal: "UNKNOWN"}
	}
}

// child is a process the agent started. exited is closed once status is set.
type child struct {
	proc   *os.Process
	pid    int
	exited chan struct{}
	status exitStatus
}

func (c *child) finish(st exitStatus) {
	c.status = st
	close(c.exited)
}

// waiter collects the exit statuses of the processes the agent starts. Two
// implementations exist: pidWaiter waits for each started pid only (for an
// agent embedded in a larger program, e.g. a test binary) and
// centralReaper reaps every child of the process (for the agent binary as
// PID 1 or child subreaper, where orphans are reparented to it).
type waiter interface {
	// spawn calls start, which forks exactly one child, and tracks it.
	spawn(start func() (*os.Process, error)) (*child, error)
	// signal sends sig to c unless c has already been reaped; then it
	// returns os.ErrProcessDone. It never signals a recycled pid.
	signal(c *child, sig syscall.Signal) error
	// signalGroup sends sig to c's process group if c has not been reaped.
	signalGroup(c *child, sig syscall.Signal) error
	// close stops the waiter's goroutines. Children still running are no
	// longer tracked.
	close()
}

// pidWaiter waits for each started child with its own wait (os.Process.Wait,
// a pidfd where the kernel has them) and never touches other children.
type pidWaiter struct {
	logger *slog.Logger
}

func (w *pidWaiter) spawn(start func() (*os.Process, error)) (*child, error) {
	p, err := start()
	if err != nil {
		return nil, err
	}
	c := &child{proc: p, pid: p.Pid, exited: make(chan struct{})}
	// This goroutine belongs to the child: it ends when the child exits.
	go func() {
		ps, err := p.Wait()
		if err != nil {
			w.logger.Error("waiting for process failed", "pid", c.pid, "err", err)
			c.finish(exitStatus{code: -1, signal: "UNKNOWN"})
			return
		}
		c.finish(statusFromWait(ps.Sys().(syscall.WaitStatus)))
	}()
	return c, nil
}

func (w *pidWaiter) signal(c *child, sig syscall.Signal) error {
	// os.Process serialises Signal with its own Wait, so a reaped pid is
	// never signalled.
	return c.proc.Signal(sig)
}

func (w *pidWaiter) signalGroup(c *child, sig syscall.Signal) error {
	select {
	case <-c.exited:
		return os.ErrProcessDone
	default:
	}
	return unix.Kill(-c.pid, sig)
}

func (w *pidWaiter) close() {}

// centralReaper reaps every child of this process with wait4(-1) when
// SIGCHLD arrives and hands the statuses of the children it started to
// their records; other statuses (orphans reparented to us) are discarded.
// Nothing else in the process may wait for children while it runs.
type centralReaper struct {
	logger *slog.Logger

	mu       sync.Mutex // held across fork+register, wait4+unregister and signal delivery
	children map[int]*child

	sigs chan os.Signal
	stop chan struct{}
	done chan struct{}
}

func newCentralReaper(logger *slog.Logger) *centralReaper {
	r := &centralReaper{
		logger:   logger,
		children: map[int]*child{},
		sigs:     make(chan os.Signal, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	signal.Notify(r.sigs, syscall.SIGCHLD)
	go r.loop()
	return r
}

func (r *centralReaper) loop() {
	defer close(r.done)
	r.reapAll() // children that exited before we listened
	for {
		select {
		case <-r.sigs:
			r.reapAll()
		case <-r.stop:
			signal.Stop(r.sigs)
			return
		}
	}
}

// reapAll reaps until no exited child is left. SIGCHLDs coalesce, so one
// signal may stand for many children.
func (r *centralReaper) reapAll() {
	for {
		r.mu.Lock()
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			r.mu.Unlock()
			continue
		}
		if err != nil || pid <= 0 {
			r.mu.Unlock()
			if err != nil && !errors.Is(err, unix.ECHILD) {
				r.logger.Error("wait4 failed", "err", err)
			}
			return
		}
		c := r.children[pid]
		delete(r.children, pid)
		r.mu.Unlock()
		st := statusFromWait(syscall.WaitStatus(ws))
		if c == nil {
			r.logger.Debug("reaped orphan", "pid", pid, "exit_code", st.code, "signal", st.signal)
			continue
		}
		c.proc.Release()
		c.finish(st)
	}
}

func (r *centralReaper) spawn(start func() (*os.Process, error)) (*child, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, err := start()
	if err != nil {
		return nil, err
	}
	c := &child{proc: p, pid: p.Pid, exited: make(chan struct{})}
	r.children[p.Pid] = c
	return c, nil
}

func (r *centralReaper) signal(c *child, sig syscall.Signal) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.children[c.pid] != c {
		return os.ErrProcessDone
	}
	return unix.Kill(c.pid, sig)
}

func (r *centralReaper) signalGroup(c *child, sig syscall.Signal) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.children[c.pid] != c {
		return os.ErrProcessDone
	}
	return unix.Kill(-c.pid, sig)
}

func (r *centralReaper) close() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	<-r.done
}
