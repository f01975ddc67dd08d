// Package reaper acts on sandboxes' deadlines and idle limits, and purges
// finished rows from the store after a retention period.
//
// The Reaper runs on every server for the sandboxes placed on its node (and,
// for deadlines, those placed nowhere yet). Deadlines are kept on a timer:
// Run sleeps until the earliest pending deadline (store NextDeadline) and
// acts when it comes, so a deadline fires within milliseconds rather than a
// polling interval late; a store change that may set or move a deadline
// (Config.Watch: the node's watch, which a new or changed deadline wakes,
// from any server sharing the store) wakes it to read the next deadline
// again. The store holds every deadline, so a restarted server finds them,
// and a passed one is acted on by its first pass. Idle limits are checked
// every Interval (they are minutes to hours long), which is also the safety
// poll for a lost notification. Each pass reads indexed queries and turns
// what they return into ordinary lifecycle requests
// (store.RequestDelete, store.RequestOperation), so a reaper-made delete or
// suspend is an operation like a user's, visible in the operations list,
// with the reason in the sandbox's state_reason. A request that loses to a
// concurrent one (a user's pause, another server's reaper) is refused by
// the store with model.ErrInvalidTransition or store.ErrBusy and is simply
// tried again on a later pass if it still applies.
//
// Deadline passed (timeout_at): on_timeout "delete" deletes the sandbox in
// any state. "suspend" suspends a running or paused sandbox; one whose
// runtime cannot suspend is paused instead (its memory stays resident but it
// uses no CPU), or left alone if it is paused already or cannot pause; a
// sandbox that is pending, creating or changing state is waited for, and
// one that is suspended, failed or being deleted needs nothing. Once acted on,
// the deadline is cleared (a compare-and-swap: a deadline set meanwhile
// stays), so a woken sandbox is not suspended again and the deadline index
// holds only pending deadlines.
//
// Idle: a running or paused sandbox (a paused one is idle too) with an idle
// limit, no unfinished operation, and neither activity nor a state change
// within its limit is suspended. Sandboxes stored before activity was
// recorded count as active when the reaper first runs. Activity is what the store holds plus what
// this server's activity tracker has not flushed yet; a sandbox with an
// attached stream is never idle. A sandbox whose runtime cannot suspend is
// left running (logged once): pausing it would make its next command fail
// for no gain in memory.
package reaper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// Defaults of Config.
const (
	DefaultInterval = 5 * time.Second
	DefaultBatch    = 100
)

// Reason texts recorded in a sandbox's state_reason.
const (
	ReasonDeadline       = "deadline passed"
	ReasonDeadlinePaused = "deadline passed; paused, as its runtime cannot suspend"
	reasonIdleFormat     = "idle for %s"
)

// Store is what the reaper reads and writes (store.Store is one).
type Store interface {
	ListDeadlinePassed(ctx context.Context, q store.ReapQuery) ([]model.Sandbox, error)
	NextDeadline(ctx context.Context, q store.ReapQuery) (time.Time, bool, error)
	ListIdle(ctx context.Context, q store.ReapQuery) ([]model.Sandbox, error)
	ClearDeadline(ctx context.Context, id model.SandboxID, deadline time.Time) (bool, error)
	BackfillActivity(ctx context.Context, node model.NodeID, now time.Time) (int, error)
	RequestDelete(ctx context.Context, req store.DeleteRequest) (model.Sandbox, error)
	RequestOperation(ctx context.Context, req store.OperationRequest) (model.Sandbox, error)
}

// Activity is the server's activity tracker (*activity.Tracker).
type Activity interface {
	LastActive(id model.SandboxID) (last time.Time, held bool)
}

