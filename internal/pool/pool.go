// Package pool keeps warm pools filled. Each node runs one Controller: it
// reads the pools (rows shared by every process through the store) and the
// unclaimed sandboxes placed on its node, and makes them agree.
//
//   - Every pool that is not drained keeps Size ready sandboxes on this node
//     for each release it keeps warm (the template's current digest and the
//     one before it); new ones are ordinary sandboxes of the system project
//     whose create operation the node's reconciler runs, so a crash at any
//     point is repaired like any create.
//   - Sandboxes of a pool that was deleted, of a release no longer kept
//     warm, of another environment, beyond the size, failed ones and ones
//     whose guest agent stopped answering are deleted. Claimed sandboxes
//     have left the pool and are never touched.
//   - Unclaimed sandboxes together hold at most the node's pool budget
//     (CPUs, memory and host pids, as their limits), so pools never take
//     the room of real sandboxes; at most FillParallel are being created
//     at once.
//
// A pass runs whenever the store reports a change of this node's (a claim
// of one of its sandboxes, a create of its that finished, its cordon) or a
// cluster-wide one (a pool set), and at least every Interval (which also
// covers what other nodes change: a claim elsewhere that keeps a pool from
// draining).
package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// Defaults of Config.
const (
	DefaultFillParallel = 2
	DefaultInterval     = 2 * time.Second
	DefaultMinGap       = 250 * time.Millisecond
	DefaultHealthEvery  = 30 * time.Second
	// healthTimeout bounds one health check of a ready sandbox.
	healthTimeout = 5 * time.Second
)

// Config configures a Controller.
type Config struct {
	Store store.Store
	Node  model.NodeID // this node: its pool sandboxes are placed here
	// Environment resolves a pool's environment name to its reference on
	// this node (an error: the pool is not filled here). Nil: the server
	// has no environments; pools name "".
	Environment func(ctx context.Context, name string) (model.EnvironmentRef, error)
	// DiskMiB is the writable layer of pool sandboxes: the server's
	// default, which a matching create asks for (required).
	DiskMiB int
	// MemoryMiB and CPUs are the budget of all unclaimed sandboxes on
	// this node together (required, > 0).
	MemoryMiB int
	CPUs      int
	// Pids is the budget of their host pids together (the sum of their
	// Resources.HostPids); 0: bounded only by the node's pids budget.
	Pids int
	// DrainAfter: a pool unused for longer keeps no sandboxes
	// (model.DefaultPoolDrainAfter if 0).
	DrainAfter   time.Duration
	FillParallel int // sandboxes created at once; DefaultFillParallel if 0
	// Healthy reports whether a ready pool sandbox still answers; nil:
	// not checked. It is asked every HealthEvery per sandbox.
	Healthy     func(ctx context.Context, sb model.Sandbox) error
	HealthEvery time.Duration
	Interval    time.Duration // longest time between passes; DefaultInterval if 0
	MinGap      time.Duration // shortest time between passes; DefaultMinGap if 0
	Now         func() time.Time
	Logger      *slog.Logger
}

// Controller fills and drains the pools on one node.
type Controller struct {
	cfg Config
	log *slog.Logger
	// checked is when each ready sandbox last passed its health check.
	checked map[model.SandboxID]time.Time
	// health is each pool's create failures on this node.
	health map[model.PoolID]*poolHealth
	// noted is the last reason each pool was not filled, logged once.
	noted map[model.PoolID]string
}

