// Package controller holds Airlock's level-triggered reconcilers. The
// operation loop claims pending lifecycle operations from the store (leased,
// so a crashed server's work is taken over), drives the worker, and records
// the outcome. The resync loop compares what the store wants with what the
// runtime has and repairs the difference: it adopts sandboxes that outlived a
// server restart, marks sandboxes that died as failed, and removes orphans.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/metrics"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/retry"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/tracing"
	"github.com/airlockdev/airlock/internal/worker"
)

// Config configures a Controller.
type Config struct {
	Store store.Store
	// Workers routes each sandbox to the worker of its execution
	// environment; sandboxes of environments it does not drive are left
	// alone.
	Workers *worker.Set
	NodeID  model.NodeID
	// Incarnation is this run's fencing token: every lease and every write
	// for the node's sandboxes carries it, and the store refuses them once
	// another run of the node started or the node was declared dead.
	Incarnation model.Incarnation
	// Lease is how long a claimed operation stays ours without renewal; a
	// crashed server's operations are taken over after it. Default 30 s.
	Lease time.Duration
	// Parallel is how many operations run at once. Default 4.
	Parallel int
	// MaxAttempts bounds retries of an operation that keeps failing with a
	// transient error. Default 5.
	MaxAttempts int
	// Backoff is how long an operation waits after its attempt-th attempt
	// failed with a transient error before it may be claimed again (its
	// not_before). Default DefaultBackoff.
	Backoff func(attempt int) time.Duration
	// Resync is the period of the resync loop. Default 10 s.
	Resync time.Duration
	// FinishGrace is how long operations under way may run on after Run's
	// context ended (no new one is claimed meanwhile). Default 15 s.
	FinishGrace time.Duration
	// Poll is the operation loop's safety poll: the longest it waits for
	// work without a store change of this node's, a finished operation or
	// a due time (a retry's not_before, a lease's expiry) waking it; it
	// bounds how long a lost notification delays work. Default 10 s.
	Poll   time.Duration
	Now    func() time.Time
	Logger *slog.Logger
	// Metrics counts finished operations and observes creates; nil: none.
	Metrics *metrics.Metrics
	// TracerProvider records the span of each operation attempt (trace.go);
	// nil: not traced.
	TracerProvider trace.TracerProvider
}

// Controller reconciles desired state (store) with observed state (runtime).
type Controller struct {
	cfg    Config
	log    *slog.Logger
	tracer trace.Tracer // nil: not traced

	// pushKick wakes the push loop of saved snapshots (snapblob.go);
	// blobMu makes this node's pushes and blob deletions one at a time.
	pushKick chan struct{}
	blobMu   sync.Mutex
}

// New returns a Controller.
func New(cfg Config) (*Controller, error) {
	if cfg.Store == nil || cfg.Workers == nil {
		return nil, errors.New("controller: store and workers are required")
	}
	if cfg.NodeID == "" || cfg.Incarnation == "" {
		return nil, errors.New("controller: node ID and incarnation are required")
	}
	if cfg.Lease == 0 {
		cfg.Lease = 30 * time.Second
	}
	if cfg.Parallel == 0 {
		cfg.Parallel = 4
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 5
	}
	if cfg.Resync == 0 {
		cfg.Resync = 10 * time.Second
	}
	if cfg.Poll == 0 {
		cfg.Poll = 10 * time.Second
	}
	if cfg.FinishGrace == 0 {
		cfg.FinishGrace = 15 * time.Second
	}
	if cfg.Backoff == nil {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Controller{cfg: cfg, log: cfg.Logger, tracer: tracing.Tracer(cfg.TracerProvider), pushKick: make(chan struct{}, 1)}, nil
}

// Run reconciles until ctx ends. It first takes back operations that a
// previous incarnation of this node left leased, and adopts or cleans up
// what the runtime has, then runs the operation workers and the resync loop.
func (c *Controller) Run(ctx context.Context) error {
	n, err := c.cfg.Store.ReleaseLeases(ctx, c.cfg.NodeID, c.cfg.Now())
	if err != nil {
		return fmt.Errorf("release stale leases: %w", err)
	}
	if n > 0 {
		c.log.InfoContext(ctx, "resuming operations of a previous run", "operations", n)
	}
	if err := c.Resync(ctx); err != nil && ctx.Err() == nil {
		c.log.ErrorContext(ctx, "initial resync", "err", err)
	}

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.operationLoop(ctx)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.pushLoop(ctx)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(c.cfg.Resync)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := c.Resync(ctx); err != nil && ctx.Err() == nil {
					c.log.ErrorContext(ctx, "resync", "err", err)
				}
			}
		}
	}()
	wg.Wait()
	return nil
}

