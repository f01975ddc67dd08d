package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

// readChunk is the most output bytes one event carries.
const readChunk = 64 * 1024

// process is the record of one started process. Its pipe readers and its
// lifecycle goroutine belong to it; they end when the process has exited
// and its output is drained (or the drain timeout passed).
type process struct {
	id        model.ProcessID
	args      []string
	startedAt time.Time
	child     *child
	log       *eventLog
	pty       *os.File      // the terminal's controlling side, for PTY processes
	done      chan struct{} // closed once the exit is recorded

	stdinMu sync.Mutex // serialises stdin writers
	stdin   *os.File   // write end of stdin (or the PTY); nil once closed or if never open

	mu       sync.Mutex
	exited   bool
	status   exitStatus
	exitedAt time.Time
	timedOut bool
	timer    *time.Timer // the timeout, if any

	// releaseHold, if set, detaches the cursor that holds output back
	// until the first output stream (StartRequest.HoldOutput).
	releaseHold func()
}

func (p *process) snapshot() agentproto.ProcessStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := agentproto.ProcessStatus{
		ID:        p.id.String(),
		Pid:       p.child.pid,
		Args:      slices.Clone(p.args),
		Running:   !p.exited,
		PTY:       p.pty != nil,
		TimedOut:  p.timedOut,
		StartedAt: p.startedAt,
	}
	p.stdinMu.Lock()
	st.Stdin = p.stdin != nil && !p.exited
	p.stdinMu.Unlock()
	if p.exited {
		code := p.status.code
		at := p.exitedAt
		st.ExitCode = &code
		st.Signal = p.status.signal
		st.ExitedAt = &at
	}
	return st
}

func (p *process) hasExited() (bool, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited, p.exitedAt
}

// startError is a failure to start a process, with the protocol error code
// it maps to.
type startError struct {
	status int
	code   string
	err    error
}

func (e *startError) Error() string { return e.err.Error() }
func (e *startError) Unwrap() error { return e.err }

func invalidRequest(format string, args ...any) *startError {
	return &startError{status: 400, code: agentproto.CodeInvalidRequest, err: fmt.Errorf(format, args...)}
}

func execFailed(err error) *startError {
	return &startError{status: 400, code: agentproto.CodeExecFailed, err: err}
}

// startSpec is a validated StartRequest.
type startSpec struct {
	id      model.ProcessID
	args    []string
	env     []string // request env only
	cwd     string
	stdin   bool
	hold    bool
	pty     *agentproto.WindowSize
	user    *agentproto.User
	timeout time.Duration
}

func parseStartRequest(req agentproto.StartRequest) (startSpec, error) {
	id, err := model.ParseProcessID(req.ID)
	if err != nil {
		return startSpec{}, invalidRequest("%v", err)
	}
	if len(req.Args) == 0 || req.Args[0] == "" {
		return startSpec{}, invalidRequest("args must not be empty")
	}
	for _, a := range req.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return startSpec{}, invalidRequest("args must not contain NUL bytes")
		}
	}
	for _, kv := range req.Env {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" || strings.IndexByte(kv, 0) >= 0 {
			return startSpec{}, invalidRequest("env entry %q: want NAME=value without NUL bytes", textclip.Bytes(kv, maxEcho))
		}
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = "/"
	}
	if !filepath.IsAbs(cwd) || strings.IndexByte(cwd, 0) >= 0 {
		return startSpec{}, invalidRequest("cwd %q must be an absolute path", textclip.Bytes(cwd, maxEcho))
	}
	if req.TimeoutMillis < 0 {
		return startSpec{}, invalidRequest("timeout_ms must not be negative")
	}
	if req.PTY != nil && (req.PTY.Rows == 0 || req.PTY.Cols == 0) {
		return startSpec{}, invalidRequest("pty rows and cols must be positive")
	}
	return startSpec{
		id: id, args: slices.Clone(req.Args), env: slices.Clone(req.Env), cwd: cwd,
		stdin: req.Stdin, hold: req.HoldOutput, pty: req.PTY, user: req.User,
		timeout: time.Duration(req.TimeoutMillis) * time.Millisecond,
	}, nil
}