// Config configures a Reaper.
type Config struct {
	Store Store
	Node  model.NodeID
	// Activity, if set, adds activity not yet flushed to the store.
	Activity Activity
	// CanSuspend says whether the runtime of a sandbox can suspend it
	// writing a snapshot of kind ("": its own kind), CanPause whether it
	// can pause it; nil: it can.
	CanSuspend func(sb model.Sandbox, kind model.SnapshotKind) bool
	CanPause   func(model.Sandbox) bool
	// Watch, if set, returns a channel that receives a value after a
	// store change that may set or move a deadline of the node's (or an
	// unplaced) sandbox (store.Store.WatchNode): Run then reads the next
	// deadline again. Without it a new deadline is seen by the next
	// Interval's pass only.
	Watch    func(ctx context.Context) <-chan struct{}
	Interval time.Duration    // between idle passes (and the safety poll); 0: DefaultInterval
	Batch    int              // sandboxes read per query per pass; 0: DefaultBatch
	Now      func() time.Time // nil: time.Now
	// Timer, if set, replaces time.NewTimer in Run (a test's fake clock):
	// it returns a channel that receives once d has passed on the clock Now
	// reads, and a func that stops it.
	Timer  func(d time.Duration) (<-chan time.Time, func())
	Logger *slog.Logger // nil: slog.Default()
}

// Reaper acts on deadlines and idle limits; see the package comment.
type Reaper struct {
	cfg Config
	log *slog.Logger
	// cannot holds the idle sandboxes already logged as unable to
	// suspend (only Run's goroutine, or a test's Pass, touches it).
	cannot map[model.SandboxID]bool
	// backfilled: the first pass gave the node's sandboxes stored before
	// activity was recorded an activity time (now).
	backfilled bool
}