// operationLoop claims operations while a worker slot is free and runs each
// in its own goroutine (at most Parallel at once), until ctx ends; it waits
// for them before returning. With no work it sleeps until the store reports
// a change that concerns this node (WatchNode: its sandboxes and
// operations, or a cluster-wide change; other nodes' changes do not wake
// it), an operation finishes, the store's next due time comes (a retry's
// not_before or a lease's expiry, NextOperationDue) or the safety poll
// (Config.Poll, which also covers a lost notification) passes. A store
// that fails is asked again after a backoff, started again once it
// answers. One loop claims, so a change costs one claim, not one per idle
// worker.
func (c *Controller) operationLoop(ctx context.Context) {
	changes := c.cfg.Store.WatchNode(ctx, c.cfg.NodeID)
	wake := time.NewTimer(c.cfg.Poll)
	wake.Stop() // started for each idle wait
	defer wake.Stop()
	storeErrs := claimBackoff().Start(nil)
	slots := make(chan struct{}, c.cfg.Parallel)
	finished := make(chan struct{}, 1)
	// Operations under way outlive ctx by up to FinishGrace: a shutdown
	// stops claiming at once but lets a runtime step finish rather than
	// kill it half-way (a `runc start` killed mid-way leaves a container
	// that later attempts cannot start).
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	var running sync.WaitGroup
	defer func() {
		idle := make(chan struct{})
		go func() {
			running.Wait()
			close(idle)
		}()
		grace := time.NewTimer(c.cfg.FinishGrace)
		defer grace.Stop()
		select {
		case <-idle:
		case <-grace.C:
			c.log.Warn("operations still under way after the shutdown grace; interrupting them", "grace", c.cfg.FinishGrace)
			stopWork()
			<-idle
		}
		stopWork()
	}()
	for {
		select { // take a slot
		case <-ctx.Done():
			return
		case slots <- struct{}{}:
		}
		op, err := c.cfg.Store.ClaimOperation(ctx, c.claim())
		if err != nil {
			<-slots
			var idle time.Duration
			if errors.Is(err, store.ErrNoWork) {
				storeErrs.Reset()
				idle = c.idle(ctx)
			} else {
				if ctx.Err() == nil {
					c.log.ErrorContext(ctx, "claim operation", "err", err)
				}
				idle = min(storeErrs.Next(), c.cfg.Poll)
			}
			wake.Reset(idle)
			select {
			case <-ctx.Done():
				return
			case <-changes:
			case <-finished:
			case <-wake.C:
			}
			wake.Stop()
			continue
		}
		storeErrs.Reset()
		running.Add(1)
		go func() {
			defer running.Done()
			defer func() {
				<-slots
				select { // a finished operation may unblock its sandbox's next one
				case finished <- struct{}{}:
				default:
				}
			}()
			c.runOperation(work, op)
		}()
	}
}

// idle returns how long the operation loop may sleep when there is no work:
// until the store's next due time, at most the safety poll.
func (c *Controller) idle(ctx context.Context) time.Duration {
	now := c.cfg.Now()
	due, ok, err := c.cfg.Store.NextOperationDue(ctx, c.cfg.NodeID, now)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			c.log.WarnContext(ctx, "next operation due", "err", err)
		}
		return c.cfg.Poll
	case !ok:
		return c.cfg.Poll
	}
	// The store keeps microseconds: wake just after the due time.
	return min(max(due.Sub(now)+time.Millisecond, 0), c.cfg.Poll)
}

