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

	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/retry"
)

// Defaults of Options.
const (
	DefaultBufferBytes       = 4 << 20
	DefaultMaxExited         = 1000
	DefaultExitedTTL         = 10 * time.Minute
	DefaultExitedBufferBytes = 64 << 20
	DefaultDrainTimeout      = 2 * time.Second
	DefaultSpawnHelper       = "/proc/self/exe"
	DefaultSandboxBytes      = 64 << 20
	DefaultStallTimeout      = 60 * time.Second
	DefaultStreamsPerProcess = 16
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
	// SandboxBufferBytes bounds the output buffered by all processes
	// together (each may still keep 64 KiB).
	SandboxBufferBytes int
	// StallTimeout is how long an output stream may take nothing before
	// the agent resets it; a reset stream no longer holds the process's
	// writes back.
	StallTimeout time.Duration
	// StreamsPerProcess bounds the concurrent output streams of one process.
	StreamsPerProcess int
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
	// Logs, if set, is served at GET /v1/logs (the agent binary logs into
	// it once started).
	Logs *LogRing
	// SpawnHelper is the binary that implements SpawnCommand; ""
	// means /proc/self/exe. Only used with CgroupDir, where processes
	// start directly in the cgroup when it allows (a thread that joins it
	// on cgroup v1, CLONE_INTO_CGROUP on v2) and through the helper
	// otherwise.
	SpawnHelper string
	// SpawnHelperOnly makes every process with CgroupDir start through
	// the helper (tests of the fallback).
	SpawnHelperOnly bool

	// WorkloadOOMScoreAdj, if not 0, is written to the oom_score_adj of
	// every process right after it started (see
	// DefaultWorkloadOOMScoreAdj). A failure is logged, not fatal.
	WorkloadOOMScoreAdj int

	// FilesRoot is the directory the /v1/files endpoints treat as "/"
	// ("" means DefaultFilesRoot, "/"); tests embed an agent on a temp dir.
	FilesRoot string
}

// Server runs processes for the host and serves the agent protocol.
type Server struct {
	opts        Options
	logger      *slog.Logger
	guest       guestSystem // applies GuestConfig (tests replace it)
	guestMu     sync.Mutex  // serializes PUT /v1/guest
	envMu       sync.Mutex
	env         []string // base environment of processes (envMu): Options.Env, then GuestConfig env merged over it
	cgroupDir   string
	spawnHelper string
	cgroup      *cgroupSpawner // with cgroupDir: how processes join it
	waiter      waiter
	handler     http.Handler
	startedAt   time.Time
	budget      *budget
	closingCh   chan struct{} // closed when Shutdown begins: writers stop waiting for readers

	ctx    context.Context // cancelled when shutdown has finished with the processes
	cancel context.CancelFunc

	mu          sync.Mutex
	releasable  []releasableListener // listeners Serve serves that can let go of their socket
	closing     bool                 // no new processes
	stopped     bool                 // no new background goroutines
	procs       map[model.ProcessID]*process
	starting    map[model.ProcessID]chan struct{} // closed once the start has finished
	exited      []*process                        // in exit order
	trimmed     int                               // exited[:trimmed] have had their output dropped
	exitedBytes int                               // cost of the events kept by exited records

	streams     atomic.Int64   // output streams being served
	noSetfsuid  atomic.Bool    // setfsuid is not implemented (gVisor): see setOOMScoreAdj
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
	opts.SandboxBufferBytes = cmp.Or(opts.SandboxBufferBytes, max(DefaultSandboxBytes, opts.BufferBytes))
	opts.StallTimeout = cmp.Or(opts.StallTimeout, DefaultStallTimeout)
	opts.StreamsPerProcess = cmp.Or(opts.StreamsPerProcess, DefaultStreamsPerProcess)
	if opts.BufferBytes < 0 || opts.MaxExited < 0 || opts.ExitedTTL < 0 || opts.ExitedBufferBytes < 0 || opts.DrainTimeout < 0 ||
		opts.SandboxBufferBytes < 0 || opts.StallTimeout < 0 || opts.StreamsPerProcess < 0 {
		return nil, errors.New("agent: negative limit in Options")
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		opts:        opts,
		logger:      logger,
		guest:       linuxGuest{},
		env:         opts.Env,
		cgroupDir:   opts.CgroupDir,
		spawnHelper: cmp.Or(opts.SpawnHelper, DefaultSpawnHelper),
		startedAt:   time.Now(),
		budget:      &budget{max: opts.SandboxBufferBytes},
		closingCh:   make(chan struct{}),
		procs:       map[model.ProcessID]*process{},
		starting:    map[model.ProcessID]chan struct{}{},
		janitorStop: make(chan struct{}),
	}
	if s.env == nil {
		s.env = os.Environ()
	}
	if s.cgroupDir != "" {
		if _, err := os.Stat(s.spawnHelper); err != nil {
			return nil, fmt.Errorf("agent: spawn helper: %w", err)
		}
		cg, err := newCgroupSpawner(s.cgroupDir, opts.SpawnHelperOnly, logger)
		if err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
		s.cgroup = cg
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

// httpServer returns an HTTP server that speaks HTTP/2 with prior knowledge
// only (no HTTP/1, no TLS) with the agent's handler.
func (s *Server) httpServer(ctx context.Context) *http.Server {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:     s.handler,
		Protocols:   &p,
		BaseContext: func(net.Listener) context.Context { return ctx },
		ConnContext: func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) },
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: maxConcurrentStreams,
			// The host's stdin and file uploads: enough to stream fast,
			// small enough that many at once stay cheap.
			MaxReceiveBufferPerStream:     1 << 20,
			MaxReceiveBufferPerConnection: 8 << 20,
			MaxReadFrameSize:              1 << 20,
		},
		ErrorLog: slog.NewLogLogger(s.logger.Handler(), slog.LevelDebug),
	}
}

