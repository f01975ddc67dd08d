// Package activity records when sandboxes are used, for their idle limits.
//
// The management API (a call that changes a sandbox or reaches into it:
// commands, processes, files) and the data plane (an attach stream, stdin,
// signals, terminal resizes, file transfers) report activity to a Tracker, which keeps it in memory and writes it to the store coalesced:
// every Interval, one TouchSandboxes call with the latest time of each
// sandbox touched since the last flush. While a stream is attached (Hold),
// its sandbox counts as active at every flush. The reaper (internal/reaper)
// also asks the Tracker directly, so that activity not yet flushed still
// counts.
package activity

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/airlockdev/airlock/internal/model"
)

// DefaultInterval is the default of Config.Interval.
const DefaultInterval = 5 * time.Second

// flushTimeout bounds the final flush when the tracker stops.
const flushTimeout = 5 * time.Second

// Store is what the Tracker writes to (store.Store is one).
type Store interface {
	TouchSandboxes(ctx context.Context, at map[model.SandboxID]time.Time) (int, error)
}

// Config configures a Tracker.
type Config struct {
	Store    Store
	Interval time.Duration    // between flushes; 0: DefaultInterval
	Now      func() time.Time // nil: time.Now
	Logger   *slog.Logger     // nil: slog.Default()
}

// Tracker records activity in memory and flushes it to the store. Its
// methods are safe for concurrent use; Run flushes.
type Tracker struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	pending map[model.SandboxID]time.Time // touched since the last flush
	recent  map[model.SandboxID]time.Time // latest activity, kept for a while after it was flushed
	held    map[model.SandboxID]int       // open streams per sandbox
}

// New returns a Tracker.
func New(cfg Config) (*Tracker, error) {
	if cfg.Store == nil {
		return nil, errors.New("activity: Config.Store is required")
	}
	if cfg.Interval < 0 {
		return nil, errors.New("activity: Config.Interval is negative")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Tracker{cfg: cfg, log: cfg.Logger,
		pending: map[model.SandboxID]time.Time{},
		recent:  map[model.SandboxID]time.Time{},
		held:    map[model.SandboxID]int{},
	}, nil
}

// Touch records activity of the sandbox now.
func (t *Tracker) Touch(id model.SandboxID) {
	now := t.cfg.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.touchLocked(id, now)
}

func (t *Tracker) touchLocked(id model.SandboxID, now time.Time) {
	if now.After(t.pending[id]) {
		t.pending[id] = now
	}
	if now.After(t.recent[id]) {
		t.recent[id] = now
	}
}

// Hold records that a stream of the sandbox is open: the sandbox is active
// until release is called (which may be called more than once).
func (t *Tracker) Hold(id model.SandboxID) (release func()) {
	now := t.cfg.Now()
	t.mu.Lock()
	t.held[id]++
	t.touchLocked(id, now)
	t.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			now := t.cfg.Now()
			t.mu.Lock()
			defer t.mu.Unlock()
			if t.held[id]--; t.held[id] <= 0 {
				delete(t.held, id)
			}
			t.touchLocked(id, now) // the end of a stream is activity too
		})
	}
}

// LastActive returns the latest activity of the sandbox this tracker knows
// of (zero if none in the last while) and whether a stream of it is open.
func (t *Tracker) LastActive(id model.SandboxID) (last time.Time, held bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.recent[id], t.held[id] > 0
}

// Run flushes every Interval until ctx ends, then flushes once more.
func (t *Tracker) Run(ctx context.Context) {
	tick := time.NewTicker(t.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
			defer cancel()
			if err := t.Flush(fctx); err != nil {
				t.log.Warn("final activity flush", "err", err)
			}
			return
		case <-tick.C:
			if err := t.Flush(ctx); err != nil && ctx.Err() == nil {
				t.log.Warn("activity flush", "err", err)
			}
		}
	}
}

// Flush writes the activity recorded since the last flush, and every held
// sandbox as active now, in one store call. On failure what it took is
// merged back for the next flush.
func (t *Tracker) Flush(ctx context.Context) error {
	now := t.cfg.Now()
	t.mu.Lock()
	for id := range t.held {
		t.touchLocked(id, now)
	}
	batch := t.pending
	t.pending = map[model.SandboxID]time.Time{}
	// What was flushed stays known for a few intervals, for the reaper's
	// reads that raced with the flush.
	keep := now.Add(-4 * t.cfg.Interval)
	for id, at := range t.recent {
		if at.Before(keep) && t.held[id] == 0 {
			delete(t.recent, id)
		}
	}
	t.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	n, err := t.cfg.Store.TouchSandboxes(ctx, batch)
	if err != nil {
		t.mu.Lock()
		for id, at := range batch {
			if at.After(t.pending[id]) {
				t.pending[id] = at
			}
		}
		t.mu.Unlock()
		return err
	}
	t.log.Debug("activity flushed", "sandboxes", len(batch), "changed", n)
	return nil
}