// claimBackoff is how long the operation loop waits before it asks a
// failing store for work again: from 100 ms, doubling, at most the safety
// poll (±20%).
func claimBackoff() retry.Policy {
	return retry.Policy{Initial: 100 * time.Millisecond, Max: 10 * time.Second, Jitter: 0.2}
}

func (c *Controller) fence() store.Fence {
	return store.Fence{Node: c.cfg.NodeID, Incarnation: c.cfg.Incarnation}
}

func (c *Controller) claim() store.Claim {
	return store.Claim{Owner: c.cfg.NodeID, Incarnation: c.cfg.Incarnation, Lease: c.cfg.Lease, Now: c.cfg.Now()}
}

// runOperation executes one claimed operation while renewing its lease. The
// lifecycle table says what the operation's kind does; a kind this server
// does not know fails the operation.
func (c *Controller) runOperation(ctx context.Context, op model.Operation) {
	log := c.log.With("operation", op.ID, "kind", op.Kind, "sandbox", op.SandboxID, "attempt", op.Attempts)
	ctx, span := c.startOperationSpan(ctx, op)
	var err error
	defer func() { tracing.End(span, err) }()
	opCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.renewLease(opCtx, op.ID, cancel, log)
	}()
	defer wg.Wait()
	defer cancel()

	start := time.Now()
	lc, err := model.LifecycleOf(op.Kind)
	if err != nil {
		err = c.finish(ctx, op, model.OpFailed, &model.OperationError{Code: model.OpErrNotSupported, Message: fmt.Sprintf("operation kind %q is not supported by this server", op.Kind)}, "", "", "")
	} else {
		err = c.drive(opCtx, op, lc, log)
	}
	switch {
	case err == nil:
		log.InfoContext(ctx, "operation done", "took", time.Since(start).Round(time.Millisecond))
	case errors.Is(err, store.ErrLeaseLost) || errors.Is(err, store.ErrFenced) || ctx.Err() != nil:
		log.WarnContext(ctx, "operation interrupted; it will be resumed", "err", err)
	default:
		retry := c.retryable(op, err)
		if retry {
			// Stop renewing before the retry gives the lease up, so that a
			// renewal racing with it does not report a lost lease.
			cancel()
			wg.Wait()
		}
		c.retryOrFail(ctx, op, retry, err, log)
	}
}

// renewLease keeps the lease while the operation runs; if the lease is lost,
// it cancels the operation so two nodes never act on it at once.
func (c *Controller) renewLease(ctx context.Context, id model.OperationID, cancel context.CancelFunc, log *slog.Logger) {
	t := time.NewTicker(c.cfg.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := c.cfg.Store.RenewLease(ctx, id, c.claim()); err != nil {
				if ctx.Err() != nil {
					return
				}
				log.WarnContext(ctx, "lost operation lease", "err", err)
				cancel()
				return
			}
		}
	}
}

// DefaultBackoff is the default Config.Backoff: exponential from 500 ms
// (doubling per attempt, at most 16 s), with "equal jitter": a uniformly
// random delay between half and all of it, so that operations that failed
// together are not retried together. It is the retry package's backoff
// centred at three quarters of that, ±1/3.
func DefaultBackoff(attempt int) time.Duration {
	p := retry.Policy{Initial: 375 * time.Millisecond, Max: 12 * time.Second, Jitter: 1.0 / 3}
	return p.Nth(min(max(attempt, 0), 6))
}

// retryable reports whether an attempt that failed with err is retried:
// the error is transient and attempts are left.
func (c *Controller) retryable(op model.Operation, err error) bool {
	return !errors.Is(err, worker.ErrPermanent) && op.Attempts < c.cfg.MaxAttempts
}

