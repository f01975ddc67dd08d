// Package agent is the guest side of Airlock's host↔guest protocol (see
// package agentproto): a Server that starts processes inside the sandbox,
// buffers their output as numbered events and serves it over HTTP/2 on any
// byte stream. The airlock-agent binary wraps it; tests embed it.
package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http2"

	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/model"
)

// Defaults of Options.
const (
	DefaultBufferBytes       = 4 << 20
	DefaultMaxExited         = 1000
	DefaultExitedTTL         = 10 * time.Minute
	DefaultExitedBufferBytes = 64 << 20
	DefaultDrainTimeout      = 2 * time.Second
	DefaultSpawnHelper       = "/proc/self/exe"
)

// maxConcurrentStreams is how many requests (e.g. output streams) one
// connection may carry at once.
const maxConcurrentStreams = 1000

// Options configure a Server. Zero values mean the defaults above.
type Options struct {
	// Version is reported by GET /v1/info ("dev" if empty).
	Version string
	// Logger receives the agent's logs (discarded if nil).
	Logger *slog.Logger
	// Env is the base environment of every process (the sandbox's
	// environment); nil means os.Environ(). Request env entries win.
	Env []string
	// BufferBytes bounds each process's buffered output events.
	BufferBytes int
	// MaxExited and ExitedTTL bound how many exited process records are
	// kept (so a reconnecting host can still read the exit) and for how
	// long; the oldest go first. ExitedBufferBytes bounds the output that
	// exited records keep in total: beyond it, the oldest records keep only
	// their exit event.
	MaxExited         int
	ExitedTTL         time.Duration
	ExitedBufferBytes int
	// DrainTimeout is how long, after a process exited, its output pipes
	// may stay open (held by a background child) before they are closed
	// and the exit event is sent.
	DrainTimeout time.Duration

	// ReapAllChildren selects the central reaper: one wait4(-1) loop on
	// SIGCHLD reaps every child of this OS process, including orphans
	// reparented to it, and hands the statuses of started processes to
	// their records. Use it only when the agent owns the whole OS process
	// (PID 1 or a child subreaper): nothing else may wait for children
	// then, not even exec.Cmd.Wait. When false, the Server waits for the
	// pids it started and nothing else (for embedding, e.g. in tests).
	ReapAllChildren bool

	// CgroupDir, if set, is a cgroup directory that every process joins
	// before it executes (see SetupPidsCgroup and SpawnCommand).
	CgroupDir string
	// SpawnHelper is the binary that implements SpawnCommand; ""
	// means /proc/self/exe. Only used with CgroupDir.
	SpawnHelper string

	// FilesRoot is the directory the /v1/files endpoints treat as "/"
	// ("" means DefaultFilesRoot, "/"); tests embed an agent on a temp dir.
	FilesRoot string
}

// Server runs processes for the host and serves the agent protocol.
type Server struct {
	opts        Options
	logger      *slog.Logger
	env         []string
	cgroupDir   string
	spawnHelper string
	waiter      waiter
	handler     http.Handler
	h2          *http2.Server
	startedAt   time.Time

	ctx    context.Context // cancelled when shutdown has finished with the processes
	cancel context.CancelFunc

	mu          sync.Mutex
	closing     bool // no new processes
	stopped     bool // no new background goroutines
	procs       map[model.ProcessID]*process
	starting    map[model.ProcessID]struct{}
	exited      []*process // in exit order
	trimmed     int        // exited[:trimmed] have had their output dropped
	exitedBytes int        // cost of the events kept by exited records

	streams     atomic.Int64   // output streams being served
	procWG      sync.WaitGroup // one per process's run goroutine
	bgWG        sync.WaitGroup // janitor, connections
	janitorStop chan struct{}
	closeOnce   sync.Once
}