// procIO holds the agent's ends of a started process's standard streams.
type procIO struct {
	stdout *os.File // read end of stdout, or the PTY
	stderr *os.File // read end of stderr; nil for a PTY process
	stdin  *os.File // write end of stdin (a dup of the PTY for PTY processes); nil if not kept open
	pty    *os.File // the PTY, for resizes; nil without one
}

func (io *procIO) closeAll() {
	for _, f := range []*os.File{io.stdout, io.stderr, io.stdin} {
		if f != nil {
			f.Close()
		}
	}
}

func internalErr(format string, args ...any) *startError {
	return &startError{status: 500, code: agentproto.CodeInternal, err: fmt.Errorf(format, args...)}
}

// startProcess forks the process described by spec. On success the process
// runs and the caller owns the returned ends of its streams.
func (s *Server) startProcess(spec startSpec) (*child, procIO, error) {
	env := mergeEnv(s.baseEnv(), spec.env)
	if spec.pty != nil && envValue(env, "TERM") == "" {
		env = append(env, "TERM=xterm-256color")
	}
	fi, err := os.Stat(spec.cwd)
	if err != nil {
		return nil, procIO{}, execFailed(fmt.Errorf("cwd: %w", err))
	}
	if !fi.IsDir() {
		return nil, procIO{}, execFailed(fmt.Errorf("cwd %s: not a directory", spec.cwd))
	}
	path, err := lookPath(spec.args[0], envValue(env, "PATH"), spec.cwd)
	if err != nil {
		return nil, procIO{}, execFailed(err)
	}

	var childFiles []*os.File // parent's copies of the child's ends, closed below
	defer func() {
		for _, f := range childFiles {
			f.Close()
		}
	}()
	var pio procIO
	ok := false
	defer func() {
		if !ok {
			pio.closeAll()
		}
	}()
	// Own process group (or session, with a terminal): signals aimed at
	// the agent's group do not reach workloads, and shutdown can kill a
	// process together with its children.
	sys := &syscall.SysProcAttr{Setpgid: true}
	var stdio []*os.File
	if spec.pty != nil {
		ptmx, tty, err := pty.Open()
		if err != nil {
			return nil, procIO{}, internalErr("open a terminal: %w", err)
		}
		childFiles = append(childFiles, tty)
		pio.stdout, pio.pty = ptmx, ptmx
		if err := pty.Setsize(ptmx, &pty.Winsize{Rows: spec.pty.Rows, Cols: spec.pty.Cols}); err != nil {
			return nil, procIO{}, internalErr("set terminal size: %w", err)
		}
		if pio.stdin, err = dupFile(ptmx); err != nil {
			return nil, procIO{}, internalErr("dup terminal: %w", err)
		}
		stdio = []*os.File{tty, tty, tty}
		sys = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	} else {
		stdinR, stdinW, err := os.Pipe()
		if err != nil {
			return nil, procIO{}, internalErr("pipe: %w", err)
		}
		childFiles = append(childFiles, stdinR)
		if spec.stdin {
			pio.stdin = stdinW
		} else {
			stdinW.Close() // reads see EOF
		}
		stdoutR, stdoutW, err := os.Pipe()
		if err != nil {
			return nil, procIO{}, internalErr("pipe: %w", err)
		}
		childFiles = append(childFiles, stdoutW)
		pio.stdout = stdoutR
		stderrR, stderrW, err := os.Pipe()
		if err != nil {
			return nil, procIO{}, internalErr("pipe: %w", err)
		}
		childFiles = append(childFiles, stderrW)
		pio.stderr = stderrR
		stdio = []*os.File{stdinR, stdoutW, stderrW}
	}
	attr := &os.ProcAttr{Dir: spec.cwd, Env: env, Files: stdio, Sys: sys}
	execPath, argv := path, spec.args
	var statusR *os.File
	useHelper := func() error {
		// The helper forks outside the cgroup and then joins it, which
		// pids.max does not refuse: it starts only while there is room,
		// and checks again once joined.
		if err := s.cgroup.checkRoom(); err != nil {
			return execFailed(fmt.Errorf("start %s: %w", spec.args[0], err))
		}
		r, w, err := os.Pipe()
		if err != nil {
			return internalErr("pipe: %w", err)
		}
		statusR = r
		childFiles = append(childFiles, w)
		attr.Files = append(attr.Files, w, s.cgroup.procs) // spawnStatusFD, then the cgroup's descriptors
		cgArg := spawnCgroupArg
		if s.cgroup.pidsCurrent != nil {
			attr.Files = append(attr.Files, s.cgroup.pidsCurrent, s.cgroup.pidsMax)
			cgArg = spawnCgroupCheckArg
		}
		execPath = s.spawnHelper
		argv = append([]string{s.spawnHelper}, spawnArgs(cgArg, path, spec.user, spec.args)...)
		sys.Credential = nil // the helper drops to the user after joining
		return nil
	}
	defer func() {
		if statusR != nil {
			statusR.Close()
		}
	}()
	start := func() (*os.Process, error) { return os.StartProcess(execPath, argv, attr) }
	mode := ""
	if s.cgroup != nil {
		mode = s.cgroup.current()
	}
	switch {
	case mode == spawnViaHelper:
		if err := useHelper(); err != nil {
			return nil, procIO{}, err
		}
	case mode != "":
		if spec.user != nil { // no supplementary groups, as the helper
			sys.Credential = &syscall.Credential{Uid: spec.user.UID, Gid: spec.user.GID}
		}
		start = func() (*os.Process, error) { return s.cgroup.start(mode, path, spec.args, attr) }
	case spec.user != nil:
		sys.Credential = &syscall.Credential{Uid: spec.user.UID, Gid: spec.user.GID, NoSetGroups: true}
	}
	c, err := s.waiter.spawn(start)
	if errors.Is(err, errCgroupFull) {
		// The workload's limit counts the host's processes too.
		return nil, procIO{}, execFailed(fmt.Errorf("start %s: %w (%w)", spec.args[0], ErrPidsLimit, err))
	}
	if errors.Is(err, errRefused) {
		direct := err
		if err := useHelper(); err != nil {
			return nil, procIO{}, err
		}
		c, err = s.waiter.spawn(func() (*os.Process, error) { return os.StartProcess(execPath, argv, attr) })
		if err == nil {
			s.cgroup.fallBack(mode, direct)
		}
	}
	if err != nil {
		return nil, procIO{}, execFailed(fmt.Errorf("start %s: %w", spec.args[0], err))
	}
	for _, f := range childFiles {
		f.Close()
	}
	childFiles = nil
	if statusR != nil {
		msg, err := io.ReadAll(io.LimitReader(statusR, 64*1024))
		if err != nil || len(msg) != 0 {
			<-c.exited // the helper exits right after reporting
			if err != nil {
				return nil, procIO{}, internalErr("spawn helper: %w", err)
			}
			if m, found := strings.CutPrefix(string(msg), spawnFailExec); found {
				return nil, procIO{}, execFailed(fmt.Errorf("start %s: %s", spec.args[0], m))
			}
			if m, found := strings.CutPrefix(string(msg), spawnFailPids); found {
				return nil, procIO{}, execFailed(fmt.Errorf("start %s: %s", spec.args[0], m))
			}
			return nil, procIO{}, internalErr("spawn helper: %s", msg)
		}
	}
	s.setWorkloadOOMScore(c.pid, spec.user)
	ok = true
	return c, pio, nil
}