// Serve accepts connections on ln and serves each as its own HTTP/2
// (prior knowledge) connection until ctx ends or the Server shuts down; it
// then closes ln and the connections and returns nil.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if !s.track() {
		ln.Close()
		return nil
	}
	defer s.bgWG.Done()
	if rl, ok := ln.(releasableListener); ok {
		s.mu.Lock()
		s.releasable = append(s.releasable, rl)
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.releasable = slices.DeleteFunc(s.releasable, func(x releasableListener) bool { return x == rl })
			s.mu.Unlock()
		}()
	}
	stopB := context.AfterFunc(s.ctx, cancel)
	defer stopB()
	hs := s.httpServer(ctx)
	stopA := context.AfterFunc(ctx, func() { hs.Close() })
	defer stopA()
	err := hs.Serve(&retryListener{Listener: ln, ctx: ctx, logger: s.logger})
	if ctx.Err() != nil || errors.Is(err, http.ErrServerClosed) {
		hs.Close()
		return nil
	}
	hs.Close()
	return fmt.Errorf("agent: listener closed: %w", err)
}

// releasableListener is a listener that can let go of its socket for a
// while (a Unix socket's, for a runsc checkpoint: unixListener).
type releasableListener interface {
	net.Listener
	// ReleaseExcept lets go of the socket and its connections but keep,
	// which it closes once its peer has (see unixListener).
	ReleaseExcept(keep net.Conn) error
}

// releaseListeners releases every releasable listener Serve serves,
// leaving keep (the asking connection) to its peer; false if there is
// none.
func (s *Server) releaseListeners(keep net.Conn) (bool, error) {
	s.mu.Lock()
	lns := slices.Clone(s.releasable)
	s.mu.Unlock()
	var err error
	for _, ln := range lns {
		err = errors.Join(err, ln.ReleaseExcept(keep))
	}
	return len(lns) > 0, err
}

// connKey is the request context key of the connection a request came on.
type connKey struct{}

// retryListener waits and retries after temporary accept errors (e.g.
// EMFILE) instead of spinning; net/http retries only net.Error temporaries.
// Its backoff starts again after an accepted connection.
type retryListener struct {
	net.Listener
	ctx    context.Context
	logger *slog.Logger
	clock  retry.Clock // nil: the system clock
	wait   *retry.Backoff
}

// acceptBackoff is how retryListener waits after a failed accept: from
// 5 ms, doubling, at most 1 s (±20%).
func acceptBackoff() retry.Policy {
	return retry.Policy{Initial: 5 * time.Millisecond, Max: time.Second, Jitter: 0.2}
}

func (l *retryListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err == nil || l.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
			if l.wait != nil {
				l.wait.Reset()
			}
			return c, err
		}
		if l.wait == nil {
			l.wait = acceptBackoff().Start(l.clock)
		}
		d := l.wait.Next()
		l.logger.Warn("accept failed", "err", err, "retry_in", d)
		if l.wait.Sleep(l.ctx, d) != nil {
			return nil, net.ErrClosed
		}
	}
}

// ServeConn serves one byte stream as an HTTP/2 connection (the client
// speaks first, with the HTTP/2 preface) until the peer closes it, ctx ends
// or the Server shuts down. It closes conn before returning.
func (s *Server) ServeConn(ctx context.Context, conn net.Conn) {
	// Counted, so that Shutdown returns only once every connection is
	// closed: none answers a request after it.
	if s.ctx.Err() != nil || ctx.Err() != nil || !s.track() {
		conn.Close()
		return
	}
	defer s.bgWG.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopB := context.AfterFunc(s.ctx, cancel)
	defer stopB()
	s.logger.Debug("connection opened", "remote", conn.RemoteAddr())
	hs := s.httpServer(ctx)
	ln := newOneConnListener(conn)
	hs.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed || st == http.StateHijacked {
			ln.Close()
		}
	}
	stopA := context.AfterFunc(ctx, func() { hs.Close() })
	defer stopA()
	_ = hs.Serve(ln)
	hs.Close()
	conn.Close()
	s.logger.Debug("connection closed", "remote", conn.RemoteAddr())
}