// New returns a running Server (it holds no listener yet: see Serve,
// ServeConn and Handler). Call Shutdown or Close to stop it.
func New(opts Options) (*Server, error) {
	opts.Version = cmp.Or(opts.Version, "dev")
	opts.BufferBytes = cmp.Or(opts.BufferBytes, DefaultBufferBytes)
	opts.MaxExited = cmp.Or(opts.MaxExited, DefaultMaxExited)
	opts.ExitedTTL = cmp.Or(opts.ExitedTTL, DefaultExitedTTL)
	opts.ExitedBufferBytes = cmp.Or(opts.ExitedBufferBytes, DefaultExitedBufferBytes)
	opts.DrainTimeout = cmp.Or(opts.DrainTimeout, DefaultDrainTimeout)
	if opts.BufferBytes < 0 || opts.MaxExited < 0 || opts.ExitedTTL < 0 || opts.ExitedBufferBytes < 0 || opts.DrainTimeout < 0 {
		return nil, errors.New("agent: negative limit in Options")
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		opts:        opts,
		logger:      logger,
		env:         opts.Env,
		cgroupDir:   opts.CgroupDir,
		spawnHelper: cmp.Or(opts.SpawnHelper, DefaultSpawnHelper),
		h2:          &http2.Server{MaxConcurrentStreams: maxConcurrentStreams},
		startedAt:   time.Now(),
		procs:       map[model.ProcessID]*process{},
		starting:    map[model.ProcessID]struct{}{},
		janitorStop: make(chan struct{}),
	}
	if s.env == nil {
		s.env = os.Environ()
	}
	if s.cgroupDir != "" {
		if _, err := os.Stat(s.spawnHelper); err != nil {
			return nil, fmt.Errorf("agent: spawn helper: %w", err)
		}
	}
	if opts.ReapAllChildren {
		s.waiter = newCentralReaper(logger)
	} else {
		s.waiter = &pidWaiter{logger: logger}
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.handler = s.routes()
	s.bgWG.Add(1)
	go s.janitor()
	return s, nil
}

// Handler returns the HTTP handler of the agent protocol. Serve and
// ServeConn use it; tests may mount it elsewhere.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve accepts connections on ln and serves each as its own HTTP/2
// (prior knowledge) connection until ctx ends or the Server shuts down; it
// then closes ln and returns nil. Connections that are open keep being
// served until they close, ctx ends or the Server shuts down.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopA := context.AfterFunc(ctx, func() { ln.Close() })
	defer stopA()
	stopB := context.AfterFunc(s.ctx, cancel)
	defer stopB()
	var backoff time.Duration
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("agent: listener closed: %w", err)
			}
			// e.g. EMFILE: wait a little rather than spin.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.logger.Warn("accept failed", "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		backoff = 0
		if !s.track() {
			conn.Close()
			return nil
		}
		go func() {
			defer s.bgWG.Done()
			s.ServeConn(ctx, conn)
		}()
	}
}

// ServeConn serves one byte stream as an HTTP/2 connection (the client
// speaks first, with the HTTP/2 preface) until the peer closes it, ctx ends
// or the Server shuts down. It closes conn before returning.
func (s *Server) ServeConn(ctx context.Context, conn net.Conn) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopA := context.AfterFunc(ctx, func() { conn.Close() })
	defer stopA()
	stopB := context.AfterFunc(s.ctx, cancel)
	defer stopB()
	s.logger.Debug("connection opened", "remote", conn.RemoteAddr())
	s.h2.ServeConn(conn, &http2.ServeConnOpts{
		Context:    ctx,
		Handler:    s.handler,
		BaseConfig: &http.Server{ErrorLog: slog.NewLogLogger(s.logger.Handler(), slog.LevelDebug)},
	})
	conn.Close()
	s.logger.Debug("connection closed", "remote", conn.RemoteAddr())
}

// Shutdown stops the Server: new starts are refused, every running process
// (with its process group) gets SIGTERM, and whatever still runs when ctx
// ends gets SIGKILL. Readers receive the exit events; then open output
// streams are aborted, connections closed and background goroutines
// stopped. Calling it again does nothing.
func (s *Server) Shutdown(ctx context.Context) error {
	var err error
	s.closeOnce.Do(func() { err = s.shutdown(ctx) })
	return err
}

// Close is Shutdown without a grace period: running processes are killed.
func (s *Server) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return s.Shutdown(ctx)
}

func (s *Server) shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()

	done := make(chan struct{})
	go func() {
		s.procWG.Wait()
		close(done)
	}()
	if n := s.signalAll(syscall.SIGTERM); n > 0 {
		s.logger.Info("stopping processes", "count", n)
	}
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		if n := s.signalAll(syscall.SIGKILL); n > 0 {
			s.logger.Warn("killing processes that did not stop", "count", n)
		}
		select {
		case <-done:
		case <-time.After(s.opts.DrainTimeout + 5*time.Second):
			err = errors.New("agent: processes did not exit after SIGKILL")
			s.logger.Error("processes did not exit after SIGKILL")
		}
	}
	s.waitStreams(streamGrace)
	s.cancel()
	s.mu.Lock()
	s.stopped = true // no bgWG.Add after this
	s.mu.Unlock()
	close(s.janitorStop)
	s.bgWG.Wait()
	if err == nil {
		s.waiter.close()
	}
	return err
}

// track counts one more background goroutine, unless the Server stopped.
func (s *Server) track() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return false
	}
	s.bgWG.Add(1)
	return true
}

// streamGrace bounds how long Shutdown waits for output streams to deliver
// the exit events of the processes it stopped.
const streamGrace = 2 * time.Second

// waitStreams waits until no output stream is being served, or d passed.
// Once every process has exited, streams end as soon as their reader has
// taken the exit event.
func (s *Server) waitStreams(d time.Duration) {
	deadline := time.Now().Add(d)
	for s.streams.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}