func dupFile(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// run owns the process's output: it reads the output into the event log
// (waiting while attached readers lag: back-pressure), waits for the exit,
// drains the output (for at most drainTimeout once the process is gone: a
// background child may hold it open) and appends the exit event.
func (s *Server) run(p *process, pio procIO) {
	var readers sync.WaitGroup
	read := func(f *os.File, typ string) {
		defer readers.Done()
		buf := make([]byte, readChunk)
		for {
			n, err := f.Read(buf)
			if n > 0 {
				p.log.append(agentproto.Event{Type: typ, Data: slices.Clone(buf[:n])}, s.closingCh)
			}
			if err != nil {
				return
			}
		}
	}
	readers.Add(1)
	go read(pio.stdout, agentproto.EventStdout)
	if pio.stderr != nil {
		readers.Add(1)
		go read(pio.stderr, agentproto.EventStderr)
	}
	drained := make(chan struct{})
	go func() {
		readers.Wait()
		close(drained)
	}()

	<-p.child.exited
	timer := time.NewTimer(s.opts.DrainTimeout)
	select {
	case <-drained:
	case <-timer.C:
		if p.log.cursorCount() == 0 {
			s.logger.Warn("process exited but its output is still open (a background child holds it); closing it",
				"id", p.id, "pid", p.child.pid, "after", s.opts.DrainTimeout)
		}
	}
	timer.Stop()
	pio.stdout.Close() // unblocks the readers if they are still reading
	if pio.stderr != nil {
		pio.stderr.Close()
	}
	<-drained
	p.closeStdin()

	st := p.child.status
	code := st.code
	now := time.Now()
	p.mu.Lock()
	p.exited, p.status, p.exitedAt = true, st, now
	timedOut := p.timedOut
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Unlock()
	close(p.done)
	p.log.append(agentproto.Event{Type: agentproto.EventExit, ExitCode: &code, Signal: st.signal, TimedOut: timedOut}, s.closingCh)
	s.logger.Info("process exited", "id", p.id, "pid", p.child.pid, "exit_code", st.code, "signal", st.signal, "timed_out", timedOut)
	s.processExited(p)
}

// closeStdin closes the process's stdin (for a PTY process: the agent's
// dup of the terminal). Closing twice does nothing.
func (p *process) closeStdin() {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdin != nil {
		p.stdin.Close()
		p.stdin = nil
	}
}

// Errors of writeStdin.
var (
	errNoStdin   = errors.New("no open stdin")
	errStdinGone = errors.New("stdin reader gone")
)

// writeStdin copies r into the process's stdin, then closes stdin if
// closeAfter. Writers are serialised. It returns errNoStdin if stdin is
// not open, errStdinGone if the process no longer reads it (EPIPE), or the
// error of reading r.
func (p *process) writeStdin(r io.Reader, closeAfter bool) (int64, error) {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdin == nil {
		return 0, errNoStdin
	}
	n, err := io.Copy(stdinWriter{p.stdin}, r)
	if err != nil {
		if errors.Is(err, errStdinGone) {
			p.stdin.Close()
			p.stdin = nil
		}
		return n, err
	}
	if closeAfter {
		if p.pty != nil {
			// A terminal has no half-close: send end-of-file (^D) as a
			// terminal in canonical mode understands it.
			if _, err := p.stdin.Write([]byte{4}); err != nil {
				return n, errStdinGone
			}
			return n, nil
		}
		p.stdin.Close()
		p.stdin = nil
	}
	return n, nil
}

// stdinWriter maps write errors to errStdinGone (and hides ReadFrom, so
// io.Copy's errors from the source stay distinguishable).
type stdinWriter struct{ f *os.File }

func (w stdinWriter) Write(b []byte) (int, error) {
	n, err := w.f.Write(b)
	if err != nil {
		return n, fmt.Errorf("%w: %w", errStdinGone, err)
	}
	return n, nil
}

// maxEcho is how many bytes of a caller's value an error message quotes (textclip.Bytes).
const maxEcho = 80