// retryOrFail handles an operation step that returned an error (retry:
// what retryable said of it): permanent errors and exhausted attempts fail
// the operation (moving the sandbox to its lifecycle's failure state, after
// the lifecycle's cleanup step; to its stopped failure state instead when
// the lifecycle has one and the sandbox no longer runs: a suspend that
// failed after its checkpoint); transient ones are retried: the lease is
// given up and the operation may be claimed again after a backoff (its
// not_before).
func (c *Controller) retryOrFail(ctx context.Context, op model.Operation, retry bool, err error, log *slog.Logger) {
	if retry {
		backoff := c.cfg.Backoff(op.Attempts)
		now := c.cfg.Now()
		log.WarnContext(ctx, "operation failed; retrying", "err", err, "in", backoff)
		r := store.Retry{OperationID: op.ID, Owner: c.cfg.NodeID, Incarnation: c.cfg.Incarnation, NotBefore: now.Add(backoff), Now: now}
		if rerr := c.cfg.Store.RetryOperation(ctx, r); rerr != nil {
			log.WarnContext(ctx, "schedule retry", "err", rerr)
		}
		return
	}
	log.ErrorContext(ctx, "operation failed", "err", err)
	if op.Kind == model.OpSnapshot {
		c.failSnapshot(ctx, op.ID, err.Error(), log)
	}
	opErr := &model.OperationError{Code: model.OpErrRuntime, Message: err.Error()}
	if ce := (*worker.CodedError)(nil); errors.As(err, &ce) {
		opErr.Code = ce.Code
	}
	var from, to model.SandboxState
	if lc, lerr := model.LifecycleOf(op.Kind); lerr == nil && !lc.Retried() {
		sb, gerr := c.cfg.Store.GetSandboxByID(ctx, op.SandboxID)
		if gerr != nil {
			sb = model.Sandbox{ID: op.SandboxID}
		}
		e, rerr := c.cfg.Workers.Route(sb)
		if lc.Cleanup != "" && rerr == nil {
			// Release what the failed attempt left behind; the record stays.
			if _, cerr := runStep(ctx, e.Worker, lc.Cleanup, sb, op); cerr != nil {
				log.ErrorContext(ctx, "clean up failed operation", "step", lc.Cleanup, "err", cerr)
			}
		}
		from, to = lc.InProgress, lc.Failure
		if gerr == nil && sb.State != lc.InProgress && lc.CanStart(sb.State) {
			from = sb.State // failed before it was marked in progress
		}
		// Past the step's point of no return nothing runs any more: the
		// sandbox is not left claiming it does (the resync would fail it
		// later, without the step's error).
		if lc.Stopped != "" && from == lc.InProgress &&
			(errors.Is(err, worker.ErrStopped) || rerr == nil && e.Worker.Stopped(ctx, sb.ID)) {
			to = lc.Stopped
		}
	}
	// A lifecycle whose failure state is its in-progress state (delete)
	// leaves the sandbox alone: the resync loop queues the request again
	// (and a user may request it again).
	if ferr := c.finish(ctx, op, model.OpFailed, opErr, from, to, err.Error()); ferr != nil {
		if errors.Is(ferr, store.ErrStateChanged) {
			ferr = c.finish(ctx, op, model.OpFailed, opErr, "", "", "")
		}
		if ferr != nil {
			log.ErrorContext(ctx, "record failed operation", "err", ferr)
		}
	}
}

func (c *Controller) finish(ctx context.Context, op model.Operation, state model.OperationState, opErr *model.OperationError, from, to model.SandboxState, reason string) error {
	err := c.cfg.Store.FinishOperation(ctx, store.Finish{
		OperationID:   op.ID,
		Owner:         c.cfg.NodeID,
		Incarnation:   c.cfg.Incarnation,
		State:         state,
		Error:         opErr,
		SandboxFrom:   from,
		SandboxTo:     to,
		SandboxReason: reason,
		Now:           c.cfg.Now(),
	})
	if err == nil {
		c.cfg.Metrics.OperationFinished(metricKind(op), state == model.OpSucceeded)
	}
	return err
}