// oneConnListener hands out one connection, then blocks until closed.
type oneConnListener struct {
	conn   chan net.Conn
	addr   net.Addr
	closed chan struct{}
	once   sync.Once
}

func newOneConnListener(c net.Conn) *oneConnListener {
	l := &oneConnListener{conn: make(chan net.Conn, 1), addr: c.LocalAddr(), closed: make(chan struct{})}
	l.conn <- c
	return l
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conn:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return l.addr }

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
	close(s.closingCh)

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
		if s.cgroup != nil {
			s.cgroup.close()
		}
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
// Records are kept in the order of their exit times: p's exit event is
// published (and a client may start and see the end of another process)
// before p is recorded here, so a later exit may be recorded first.
func (s *Server) processExited(p *process) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, at := p.hasExited()
	i := len(s.exited)
	for i > s.trimmed {
		if _, prev := s.exited[i-1].hasExited(); !prev.After(at) {
			break
		}
		i--
	}
	s.exited = slices.Insert(s.exited, i, p)
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
		p.log.release()
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
	startingCh, starting := s.starting[spec.id]
	if running || starting {
		s.mu.Unlock()
		if starting {
			// A concurrent start of the same ID: answer once it is done,
			// so that a caller told "exists" finds the process.
			<-startingCh
		}
		return agentproto.ProcessStatus{}, &startError{status: 409, code: agentproto.CodeExists, err: fmt.Errorf("process %s exists", spec.id)}
	}
	done := make(chan struct{})
	s.starting[spec.id] = done
	s.procWG.Add(1) // before unlocking, so Shutdown waits for this start
	s.mu.Unlock()

	c, pio, err := s.startProcess(spec)

	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.starting, spec.id)
	defer close(done)
	if err != nil {
		s.procWG.Done()
		s.logger.Info("process start failed", "id", spec.id, "err", err) // never the arguments: they may hold secrets
		return agentproto.ProcessStatus{}, err
	}
	p := &process{
		id:        spec.id,
		args:      spec.args,
		startedAt: time.Now(),
		child:     c,
		log:       newEventLog(s.opts.BufferBytes, s.budget),
		pty:       pio.pty,
		stdin:     pio.stdin,
		done:      make(chan struct{}),
	}
	s.procs[spec.id] = p
	if spec.hold {
		// Attached from the first instruction until the first output
		// stream takes over (or nobody comes for the stall timeout).
		hold := p.log.attach(0)
		var once sync.Once
		p.releaseHold = func() { once.Do(func() { p.log.detach(hold) }) }
		time.AfterFunc(s.opts.StallTimeout, p.releaseHold)
	}
	if spec.timeout > 0 {
		p.timer = time.AfterFunc(spec.timeout, func() {
			p.mu.Lock()
			exited := p.exited
			if !exited {
				p.timedOut = true
			}
			p.mu.Unlock()
			if !exited && s.waiter.signalGroup(c, syscall.SIGKILL) == nil {
				s.logger.Info("process timed out; killed", "id", spec.id, "pid", c.pid, "timeout", spec.timeout)
			}
		})
	}
	if s.closing {
		// Shutdown began while we forked: it may have signalled the others already.
		_ = s.waiter.signalGroup(c, syscall.SIGKILL)
	}
	s.logger.Info("process started", "id", spec.id, "pid", c.pid)
	go func() {
		defer s.procWG.Done()
		s.run(p, pio)
	}()
	return p.snapshot(), nil
}

// lookup finds a process; if it is being started, it waits for the start
// to finish (or ctx to end) first.
func (s *Server) lookup(ctx context.Context, id model.ProcessID) *process {
	s.mu.Lock()
	p, ch := s.procs[id], s.starting[id]
	s.mu.Unlock()
	if p != nil || ch == nil {
		return p
	}
	select {
	case <-ch:
	case <-ctx.Done():
		return nil
	}
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
		Features:     features(),
		Pid:          os.Getpid(),
		StartedAt:    s.startedAt,
	}
}

// features returns what this agent implements beyond protocol 1.
func features() []string {
	return []string{
		agentproto.FeatureFrames, agentproto.FeatureGap, agentproto.FeatureStdin, agentproto.FeaturePTY,
		agentproto.FeatureUser, agentproto.FeatureTimeout, agentproto.FeatureWait, agentproto.FeatureHold,
		agentproto.FeatureLogs, agentproto.FeatureGuestConfig, agentproto.FeatureFileUser,
		agentproto.FeatureListenerRelease, agentproto.FeatureMkdirOwner, agentproto.FeatureFileMetadata,
		agentproto.FeatureUsage,
	}
}
