package envdfs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/airlockdev/airlock/internal/e2b/envdfs/filesystempb"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

// WatcherLimits bound the polling watchers of one process.
type WatcherLimits struct {
	// Max is how many watchers may exist at once (all sandboxes).
	Max int
	// MaxPerSandbox is how many watchers one sandbox may have.
	MaxPerSandbox int
	// MaxQueued is how many events a watcher holds between two polls;
	// beyond it the watcher fails with resource_exhausted.
	MaxQueued int
	// Idle is how long a watcher lives without a poll.
	Idle time.Duration
	// OpenTimeout bounds opening the native watch.
	OpenTimeout time.Duration
}

// DefaultWatcherLimits are the limits NewWatchers uses.
func DefaultWatcherLimits() WatcherLimits {
	return WatcherLimits{Max: 1024, MaxPerSandbox: 64, MaxQueued: 4096, Idle: 10 * time.Minute, OpenTimeout: 30 * time.Second}
}

// Watchers is the registry of polling watchers (CreateWatcher,
// GetWatcherEvents, RemoveWatcher) of one process. Each watcher holds one
// native watch stream and one goroutine, stopped by RemoveWatcher, by
// expiry after Idle without a poll, or by Close.
type Watchers struct {
	log    *slog.Logger
	limits WatcherLimits
	now    func() time.Time

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // watcher goroutines and the janitor

	mu     sync.Mutex
	m      map[string]*pollWatcher
	closed bool
}

// pollWatcher is one polling watcher.
type pollWatcher struct {
	id      string
	sandbox model.SandboxID
	cancel  context.CancelFunc

	mu       sync.Mutex
	events   []*filesystempb.FilesystemEvent
	err      error // set once: the watch ended or overflowed
	lastPoll time.Time
}

// NewWatchers starts a registry with DefaultWatcherLimits.
func NewWatchers(logger *slog.Logger) *Watchers {
	return NewWatchersWithLimits(logger, DefaultWatcherLimits(), time.Now)
}

// NewWatchersWithLimits starts a registry with the given limits and clock.
func NewWatchersWithLimits(logger *slog.Logger, limits WatcherLimits, now func() time.Time) *Watchers {
	ctx, cancel := context.WithCancel(context.Background())
	ws := &Watchers{log: logger, limits: limits, now: now, ctx: ctx, cancel: cancel, m: make(map[string]*pollWatcher)}
	ws.wg.Add(1)
	go ws.janitor()
	return ws
}

// Close stops every watcher and waits for their goroutines.
func (ws *Watchers) Close() {
	ws.mu.Lock()
	ws.closed = true
	ws.mu.Unlock()
	ws.cancel()
	ws.wg.Wait()
}

// goWatch runs fn in a goroutine Close waits for, unless the registry is
// closed.
func (ws *Watchers) goWatch(fn func()) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.closed {
		return false
	}
	ws.wg.Add(1)
	go func() {
		defer ws.wg.Done()
		fn()
	}()
	return true
}

// janitor removes watchers not polled for limits.Idle.
func (ws *Watchers) janitor() {
	defer ws.wg.Done()
	tick := time.NewTicker(max(ws.limits.Idle/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ws.ctx.Done():
			return
		case <-tick.C:
			ws.expire()
		}
	}
}

func (ws *Watchers) expire() {
	now := ws.now()
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for id, w := range ws.m {
		w.mu.Lock()
		idle := now.Sub(w.lastPoll) >= ws.limits.Idle
		w.mu.Unlock()
		if idle {
			ws.log.Info("e2b polling watcher expired", "watcher", id, "sandbox", w.sandbox)
			w.cancel()
			delete(ws.m, id)
		}
	}
}

// errNoWatcher answers an unknown (or another sandbox's) watcher ID.
func errNoWatcher(id string) error {
	return connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher with id %s not found", textclip.Bytes(id, maxEcho)))
}

// reserve admits a new watcher of sb under the limits.
func (ws *Watchers) reserve(sb model.SandboxID, w *pollWatcher) error {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.closed {
		return connect.NewError(connect.CodeUnavailable, errors.New("the server is shutting down"))
	}
	if len(ws.m) >= ws.limits.Max {
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("this server has %d watchers, the most it keeps; remove unused ones", len(ws.m)))
	}
	n := 0
	for _, o := range ws.m {
		if o.sandbox == sb {
			n++
		}
	}
	if n >= ws.limits.MaxPerSandbox {
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("sandbox %s has %d watchers, the most allowed; remove unused ones", sb, n))
	}
	ws.m[w.id] = w
	return nil
}

func (ws *Watchers) drop(id string) *pollWatcher {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w := ws.m[id]
	delete(ws.m, id)
	return w
}

// lookup returns watcher id if it belongs to sb.
func (ws *Watchers) lookup(sb model.SandboxID, id string) (*pollWatcher, bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w, ok := ws.m[id]
	if !ok || w.sandbox != sb {
		return nil, false
	}
	return w, true
}

