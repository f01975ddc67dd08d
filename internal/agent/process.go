package agent

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/model"
)

// readChunk is the most output bytes one event carries.
const readChunk = 32 * 1024

// process is the record of one started process. Its pipe readers and its
// lifecycle goroutine belong to it; they end when the process has exited
// and its output is drained (or the drain timeout passed).
type process struct {
	id        model.ProcessID
	args      []string
	startedAt time.Time
	child     *child
	log       *eventLog

	mu       sync.Mutex
	exited   bool
	status   exitStatus
	exitedAt time.Time
}

func (p *process) snapshot() agentproto.ProcessStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := agentproto.ProcessStatus{
		ID:        p.id.String(),
		Pid:       p.child.pid,
		Args:      slices.Clone(p.args),
		Running:   !p.exited,
		StartedAt: p.startedAt,
	}
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
	id   model.ProcessID
	args []string
	env  []string // request env only
	cwd  string
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
			return startSpec{}, invalidRequest("env entry %q: want NAME=value without NUL bytes", truncateMsg(kv))
		}
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = "/"
	}
	if !filepath.IsAbs(cwd) || strings.IndexByte(cwd, 0) >= 0 {
		return startSpec{}, invalidRequest("cwd %q must be an absolute path", truncateMsg(cwd))
	}
	return startSpec{id: id, args: slices.Clone(req.Args), env: slices.Clone(req.Env), cwd: cwd}, nil
}

func truncateMsg(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// startProcess forks the process described by spec. On success the process
// runs, its pipes are returned (read ends) and the caller owns them.
func (s *Server) startProcess(spec startSpec) (*child, *os.File, *os.File, error) {
	env := mergeEnv(s.env, spec.env)
	fi, err := os.Stat(spec.cwd)
	if err != nil {
		return nil, nil, nil, execFailed(fmt.Errorf("cwd: %w", err))
	}
	if !fi.IsDir() {
		return nil, nil, nil, execFailed(fmt.Errorf("cwd %s: not a directory", spec.cwd))
	}
	path, err := lookPath(spec.args[0], envValue(env, "PATH"), spec.cwd)
	if err != nil {
		return nil, nil, nil, execFailed(err)
	}

	var files []*os.File // parent's copies of the child's ends, closed below
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err != nil {
			return nil, nil, &startError{status: 500, code: agentproto.CodeInternal, err: fmt.Errorf("pipe: %w", err)}
		}
		return r, w, nil
	}
	// stdin: a pipe whose write end is closed, so reads see EOF.
	stdinR, stdinW, err := pipe()
	if err != nil {
		return nil, nil, nil, err
	}
	stdinW.Close()
	files = append(files, stdinR)
	stdoutR, stdoutW, err := pipe()
	if err != nil {
		return nil, nil, nil, err
	}
	files = append(files, stdoutW)
	stderrR, stderrW, err := pipe()
	if err != nil {
		stdoutR.Close()
		return nil, nil, nil, err
	}
	files = append(files, stderrW)
	closeReads := func() { stdoutR.Close(); stderrR.Close() }

	attr := &os.ProcAttr{
		Dir:   spec.cwd,
		Env:   env,
		Files: []*os.File{stdinR, stdoutW, stderrW},
		// Own process group: signals aimed at the agent's group (a
		// terminal's ^C in tests) do not reach workloads, and shutdown can
		// kill a process together with its children.
		Sys: &syscall.SysProcAttr{Setpgid: true},
	}
	execPath, argv := path, spec.args
	var statusR *os.File
	if s.cgroupDir != "" {
		r, w, err := pipe()
		if err != nil {
			closeReads()
			return nil, nil, nil, err
		}
		statusR = r
		defer statusR.Close()
		files = append(files, w)
		attr.Files = append(attr.Files, w)
		execPath = s.spawnHelper
		argv = append([]string{s.spawnHelper}, spawnArgs(s.cgroupDir, path, spec.args)...)
	}
	c, err := s.waiter.spawn(func() (*os.Process, error) { return os.StartProcess(execPath, argv, attr) })
	if err != nil {
		closeReads()
		return nil, nil, nil, execFailed(fmt.Errorf("start %s: %w", spec.args[0], err))
	}
	for _, f := range files {
		f.Close()
	}
	files = nil
	if statusR != nil {
		msg, err := io.ReadAll(io.LimitReader(statusR, 64*1024))
		if err == nil && len(msg) == 0 {
			return c, stdoutR, stderrR, nil
		}
		<-c.exited // the helper exits right after reporting
		closeReads()
		if err != nil {
			return nil, nil, nil, &startError{status: 500, code: agentproto.CodeInternal, err: fmt.Errorf("spawn helper: %w", err)}
		}
		if m, ok := strings.CutPrefix(string(msg), spawnFailExec); ok {
			return nil, nil, nil, execFailed(fmt.Errorf("start %s: %s", spec.args[0], m))
		}
		return nil, nil, nil, &startError{status: 500, code: agentproto.CodeInternal, err: fmt.Errorf("spawn helper: %s", msg)}
	}
	return c, stdoutR, stderrR, nil
}

// run owns the process's output: it reads both pipes into the event log,
// waits for the exit, drains the pipes (for at most drainTimeout once the
// process is gone: a background child may hold them open) and appends the
// exit event.
func (s *Server) run(p *process, stdout, stderr *os.File) {
	var readers sync.WaitGroup
	for _, src := range []struct {
		f   *os.File
		typ string
	}{{stdout, agentproto.EventStdout}, {stderr, agentproto.EventStderr}} {
		readers.Add(1)
		go func() {
			defer readers.Done()
			buf := make([]byte, readChunk)
			for {
				n, err := src.f.Read(buf)
				if n > 0 {
					p.log.append(agentproto.Event{Type: src.typ, Data: slices.Clone(buf[:n])})
				}
				if err != nil {
					return
				}
			}
		}()
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
		s.logger.Warn("process exited but its output is still open (a background child holds it); closing it",
			"id", p.id, "pid", p.child.pid, "after", s.opts.DrainTimeout)
	}
	timer.Stop()
	stdout.Close() // unblocks the readers if they are still reading
	stderr.Close()
	<-drained

	st := p.child.status
	code := st.code
	now := time.Now()
	p.mu.Lock()
	p.exited, p.status, p.exitedAt = true, st, now
	p.mu.Unlock()
	p.log.append(agentproto.Event{Type: agentproto.EventExit, ExitCode: &code, Signal: st.signal})
	s.logger.Info("process exited", "id", p.id, "pid", p.child.pid, "exit_code", st.code, "signal", st.signal)
	s.processExited(p)
}