// signalAll sends sig to the process group of every running process and
// returns how many it signalled.
func (s *Server) signalAll(sig syscall.Signal) int {
	s.mu.Lock()
	procs := make([]*process, 0, len(s.procs))
	for _, p := range s.procs {
		procs = append(procs, p)
	}
	s.mu.Unlock()
	n := 0
	for _, p := range procs {
		if err := s.waiter.signalGroup(p.child, sig); err == nil {
			n++
		}
	}
	return n
}

// janitor drops exited records past their TTL.
func (s *Server) janitor() {
	defer s.bgWG.Done()
	t := time.NewTicker(min(max(s.opts.ExitedTTL/4, time.Second), time.Minute))
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.mu.Lock()
			s.pruneLocked(time.Now())
			s.mu.Unlock()
		case <-s.janitorStop:
			return
		}
	}
}

// processExited records that p has exited and prunes old records.
func (s *Server) processExited(p *process) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.exited = append(s.exited, p)
	s.exitedBytes += p.log.size()
	s.pruneLocked(time.Now())
}

// pruneLocked forgets exited records beyond MaxExited or older than
// ExitedTTL, oldest first. While the output kept by exited records exceeds
// ExitedBufferBytes, it drops the output of the oldest ones (all but the
// newest record), keeping their exit events: a reconnecting host can still
// learn how a process ended.
func (s *Server) pruneLocked(now time.Time) {
	n := 0
	for n < len(s.exited) {
		p := s.exited[n]
		_, at := p.hasExited()
		if len(s.exited)-n <= s.opts.MaxExited && now.Sub(at) < s.opts.ExitedTTL {
			break
		}
		s.exitedBytes -= p.log.size()
		delete(s.procs, p.id)
		n++
	}
	if n > 0 {
		clear(s.exited[:n])
		s.exited = s.exited[n:]
		s.trimmed = max(0, s.trimmed-n)
	}
	for s.exitedBytes > s.opts.ExitedBufferBytes && s.trimmed < len(s.exited)-1 {
		s.exitedBytes -= s.exited[s.trimmed].log.trimToLast()
		s.trimmed++
	}
}

// start validates req and starts the process.
func (s *Server) start(req agentproto.StartRequest) (agentproto.ProcessStatus, error) {
	spec, err := parseStartRequest(req)
	if err != nil {
		return agentproto.ProcessStatus{}, err
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return agentproto.ProcessStatus{}, &startError{status: 503, code: agentproto.CodeShuttingDown, err: errors.New("the agent is shutting down")}
	}
	_, running := s.procs[spec.id]
	_, starting := s.starting[spec.id]
	if running || starting {
		s.mu.Unlock()
		return agentproto.ProcessStatus{}, &startError{status: 409, code: agentproto.CodeExists, err: fmt.Errorf("process %s exists", spec.id)}
	}
	s.starting[spec.id] = struct{}{}
	s.procWG.Add(1) // before unlocking, so Shutdown waits for this start
	s.mu.Unlock()

	c, stdout, stderr, err := s.startProcess(spec)

	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.starting, spec.id)
	if err != nil {
		s.procWG.Done()
		s.logger.Info("process start failed", "id", spec.id, "args", spec.args, "err", err)
		return agentproto.ProcessStatus{}, err
	}
	p := &process{
		id:        spec.id,
		args:      spec.args,
		startedAt: time.Now(),
		child:     c,
		log:       newEventLog(s.opts.BufferBytes),
	}
	s.procs[spec.id] = p
	if s.closing {
		// Shutdown began while we forked: it may have signalled the others already.
		_ = s.waiter.signalGroup(c, syscall.SIGKILL)
	}
	s.logger.Info("process started", "id", spec.id, "pid", c.pid, "args", spec.args, "cwd", spec.cwd)
	go func() {
		defer s.procWG.Done()
		s.run(p, stdout, stderr)
	}()
	return p.snapshot(), nil
}

func (s *Server) lookup(id model.ProcessID) *process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[id]
}

func (s *Server) list() []agentproto.ProcessStatus {
	s.mu.Lock()
	procs := make([]*process, 0, len(s.procs))
	for _, p := range s.procs {
		procs = append(procs, p)
	}
	s.mu.Unlock()
	out := make([]agentproto.ProcessStatus, 0, len(procs))
	for _, p := range procs {
		out = append(out, p.snapshot())
	}
	slices.SortFunc(out, func(a, b agentproto.ProcessStatus) int {
		return cmp.Or(a.StartedAt.Compare(b.StartedAt), cmp.Compare(a.ID, b.ID))
	})
	return out
}

func (s *Server) info() agentproto.Info {
	return agentproto.Info{
		AgentVersion: s.opts.Version,
		Protocol:     agentproto.ProtocolVersion,
		Pid:          os.Getpid(),
		StartedAt:    s.startedAt,
	}
}