// New returns a Controller.
func New(cfg Config) (*Controller, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("pool: no store")
	case cfg.Node == "":
		return nil, errors.New("pool: no node")
	case cfg.DiskMiB <= 0:
		return nil, errors.New("pool: no disk size")
	case cfg.MemoryMiB <= 0 || cfg.CPUs <= 0:
		return nil, fmt.Errorf("pool: the budget must be positive (memory %d MiB, %d CPUs)", cfg.MemoryMiB, cfg.CPUs)
	case cfg.Pids < 0:
		return nil, fmt.Errorf("pool: the pids budget %d must not be negative", cfg.Pids)
	}
	if cfg.DrainAfter <= 0 {
		cfg.DrainAfter = model.DefaultPoolDrainAfter
	}
	if cfg.FillParallel <= 0 {
		cfg.FillParallel = DefaultFillParallel
	}
	if cfg.HealthEvery <= 0 {
		cfg.HealthEvery = DefaultHealthEvery
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.MinGap <= 0 {
		cfg.MinGap = DefaultMinGap
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Controller{cfg: cfg, log: cfg.Logger, checked: map[model.SandboxID]time.Time{},
		health: map[model.PoolID]*poolHealth{}, noted: map[model.PoolID]string{}}, nil
}

// Run passes until ctx ends. A failed pass is logged and retried at the
// next one: pools are an optimisation, never a reason to stop the server.
// Passes are at least MinGap apart: a burst of claims, each a store
// change, wakes a few passes, not one per claim competing with the claims
// for the store. Changes that concern only other nodes wake none.
func (c *Controller) Run(ctx context.Context) error {
	changes := c.cfg.Store.WatchNode(ctx, c.cfg.Node)
	tick := time.NewTicker(c.cfg.Interval)
	defer tick.Stop()
	for {
		if err := c.Pass(ctx); err != nil && ctx.Err() == nil {
			c.log.WarnContext(ctx, "pool pass failed", "err", err)
		}
		gap := time.NewTimer(c.cfg.MinGap)
		select {
		case <-ctx.Done():
			gap.Stop()
			return nil
		case <-gap.C:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
		case <-tick.C:
		}
	}
}

// slot is one unclaimed sandbox of this node.
type slot struct {
	sb   model.Sandbox
	pool model.PoolID
}

func (s slot) live() bool {
	switch s.sb.State {
	case model.StatePending, model.StateCreating, model.StateRunning:
		return true
	}
	return false
}

func (s slot) starting() bool {
	return s.sb.State == model.StatePending || s.sb.State == model.StateCreating
}

// Pass makes this node's pool sandboxes agree with the pools once.
func (c *Controller) Pass(ctx context.Context) error {
	self, err := c.cfg.Store.GetNode(ctx, c.cfg.Node)
	if err != nil {
		return fmt.Errorf("read this node: %w", err)
	}
	pools, err := c.cfg.Store.ListPools(ctx)
	if err != nil {
		return fmt.Errorf("list pools: %w", err)
	}
	listed, err := c.cfg.Store.ListPoolSandboxes(ctx, c.cfg.Node)
	if err != nil {
		return fmt.Errorf("list pool sandboxes: %w", err)
	}
	now := c.cfg.Now()
	byID := map[model.PoolID]*target{}
	resolved := map[model.TemplateRef]resolution{}
	for _, p := range pools {
		byID[p.ID] = c.target(ctx, p, resolved, now)
	}
	// A cordoned or draining node takes no new sandboxes: its pools hand
	// out none (the claim checks it too) and give their room back.
	active := self.State == model.NodeActive
	// Drop what no pool wants; what is left is the fill. Sandboxes being
	// deleted still hold their memory: the budget counts them.
	var keep []slot
	var used model.Resources
	for _, ps := range listed {
		s := slot{sb: ps.Sandbox, pool: ps.Pool}
		if s.sb.State == model.StateDeleting {
			used = plus(used, s.sb.Resources)
			continue
		}
		if !s.live() {
			if s.sb.State == model.StateFailed {
				byID[s.pool].failed(now, s.sb.StateReason)
				c.remove(ctx, s, "it failed to start")
			}
			continue
		}
		reason := byID[s.pool].unwanted(s.sb)
		if !active {
			reason = "its node is " + string(self.State)
		}
		if reason != "" {
			c.remove(ctx, s, reason)
			used = plus(used, s.sb.Resources)
			continue
		}
		if s.sb.State == model.StateRunning {
			byID[s.pool].started()
		}
		keep = append(keep, s)
	}
	if !active {
		return nil
	}
	keep = c.checkHealth(ctx, keep, now)
	// Size: keep the oldest (ready first), remove the rest.
	fill := map[fillKey][]slot{}
	for _, s := range keep {
		k := fillKey{s.pool, s.sb.Template}
		fill[k] = append(fill[k], s)
	}
	starting := 0
	for k, ss := range fill {
		size := byID[k.pool].pool.Size
		slices.SortStableFunc(ss, func(a, b slot) int {
			if a.starting() != b.starting() {
				if a.starting() {
					return 1
				}
				return -1
			}
			return a.sb.CreatedAt.Compare(b.sb.CreatedAt)
		})
		for i, s := range ss {
			used = plus(used, s.sb.Resources)
			if i >= size {
				c.remove(ctx, s, "its pool shrank")
				continue
			}
			if s.starting() {
				starting++
			}
		}
		if len(ss) > size {
			fill[k] = ss[:size]
		}
	}
	// Fill, oldest pool first, current release before the previous one. A
	// pool that cannot be filled (over the budget, failing creates) does
	// not hold up the others.
	for _, p := range pools {
		t := byID[p.ID]
		if !t.fillable(now) {
			continue
		}
		res := model.Resources{CPUs: p.Key.CPUs, MemoryMiB: p.Key.MemoryMiB, DiskMiB: c.cfg.DiskMiB,
			HostPids: environment.HostPids(environment.Name(p.Key.Environment), model.GuestPids(p.Key.MemoryMiB))}
	releases:
		for _, d := range t.releases {
			for have := len(fill[fillKey{p.ID, d}]); have < p.Size; have++ {
				if starting >= c.cfg.FillParallel {
					return nil
				}
				if next := plus(used, res); next.CPUs > c.cfg.CPUs || next.MemoryMiB > c.cfg.MemoryMiB || c.cfg.Pids > 0 && next.HostPids > c.cfg.Pids {
					c.note(ctx, p.ID, "over budget", fmt.Sprintf("the pools' sandboxes on this node would hold %d CPUs, %d MiB and %d host pids, over the budget of %d, %d and %d",
						next.CPUs, next.MemoryMiB, next.HostPids, c.cfg.CPUs, c.cfg.MemoryMiB, c.cfg.Pids))
					break releases
				}
				if err := c.add(ctx, t, d, res, now); err != nil {
					if errors.Is(err, store.ErrNodeFull) {
						c.note(ctx, p.ID, "node full", err.Error())
						return nil
					}
					if ctx.Err() != nil {
						return ctx.Err()
					}
					// A release whose template is gone (collected
					// after a drain, deleted) cannot be filled.
					c.note(ctx, p.ID, "cannot add", err.Error())
					continue releases
				}
				used = plus(used, res)
				starting++
				delete(c.noted, p.ID)
			}
		}
	}
	return nil
}

type fillKey struct {
	pool   model.PoolID
	digest model.TemplateDigest
}

// target is what one pool wants on this node.
type target struct {
	pool     model.Pool
	drained  bool
	releases []model.TemplateDigest // kept warm, newest first
	env      model.EnvironmentRef   // the environment's reference here
	envErr   error                  // the environment cannot run here
	health   *poolHealth            // failures of its creates on this node
}

// poolHealth backs a pool off after creates of its sandboxes failed, so a
// broken template or runtime is not created and deleted every pass.
type poolHealth struct {
	failures  int       // consecutive failed creates
	notBefore time.Time // no new sandbox before
}

// Backoff after failed creates: doubling from minBackoff to maxBackoff.
const (
	minBackoff = 2 * time.Second
	maxBackoff = 5 * time.Minute
)

// failed records a failed create of the pool's.
func (t *target) failed(now time.Time, reason string) {
	if t == nil {
		return
	}
	t.health.failures++
	d := min(minBackoff<<min(t.health.failures-1, 10), maxBackoff)
	t.health.notBefore = now.Add(d)
}

// started records that a sandbox of the pool's runs: creates work.
func (t *target) started() {
	if t == nil {
		return
	}
	t.health.failures = 0
}

// resolution is what a template reference resolved to in this pass.
type resolution struct {
	tpl model.Template
	err error
}

// target resolves the pool's template (recording a moved tag as a new
// release) and environment. resolved holds this pass's resolutions: pools
// of the same reference (other environments or sizes) share one read.
// Each pass resolves afresh: a tag can move, on any server, without a
// change that Store.Watch reports.
func (c *Controller) target(ctx context.Context, p model.Pool, resolved map[model.TemplateRef]resolution, now time.Time) *target {
	h := c.health[p.ID]
	if h == nil {
		h = &poolHealth{}
		c.health[p.ID] = h
	}
	t := &target{pool: p, drained: p.Drained(now, c.cfg.DrainAfter), health: h}
	r, ok := resolved[p.Key.Template]
	if !ok {
		r.tpl, r.err = c.cfg.Store.ResolveTemplate(ctx, p.Key.Template)
		resolved[p.Key.Template] = r
	}
	tpl, err := r.tpl, r.err
	switch {
	case err != nil:
		c.note(ctx, p.ID, "template does not resolve", err.Error())
	case tpl.Digest != p.Current:
		moved, err := c.cfg.Store.SetPoolRelease(ctx, p.ID, tpl.Digest, now)
		if err != nil {
			c.log.WarnContext(ctx, "cannot record the pool's new release", "pool", p.ID, "digest", tpl.Digest, "err", err)
			break
		}
		c.log.InfoContext(ctx, "pool release", "pool", p.ID, "template", p.Key.Template, "current", moved.Current, "previous", moved.Previous)
		t.pool = moved
	}
	t.releases = t.pool.Releases()
	if c.cfg.Environment != nil {
		t.env, t.envErr = c.cfg.Environment(ctx, p.Key.Environment)
	}
	return t
}

// fillable reports whether the pool gets new sandboxes here now.
func (t *target) fillable(now time.Time) bool {
	return !t.drained && t.envErr == nil && t.pool.Size > 0 && len(t.releases) > 0 && !now.Before(t.health.notBefore)
}

// unwanted says why the pool (t, nil if it was deleted) no longer wants
// sb, or "".
func (t *target) unwanted(sb model.Sandbox) string {
	switch {
	case t == nil:
		return "its pool was deleted"
	case t.drained:
		return "its pool is drained (unused)"
	case t.pool.Size == 0:
		return "its pool has size 0"
	case !slices.Contains(t.releases, sb.Template):
		return "its release is no longer kept warm"
	case t.envErr == nil && sb.Environment != t.env:
		return "its environment changed"
	}
	return ""
}

// add stores a new pool sandbox; the reconciler creates it.
func (c *Controller) add(ctx context.Context, t *target, digest model.TemplateDigest, res model.Resources, now time.Time) error {
	sb := model.Sandbox{
		ID: model.NewSandboxID(), ProjectID: model.SystemProject, Template: digest, Resources: res,
		State: model.StatePending, NodeID: c.cfg.Node, Environment: t.env, Pool: t.pool.ID,
		LastActivity: now, CreatedAt: now, UpdatedAt: now,
	}
	op := model.Operation{ID: model.NewOperationID(), ProjectID: model.SystemProject, SandboxID: sb.ID,
		Kind: model.OpCreate, State: model.OpPending, CreatedAt: now, UpdatedAt: now}
	// No egress until a claim sets the claimant's policy: if applying it
	// ever failed, the sandbox would fail closed.
	if err := c.cfg.Store.CreateSandbox(ctx, sb, policy.Spec{Default: policy.None}, op, nil); err != nil {
		return fmt.Errorf("pool %s: add a sandbox: %w", t.pool.ID, err)
	}
	c.log.DebugContext(ctx, "pool sandbox added", "pool", t.pool.ID, "sandbox", sb.ID, "digest", digest)
	return nil
}

// remove deletes an unclaimed sandbox. One claimed meanwhile is another
// project's now and is not found in the system project: left alone.
func (c *Controller) remove(ctx context.Context, s slot, reason string) {
	now := c.cfg.Now()
	op := model.Operation{ID: model.NewOperationID(), ProjectID: model.SystemProject, SandboxID: s.sb.ID,
		Kind: model.OpDelete, State: model.OpPending, CreatedAt: now, UpdatedAt: now}
	_, err := c.cfg.Store.RequestDelete(ctx, store.DeleteRequest{
		ProjectID: model.SystemProject, SandboxID: s.sb.ID, Operation: op, Now: now, Reason: "pool: " + reason,
	})
	delete(c.checked, s.sb.ID)
	switch {
	case err == nil:
		c.log.InfoContext(ctx, "pool sandbox removed", "pool", s.pool, "sandbox", s.sb.ID, "reason", reason)
	case errors.Is(err, store.ErrNotFound), errors.Is(err, model.ErrInvalidTransition):
		// Claimed, or already being deleted.
	default:
		c.log.WarnContext(ctx, "cannot remove a pool sandbox", "pool", s.pool, "sandbox", s.sb.ID, "err", err)
	}
}

// healthParallel bounds the health checks that run at once.
const healthParallel = 8

// checkHealth asks ready sandboxes not checked for HealthEvery whether
// they answer (several at once, each within healthTimeout) and removes
// those that do not; it returns the others.
func (c *Controller) checkHealth(ctx context.Context, slots []slot, now time.Time) []slot {
	if c.cfg.Healthy == nil {
		return slots
	}
	seen := map[model.SandboxID]bool{}
	var due []int
	for i, s := range slots {
		seen[s.sb.ID] = true
		if s.sb.State != model.StateRunning {
			continue
		}
		if last, ok := c.checked[s.sb.ID]; ok && now.Sub(last) < c.cfg.HealthEvery {
			continue
		}
		due = append(due, i)
	}
	for id := range c.checked {
		if !seen[id] {
			delete(c.checked, id)
		}
	}
	errs := make([]error, len(slots))
	var wg sync.WaitGroup
	sem := make(chan struct{}, healthParallel)
	for _, i := range due {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			hctx, cancel := context.WithTimeout(ctx, healthTimeout)
			defer cancel()
			errs[i] = c.cfg.Healthy(hctx, slots[i].sb)
		}()
	}
	wg.Wait()
	var out []slot
	for i, s := range slots {
		if errs[i] != nil {
			if ctx.Err() != nil {
				out = append(out, s) // stopping: not the sandbox's fault
				continue
			}
			c.remove(ctx, s, "its guest agent does not answer: "+errs[i].Error())
			continue
		}
		if slices.Contains(due, i) {
			c.checked[s.sb.ID] = now
		}
		out = append(out, s)
	}
	return out
}

// note logs why a pool is not filled, once per reason.
func (c *Controller) note(ctx context.Context, id model.PoolID, what, detail string) {
	if c.noted[id] == what {
		return
	}
	c.noted[id] = what
	c.log.InfoContext(ctx, "pool not filled further on this node", "pool", id, "why", what, "detail", detail)
}

// plus adds b's CPUs, memory and host pids to a's.
func plus(a, b model.Resources) model.Resources {
	a.CPUs += b.CPUs
	a.MemoryMiB += b.MemoryMiB
	a.HostPids += b.HostPids
	return a
}