// metricKind is op's kind for the operations counter: a create in the
// system project fills a warm pool, which no user waited for.
func metricKind(op model.Operation) string {
	if op.Kind == model.OpCreate && op.ProjectID == model.SystemProject {
		return metrics.OpPoolFill
	}
	return string(op.Kind)
}

// stepResult is what a worker step reports besides success: a snapshot
// record to store with the sandbox's new state (setSnapshot; nil clears it).
type stepResult struct {
	setSnapshot bool
	snapshot    *model.Snapshot
	source      model.Source // a create's: how the sandbox got running
}

// stepCall runs a step of op on the worker.
type stepCall func(ctx context.Context, w *worker.Worker, sb model.Sandbox, op model.Operation) (stepResult, error)

// noResult adapts a worker call that reports only success.
func noResult(f func(ctx context.Context, w *worker.Worker, sb model.Sandbox) error) stepCall {
	return func(ctx context.Context, w *worker.Worker, sb model.Sandbox, _ model.Operation) (stepResult, error) {
		return stepResult{}, f(ctx, w, sb)
	}
}

// stepCalls maps each lifecycle step to the worker call that runs it.
var stepCalls = map[model.Step]stepCall{
	model.StepEnsure: func(ctx context.Context, w *worker.Worker, sb model.Sandbox, _ model.Operation) (stepResult, error) {
		if err := w.Ensure(ctx, sb); err != nil {
			return stepResult{}, err
		}
		return stepResult{source: w.CreateSource(sb.ID)}, nil
	},
	model.StepDestroy: noResult(func(ctx context.Context, w *worker.Worker, sb model.Sandbox) error { return w.Destroy(ctx, sb.ID) }),
	model.StepPause:   noResult(func(ctx context.Context, w *worker.Worker, sb model.Sandbox) error { return w.Pause(ctx, sb) }),
	model.StepResume:  noResult(func(ctx context.Context, w *worker.Worker, sb model.Sandbox) error { return w.Resume(ctx, sb) }),
	// A suspend writes the kind of snapshot its request asked for
	// (keep_memory), on every attempt.
	model.StepSuspend: func(ctx context.Context, w *worker.Worker, sb model.Sandbox, op model.Operation) (stepResult, error) {
		snap, err := w.Suspend(ctx, sb, op.SnapshotKind)
		if err != nil {
			return stepResult{}, err
		}
		return stepResult{setSnapshot: true, snapshot: &snap}, nil
	},
	// A woken sandbox's snapshot is consumed: its files are the running
	// sandbox's again (or were restored and removed).
	model.StepWake: func(ctx context.Context, w *worker.Worker, sb model.Sandbox, _ model.Operation) (stepResult, error) {
		return stepResult{setSnapshot: true}, w.Wake(ctx, sb)
	},
}

// controllerSteps are the lifecycle steps drive runs itself rather than
// through stepCalls: they need their operation's record (snapshots.go).
var controllerSteps = map[model.Step]bool{model.StepSnapshot: true}

// runStep runs one lifecycle step on the worker; a step without a worker
// call is a permanent error.
func runStep(ctx context.Context, w *worker.Worker, step model.Step, sb model.Sandbox, op model.Operation) (stepResult, error) {
	call, ok := stepCalls[step]
	if !ok {
		return stepResult{}, fmt.Errorf("%w: no worker call for lifecycle step %q", worker.ErrPermanent, step)
	}
	return call(ctx, w, sb, op)
}