// New checks cfg and returns a Reaper.
func New(cfg Config) (*Reaper, error) {
	if cfg.Store == nil {
		return nil, errors.New("reaper: Config.Store is required")
	}
	if cfg.Node == "" {
		return nil, errors.New("reaper: Config.Node is required")
	}
	if cfg.Interval < 0 || cfg.Batch < 0 {
		return nil, errors.New("reaper: Config.Interval and Config.Batch must not be negative")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Batch == 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Timer == nil {
		cfg.Timer = func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTimer(d)
			return t.C, func() { t.Stop() }
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	yes := func(model.Sandbox) bool { return true }
	if cfg.CanSuspend == nil {
		cfg.CanSuspend = func(model.Sandbox, model.SnapshotKind) bool { return true }
	}
	if cfg.CanPause == nil {
		cfg.CanPause = yes
	}
	return &Reaper{cfg: cfg, log: cfg.Logger, cannot: map[model.SandboxID]bool{}}, nil
}

// Run acts on deadlines as they come and on idle limits every Interval,
// until ctx ends: after each pass it sleeps until the earliest of the next
// pending deadline, the next idle pass and a store change (Config.Watch).
// A store that fails is asked again after Interval.
func (r *Reaper) Run(ctx context.Context) {
	var changes <-chan struct{}
	if r.cfg.Watch != nil {
		changes = r.cfg.Watch(ctx)
	}
	idleDue := r.cfg.Now() // the first pass checks idle limits too
	for {
		now := r.cfg.Now()
		var (
			more bool
			err  error
		)
		if now.Before(idleDue) {
			_, more, err = r.deadlines(ctx, now)
		} else {
			_, more, err = r.pass(ctx, now)
			idleDue = now.Add(r.cfg.Interval)
		}
		wait := idleDue.Sub(r.cfg.Now())
		switch {
		case err != nil:
			if ctx.Err() == nil {
				r.log.Warn("reaper pass", "err", err)
			}
		case more:
			wait = 0 // a whole batch acted on: more may have passed
		default:
			// The next deadline after the pass's now: one that came
			// during the pass is due at once.
			next, ok, err := r.cfg.Store.NextDeadline(ctx, store.ReapQuery{Node: r.cfg.Node, Now: now})
			if err != nil {
				if ctx.Err() == nil {
					r.log.Warn("reaper: next deadline", "err", err)
				}
			} else if ok {
				wait = min(wait, next.Sub(r.cfg.Now()))
			}
		}
		if ctx.Err() != nil {
			return
		}
		if wait <= 0 {
			continue
		}
		fire, stop := r.cfg.Timer(wait)
		select {
		case <-ctx.Done():
			stop()
			return
		case <-changes:
		case <-fire:
		}
		stop()
	}
}

// Result counts what one pass requested.
type Result struct {
	Deleted   int // deletes requested at a deadline
	Suspended int // suspends requested at a deadline or an idle limit
	Paused    int // pauses requested at a deadline instead of a suspend
	Cleared   int // deadlines cleared
}

// Pass makes one pass over passed deadlines and idle sandboxes.
func (r *Reaper) Pass(ctx context.Context) (Result, error) {
	res, _, err := r.pass(ctx, r.cfg.Now())
	return res, err
}

// pass is Pass at now; more: see deadlines.
func (r *Reaper) pass(ctx context.Context, now time.Time) (res Result, more bool, err error) {
	res, more, err = r.deadlines(ctx, now)
	if err != nil {
		return res, more, err
	}
	q := store.ReapQuery{Node: r.cfg.Node, Now: now, Limit: r.cfg.Batch}
	idle, err := r.cfg.Store.ListIdle(ctx, q)
	if err != nil {
		return res, more, err
	}
	seen := make(map[model.SandboxID]bool, len(idle))
	for _, sb := range idle {
		seen[sb.ID] = true
		if err := r.idle(ctx, sb, now, &res); err != nil {
			return res, more, err
		}
	}
	for id := range r.cannot {
		if !seen[id] {
			delete(r.cannot, id) // no longer idle: log again next time
		}
	}
	return res, more, nil
}

// deadlines acts on the deadlines passed at now (one batch). more reports
// a whole batch of which some were acted on: more deadlines may have
// passed. (A batch of sandboxes that are all waited for, being created,
// is not more: the change that ends their wait wakes Run.)
func (r *Reaper) deadlines(ctx context.Context, now time.Time) (res Result, more bool, err error) {
	if !r.backfilled {
		// Activity was not recorded before this version: such sandboxes
		// count as active now rather than idle since their last change.
		n, err := r.cfg.Store.BackfillActivity(ctx, r.cfg.Node, now)
		if err != nil {
			return res, false, err
		}
		if n > 0 {
			r.log.Info("sandboxes without recorded activity count as active from now", "sandboxes", n)
		}
		r.backfilled = true
	}
	q := store.ReapQuery{Node: r.cfg.Node, Now: now, Limit: r.cfg.Batch}
	due, err := r.cfg.Store.ListDeadlinePassed(ctx, q)
	if err != nil {
		return res, false, err
	}
	for _, sb := range due {
		if err := r.deadline(ctx, sb, now, &res); err != nil {
			return res, false, err
		}
	}
	return res, len(due) == r.cfg.Batch && res != Result{}, nil
}

// deadline acts on one sandbox whose deadline passed.
func (r *Reaper) deadline(ctx context.Context, sb model.Sandbox, now time.Time, res *Result) error {
	log := r.log.With("sandbox", sb.ID, "state", sb.State, "on_timeout", sb.Timeouts.OnTimeout, "deadline", sb.Timeouts.Deadline)
	var (
		err  error
		done bool // the deadline needs nothing more
	)
	switch {
	case sb.State == model.StateDeleting || sb.State == model.StateDeleted:
		done = true
	case sb.Timeouts.OnTimeout == model.OnTimeoutDelete:
		err = r.request(ctx, sb, model.OpDelete, ReasonDeadline, now, "")
		if done = err == nil; done {
			res.Deleted++
			log.Info("deadline passed; delete requested")
		}
	case sb.State == model.StateSuspended || sb.State == model.StateSuspending || sb.State == model.StateFailed:
		done = true
	case sb.State != model.StateRunning && sb.State != model.StatePaused:
		// Pending, creating or changing state: a later pass acts.
	case r.cfg.CanSuspend(sb, ""):
		// The kind the sandbox asked its deadline's suspend to keep
		// (stored with its deadline, so a crash between here and the
		// suspend changes nothing) is carried on the operation. A runtime
		// that cannot write it (checked when the deadline was set: the
		// runtime changed since) keeps what its own suspend keeps rather
		// than nothing.
		snap := sb.Timeouts.SnapshotKind
		if !r.cfg.CanSuspend(sb, snap) {
			log.Warn("its runtime cannot write the snapshot kind its deadline asked for; it writes its own", "snapshot_kind", snap)
			snap = ""
		}
		err = r.request(ctx, sb, model.OpSuspend, ReasonDeadline, now, snap)
		if done = err == nil; done {
			res.Suspended++
			log.Info("deadline passed; suspend requested", "snapshot_kind", snap)
		}
	case sb.State == model.StatePaused:
		done = true
		log.Info("deadline passed; its runtime cannot suspend, and it is paused already")
	case r.cfg.CanPause(sb):
		err = r.request(ctx, sb, model.OpPause, ReasonDeadlinePaused, now, "")
		if done = err == nil; done {
			res.Paused++
			log.Info("deadline passed; its runtime cannot suspend, pause requested")
		}
	default:
		done = true
		log.Warn("deadline passed, but its runtime can neither suspend nor pause it; it is left as it is")
	}
	if err != nil {
		return r.lost(ctx, log, err)
	}
	if !done {
		return nil
	}
	cleared, err := r.cfg.Store.ClearDeadline(ctx, sb.ID, sb.Timeouts.Deadline)
	if err != nil {
		return fmt.Errorf("clear the deadline of %s: %w", sb.ID, err)
	}
	if cleared {
		res.Cleared++
	}
	return nil
}

// idle suspends one sandbox ListIdle returned, unless activity this
// server has not flushed yet says otherwise.
func (r *Reaper) idle(ctx context.Context, sb model.Sandbox, now time.Time, res *Result) error {
	since := sb.LastActivity
	if sb.UpdatedAt.After(since) {
		since = sb.UpdatedAt
	}
	if r.cfg.Activity != nil {
		last, held := r.cfg.Activity.LastActive(sb.ID)
		if held {
			return nil
		}
		if last.After(since) {
			since = last
		}
	}
	if now.Sub(since) <= sb.Timeouts.Idle {
		return nil
	}
	log := r.log.With("sandbox", sb.ID, "state", sb.State, "idle_timeout", sb.Timeouts.Idle, "idle_since", since)
	if !r.cfg.CanSuspend(sb, "") {
		if !r.cannot[sb.ID] {
			r.cannot[sb.ID] = true
			log.Info("idle, but its runtime cannot suspend it; it keeps running")
		}
		return nil
	}
	if err := r.request(ctx, sb, model.OpSuspend, fmt.Sprintf(reasonIdleFormat, sb.Timeouts.Idle), now, ""); err != nil {
		return r.lost(ctx, log, err)
	}
	res.Suspended++
	log.Info("idle; suspend requested")
	return nil
}

// request asks the store for a lifecycle operation of kind on sb; snap,
// for a suspend, is the kind of snapshot it must write ("": the
// runtime's).
func (r *Reaper) request(ctx context.Context, sb model.Sandbox, kind model.OperationKind, reason string, now time.Time, snap model.SnapshotKind) error {
	op := model.Operation{
		ID:           model.NewOperationID(),
		ProjectID:    sb.ProjectID,
		SandboxID:    sb.ID,
		Kind:         kind,
		State:        model.OpPending,
		SnapshotKind: snap,
		CreatedAt:    now,
		UpdatedAt:    now,
	}
	var err error
	if kind == model.OpDelete {
		_, err = r.cfg.Store.RequestDelete(ctx, store.DeleteRequest{
			ProjectID: sb.ProjectID, SandboxID: sb.ID, Operation: op, Now: now, Reason: reason,
		})
	} else {
		_, err = r.cfg.Store.RequestOperation(ctx, store.OperationRequest{
			ProjectID: sb.ProjectID, SandboxID: sb.ID, Operation: op, Now: now, Reason: reason,
		})
	}
	return err
}

// lost handles a refused request: one that lost to a concurrent request or
// state change is logged at debug (a later pass sees the new state); other
// errors end the pass.
func (r *Reaper) lost(ctx context.Context, log *slog.Logger, err error) error {
	if errors.Is(err, model.ErrInvalidTransition) || errors.Is(err, store.ErrStateChanged) || errors.Is(err, store.ErrNotFound) {
		log.DebugContext(ctx, "reaper request lost to a concurrent change", "err", err)
		return nil
	}
	return err
}