func newWatcherID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "w" + hex.EncodeToString(b[:])
}

// CreateWatcher starts a polling watcher of a directory.
func (s *Service) CreateWatcher(ctx context.Context, req *connect.Request[filesystempb.CreateWatcherRequest]) (*connect.Response[filesystempb.CreateWatcherResponse], error) {
	c, err := resolveCaller(ctx, "")
	if err != nil {
		return nil, err
	}
	ws := s.watchers
	wctx, cancel := context.WithCancel(ws.ctx)
	w := &pollWatcher{id: newWatcherID(), sandbox: c.t.Sandbox, cancel: cancel, lastPoll: ws.now()}
	if err := ws.reserve(c.t.Sandbox, w); err != nil {
		cancel()
		return nil, err
	}
	// The watch outlives this request: it is opened under the watcher's
	// context, which the request's end or OpenTimeout cancel only while
	// the watch is being opened.
	timer := time.AfterFunc(ws.limits.OpenTimeout, cancel)
	stop := context.AfterFunc(ctx, cancel)
	tw, err := openTree(wctx, c, req.Msg.GetPath(), req.Msg.GetRecursive(), req.Msg.GetAllowNetworkMounts())
	beforeTimeout, beforeEnd := timer.Stop(), stop()
	opened := beforeTimeout && beforeEnd
	if err == nil && !opened {
		tw.Close()
		err = connect.NewError(connect.CodeDeadlineExceeded, errors.New("opening the watch took too long, or the request ended"))
	}
	if err != nil {
		ws.drop(w.id)
		cancel()
		return nil, err
	}
	started := ws.goWatch(func() {
		defer cancel()
		s.runWatcher(wctx, c, tw, w, req.Msg.GetIncludeEntry())
	})
	if !started {
		tw.Close()
		ws.drop(w.id)
		cancel()
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("the server is shutting down"))
	}
	return connect.NewResponse(&filesystempb.CreateWatcherResponse{WatcherId: w.id}), nil
}

// runWatcher queues the events of one polling watcher until its context
// ends, the watch ends, or the queue overflows.
func (s *Service) runWatcher(ctx context.Context, c caller, tw *treeWatch, w *pollWatcher, includeEntry bool) {
	defer tw.Close()
	dir := tw.root.String()
	fail := func(err error) {
		w.mu.Lock()
		if w.err == nil {
			w.err = err
		}
		w.mu.Unlock()
	}
	for {
		var it dirItem
		select {
		case <-ctx.Done():
			return
		case it = <-tw.items:
		}
		evs, err := tw.handle(it)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errRootGone) {
			fail(connect.NewError(connect.CodeNotFound, fmt.Errorf("watch of %s ended: the directory is gone", dir)))
			return
		}
		if err != nil {
			fail(err)
			return
		}
		if includeEntry {
			if err := addEntries(ctx, c, dir, evs); err != nil {
				if ctx.Err() == nil {
					fail(err)
				}
				return
			}
		}
		w.mu.Lock()
		if len(w.events)+len(evs) > s.watchers.limits.MaxQueued {
			w.mu.Unlock()
			fail(connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("watcher %s lost events: more than %d queued since the last poll; remove it and create a new one", w.id, s.watchers.limits.MaxQueued)))
			return
		}
		w.events = append(w.events, evs...)
		w.mu.Unlock()
	}
}

// GetWatcherEvents returns and forgets the events queued since the last
// poll. A watcher that failed (overflow, directory gone) returns its
// queued events once, then its error on every later poll.
func (s *Service) GetWatcherEvents(ctx context.Context, req *connect.Request[filesystempb.GetWatcherEventsRequest]) (*connect.Response[filesystempb.GetWatcherEventsResponse], error) {
	t, err := callerTarget(ctx)
	if err != nil {
		return nil, err
	}
	w, ok := s.watchers.lookup(t, req.Msg.GetWatcherId())
	if !ok {
		return nil, errNoWatcher(req.Msg.GetWatcherId())
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastPoll = s.watchers.now()
	evs := w.events
	w.events = nil
	if len(evs) == 0 && w.err != nil {
		return nil, w.err
	}
	if evs == nil {
		evs = []*filesystempb.FilesystemEvent{}
	}
	return connect.NewResponse(&filesystempb.GetWatcherEventsResponse{Events: evs}), nil
}

// RemoveWatcher stops a polling watcher.
func (s *Service) RemoveWatcher(ctx context.Context, req *connect.Request[filesystempb.RemoveWatcherRequest]) (*connect.Response[filesystempb.RemoveWatcherResponse], error) {
	t, err := callerTarget(ctx)
	if err != nil {
		return nil, err
	}
	id := req.Msg.GetWatcherId()
	if _, ok := s.watchers.lookup(t, id); !ok {
		return nil, errNoWatcher(id)
	}
	if w := s.watchers.drop(id); w != nil {
		w.cancel()
	}
	return connect.NewResponse(&filesystempb.RemoveWatcherResponse{}), nil
}