// drive runs an operation as its lifecycle says: a sandbox in one of the
// start states (placed on this node by the API) gets its runtime recorded
// (if it has none yet) and is moved to the in-progress state; one already in progress (its request moved it, or a crash
// interrupted the operation) is resumed; the step runs; the sandbox moves to
// the final state. A sandbox in any other state moved on while the
// operation waited: the operation is cancelled.
func (c *Controller) drive(ctx context.Context, op model.Operation, lc model.Lifecycle, log *slog.Logger) error {
	sb, err := c.cfg.Store.GetSandboxByID(ctx, op.SandboxID)
	if err != nil {
		return fmt.Errorf("load sandbox: %w", err)
	}
	routed, err := c.cfg.Workers.Route(sb)
	if err != nil && sb.Runtime == "" && lc.Step == model.StepDestroy {
		// Never placed: nothing of it exists anywhere, so the delete is
		// carried out here whatever environment it was to run in.
		routed, err = c.cfg.Workers.Default(), nil
	}
	if err != nil {
		if sb.Runtime != "" {
			// Hosted by a runtime this server does not drive: the
			// operation fails and nothing is done to the sandbox; one
			// that its request moved to an in-progress state (a pause,
			// a suspend, …) goes where the table says a failed one ends,
			// so it is not stuck there.
			log.WarnContext(ctx, "operation of a sandbox whose environment this server does not drive; leaving the sandbox alone", "err", err)
			var from, to model.SandboxState
			if sb.State == lc.InProgress && !lc.Retried() {
				from, to = lc.InProgress, lc.Failure
			}
			opErr := &model.OperationError{Code: model.OpErrEnvironmentNotEnabled, Message: err.Error()}
			return c.finish(ctx, op, model.OpFailed, opErr, from, to, "")
		}
		return err // never placed: it fails, nothing of it runs anywhere
	}
	switch {
	case sb.State == lc.InProgress:
	case lc.CanStart(sb.State):
		// Fenced: only while the sandbox is still placed here and this is
		// the node's current run (a node declared dead meanwhile must not
		// start what was placed elsewhere); the runtime is recorded with it.
		if err := c.cfg.Store.TransitionOnNode(ctx, sb.ID, c.fence(), sb.State, lc.InProgress, "", string(routed.Name), c.cfg.Now()); err != nil {
			if errors.Is(err, store.ErrStateChanged) {
				return c.drive(ctx, op, lc, log) // raced with another request; look again
			}
			return fmt.Errorf("mark sandbox %s: %w", lc.InProgress, err)
		}
	default:
		return c.finish(ctx, op, model.OpFailed, cancelled(op.Kind, sb.State), "", "", "")
	}
	var res stepResult
	if controllerSteps[lc.Step] {
		err = c.snapshotStep(ctx, op, routed.Worker, sb)
	} else {
		res, err = runStep(ctx, routed.Worker, lc.Step, sb, op)
	}
	if err != nil {
		return err
	}
	if lc.Final == model.StateDeleted {
		c.cfg.Workers.Forget(sb.ID)
	}
	// Why a sandbox ended up suspended or deleted (its request's reason:
	// "idle for 6h0m0s", a failure before its delete) stays visible; a
	// sandbox that runs again has none.
	reason := ""
	if lc.Final == model.StateSuspended || lc.Final == model.StateDeleted {
		reason = sb.StateReason
	}
	err = c.cfg.Store.FinishOperation(ctx, store.Finish{
		OperationID:   op.ID,
		Owner:         c.cfg.NodeID,
		Incarnation:   c.cfg.Incarnation,
		State:         model.OpSucceeded,
		SandboxFrom:   lc.InProgress,
		SandboxTo:     lc.Final,
		SandboxReason: reason,
		SetSnapshot:   res.setSnapshot,
		Snapshot:      res.snapshot,
		Source:        res.source,
		Now:           c.cfg.Now(),
	})
	if err == nil {
		c.observeSuccess(op, lc, routed.Name, res.source)
	}
	if errors.Is(err, store.ErrStateChanged) {
		// Another request (a delete) arrived while we worked; its operation
		// takes over.
		cur, gerr := c.cfg.Store.GetSandboxByID(ctx, sb.ID)
		if gerr != nil {
			return gerr
		}
		return c.finish(ctx, op, model.OpFailed, cancelled(op.Kind, cur.State), "", "", "")
	}
	return err
}

func cancelled(kind model.OperationKind, state model.SandboxState) *model.OperationError {
	return &model.OperationError{Code: model.OpErrCancelled, Message: fmt.Sprintf("sandbox became %s before the %s finished", state, kind)}
}

// Resync compares the sandboxes this node should have with what its runtime
// has: running sandboxes that died are marked failed (with the reason), and
// runtime sandboxes that no live record wants are destroyed. A sandbox that
// survived a server restart is simply found running and kept: adopted, not
// recreated.
func (c *Controller) Resync(ctx context.Context) error {
	// Observe the runtime before reading the records: a create places its
	// record before it touches the runtime, so anything listed here is
	// already wanted by a record read afterwards, and never mistaken for an
	// orphan while it is being created.
	have := map[environment.Name][]model.SandboxID{}
	for _, e := range c.cfg.Workers.Environments() {
		ids, err := e.Worker.List(ctx)
		if err != nil {
			return fmt.Errorf("list %s sandboxes: %w", e.Name, err)
		}
		have[e.Name] = ids
	}
	want, err := c.cfg.Store.ListSandboxesOnNode(ctx, c.cfg.NodeID)
	if err != nil {
		return fmt.Errorf("list sandboxes on node: %w", err)
	}
	live := make(map[model.SandboxID]model.Sandbox, len(want))
	for _, sb := range want {
		live[sb.ID] = sb
	}
	for _, e := range c.cfg.Workers.Environments() {
		for _, id := range have[e.Name] {
			if _, ok := live[id]; ok {
				continue
			}
			// No live record wants it: a sandbox deleted while we were
			// down, or the leftover of a create whose record never
			// committed.
			c.log.InfoContext(ctx, "removing orphaned sandbox", "sandbox", id, "env", e.Name)
			if err := e.Worker.Destroy(ctx, id); err != nil {
				c.log.ErrorContext(ctx, "remove orphan", "sandbox", id, "env", e.Name, "err", err)
			}
			c.cfg.Workers.Forget(id)
		}
	}
	if err := c.requeueDeletes(ctx, want); err != nil {
		c.log.ErrorContext(ctx, "requeue deletes", "err", err)
	}
	if err := c.resyncSnapshots(ctx); err != nil {
		c.log.ErrorContext(ctx, "resync snapshots", "err", err)
	}
	notDriven := map[string]int{}
	for _, sb := range want {
		if sb.Runtime == "" {
			continue // not placed yet: its create operation places it
		}
		routed, err := c.cfg.Workers.Route(sb)
		if err != nil {
			// Hosted by a runtime this server does not drive (it was
			// restarted with another set of --env): leave it alone.
			notDriven[sb.Runtime]++
			continue
		}
		switch sb.State {
		case model.StateRunning, model.StatePaused:
		case model.StateFailed:
			if sb.StateReason == model.NodeLostReason && slices.Contains(have[routed.Name], sb.ID) {
				// Declared lost while this node was cut off: it holds no
				// room any more and nothing may run for it; its record
				// stays for its owner to see and delete.
				c.log.InfoContext(ctx, "removing a sandbox declared lost with its node", "sandbox", sb.ID, "env", routed.Name)
				if err := routed.Worker.Destroy(ctx, sb.ID); err != nil {
					c.log.ErrorContext(ctx, "remove lost sandbox", "sandbox", sb.ID, "err", err)
				}
				c.cfg.Workers.Forget(sb.ID)
			}
			continue
		case model.StateSuspended:
			// Nothing runs; its snapshot must still be there.
			if !slices.Contains(have[routed.Name], sb.ID) {
				c.markFailed(ctx, sb, "the sandbox's snapshot disappeared from the runtime")
			}
			continue
		default:
			continue // states in progress are driven by their operations
		}
		st, err := routed.Worker.Observe(ctx, sb.ID)
		reason := ""
		switch {
		case errors.Is(err, runtime.ErrNotFound):
			reason = "sandbox disappeared from the runtime"
		case err != nil:
			c.log.WarnContext(ctx, "observe sandbox", "sandbox", sb.ID, "err", err)
			continue
		case st.Phase.Alive(): // running, or paused (memory kept, alive)
			continue
		case st.OOMKilled:
			reason = "sandbox was killed for exceeding its memory limit"
		default:
			reason = fmt.Sprintf("sandbox stopped unexpectedly (runtime phase %s)", st.Phase)
		}
		c.markFailed(ctx, sb, reason)
	}
	for rt, n := range notDriven {
		c.log.WarnContext(ctx, "sandboxes run on a runtime this server does not drive; leaving them alone (restart the server with --env for it to manage them)", "runtime", rt, "sandboxes", n)
	}
	return nil
}

// markFailed moves a sandbox that resync found dead (or without its
// snapshot) to failed, unless its state changed meanwhile.
func (c *Controller) markFailed(ctx context.Context, sb model.Sandbox, reason string) {
	c.log.WarnContext(ctx, "sandbox failed", "sandbox", sb.ID, "state", sb.State, "reason", reason)
	err := c.cfg.Store.TransitionOnNode(ctx, sb.ID, c.fence(), sb.State, model.StateFailed, reason, "", c.cfg.Now())
	if err != nil && !errors.Is(err, store.ErrStateChanged) {
		c.log.ErrorContext(ctx, "mark sandbox failed", "sandbox", sb.ID, "err", err)
	}
}

// requeueDeletes queues a new delete operation for every deleting sandbox
// whose delete operation has ended without deleting it (it failed, e.g.
// after repeated runtime errors): a delete is retried until it succeeds (its
// lifecycle's failure state is its in-progress state).
func (c *Controller) requeueDeletes(ctx context.Context, sandboxes []model.Sandbox) error {
	del, err := model.LifecycleOf(model.OpDelete)
	if err != nil {
		return err
	}
	ops, err := c.cfg.Store.ListUnfinishedOperations(ctx)
	if err != nil {
		return err
	}
	busy := make(map[model.SandboxID]bool, len(ops))
	for _, op := range ops {
		busy[op.SandboxID] = true
	}
	for _, sb := range sandboxes {
		if sb.State != del.InProgress || busy[sb.ID] {
			continue
		}
		if _, err := c.cfg.Workers.Route(sb); err != nil {
			continue // not ours to delete: its environment is not driven here
		}
		now := c.cfg.Now()
		op := model.Operation{ID: model.NewOperationID(), ProjectID: sb.ProjectID, SandboxID: sb.ID,
			Kind: del.Kind, State: model.OpPending, CreatedAt: now, UpdatedAt: now}
		_, err := c.cfg.Store.RequestDelete(ctx, store.DeleteRequest{ProjectID: sb.ProjectID, SandboxID: sb.ID, Operation: op, Now: now})
		switch {
		case err == nil:
			c.log.InfoContext(ctx, "retrying the delete of a sandbox whose delete failed", "sandbox", sb.ID, "operation", op.ID)
		case errors.Is(err, model.ErrInvalidTransition) || errors.Is(err, store.ErrNotFound):
			// Someone else queued one (or it is gone) meanwhile.
		default:
			return fmt.Errorf("requeue delete of %s: %w", sb.ID, err)
		}
	}
	return nil
}

// observeSuccess counts an operation that succeeded and, for a create,
// how long it took from its request (its operation's creation) to running.
func (c *Controller) observeSuccess(op model.Operation, lc model.Lifecycle, env environment.Name, source model.Source) {
	c.cfg.Metrics.OperationFinished(metricKind(op), true)
	if lc.Step == model.StepEnsure && op.ProjectID != model.SystemProject {
		c.cfg.Metrics.CreateFinished(string(env), string(source), c.cfg.Now().Sub(op.CreatedAt))
	}
}
