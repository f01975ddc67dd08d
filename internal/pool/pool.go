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
//     (CPUs and memory, as their limits), so pools never take the room of
//     real sandboxes; at most FillParallel are being created at once.
//
// A pass runs whenever the store reports a change (a claim, a create that
// finished, a pool set) and at least every Interval.
package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// Defaults of Config.
const (
	DefaultFillParallel = 2
	DefaultInterval     = 2 * time.Second
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
	// DrainAfter: a pool unused for longer keeps no sandboxes
	// (model.DefaultPoolDrainAfter if 0).
	DrainAfter   time.Duration
	FillParallel int // sandboxes created at once; DefaultFillParallel if 0
	// Healthy reports whether a ready pool sandbox still answers; nil:
	// not checked. It is asked every HealthEvery per sandbox.
	Healthy     func(ctx context.Context, sb model.Sandbox) error
	HealthEvery time.Duration
	Interval    time.Duration
	Now         func() time.Time
	Logger      *slog.Logger
}

// Controller fills and drains the pools on one node.
type Controller struct {
	cfg Config
	log *slog.Logger
	// checked is when each ready sandbox last passed its health check.
	checked map[model.SandboxID]time.Time
	// full remembers the last budget refusal, to log it once.
	full string
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
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Controller{cfg: cfg, log: cfg.Logger, checked: map[model.SandboxID]time.Time{}}, nil
}

// Run passes until ctx ends. A failed pass is logged and retried at the
// next one: pools are an optimisation, never a reason to stop the server.
func (c *Controller) Run(ctx context.Context) error {
	changes := c.cfg.Store.Watch(ctx)
	tick := time.NewTicker(c.cfg.Interval)
	defer tick.Stop()
	for {
		if err := c.Pass(ctx); err != nil && ctx.Err() == nil {
			c.log.WarnContext(ctx, "pool pass failed", "err", err)
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
	for _, p := range pools {
		t := c.target(ctx, p, now)
		byID[p.ID] = t
	}
	var slots []slot
	for _, ps := range listed {
		slots = append(slots, slot{sb: ps.Sandbox, pool: ps.Pool})
	}
	// Drop what no pool wants; what is left is the fill.
	var keep []slot
	for _, s := range slots {
		if !s.live() {
			if s.sb.State == model.StateFailed {
				c.remove(ctx, s, "it failed to start")
			}
			continue
		}
		if reason := byID[s.pool].unwanted(s.sb); reason != "" {
			c.remove(ctx, s, reason)
			continue
		}
		keep = append(keep, s)
	}
	keep = c.checkHealth(ctx, keep, now)
	// Size: keep the oldest (ready first), remove the rest.
	fill := map[fillKey][]slot{}
	for _, s := range keep {
		k := fillKey{s.pool, s.sb.Template}
		fill[k] = append(fill[k], s)
	}
	var used model.Resources
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
			if i >= size {
				c.remove(ctx, s, "its pool shrank")
				continue
			}
			used.CPUs += s.sb.Resources.CPUs
			used.MemoryMiB += s.sb.Resources.MemoryMiB
			if s.starting() {
				starting++
			}
		}
		if len(ss) > size {
			fill[k] = ss[:size]
		}
	}
	// Fill, oldest pool first, current release before the previous one.
	for _, p := range pools {
		t := byID[p.ID]
		if !t.fillable() {
			continue
		}
		for _, d := range t.releases {
			for have := len(fill[fillKey{p.ID, d}]); have < p.Size; have++ {
				if starting >= c.cfg.FillParallel {
					return nil
				}
				res := model.Resources{CPUs: p.Key.CPUs, MemoryMiB: p.Key.MemoryMiB, DiskMiB: c.cfg.DiskMiB}
				if used.CPUs+res.CPUs > c.cfg.CPUs || used.MemoryMiB+res.MemoryMiB > c.cfg.MemoryMiB {
					c.budgetFull(ctx, p, used)
					return nil
				}
				if err := c.add(ctx, t, d, res, now); err != nil {
					if errors.Is(err, store.ErrNodeFull) {
						c.log.InfoContext(ctx, "pool not filled: the node is full", "pool", p.ID, "err", err)
						return nil
					}
					return err
				}
				used.CPUs += res.CPUs
				used.MemoryMiB += res.MemoryMiB
				starting++
			}
		}
	}
	c.full = ""
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
}

// target resolves the pool's template (recording a moved tag as a new
// release) and environment.
func (c *Controller) target(ctx context.Context, p model.Pool, now time.Time) *target {
	t := &target{pool: p, drained: p.Drained(now, c.cfg.DrainAfter)}
	tpl, err := c.cfg.Store.ResolveTemplate(ctx, p.Key.Template)
	switch {
	case err != nil:
		c.log.WarnContext(ctx, "pool's template does not resolve; keeping its releases", "pool", p.ID, "template", p.Key.Template, "err", err)
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

// fillable reports whether the pool gets new sandboxes here.
func (t *target) fillable() bool {
	return !t.drained && t.envErr == nil && t.pool.Size > 0 && len(t.releases) > 0
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

// checkHealth asks ready sandboxes not checked for HealthEvery whether
// they answer and removes those that do not; it returns the others.
func (c *Controller) checkHealth(ctx context.Context, slots []slot, now time.Time) []slot {
	if c.cfg.Healthy == nil {
		return slots
	}
	seen := map[model.SandboxID]bool{}
	var out []slot
	for _, s := range slots {
		seen[s.sb.ID] = true
		if s.sb.State != model.StateRunning {
			out = append(out, s)
			continue
		}
		last, ok := c.checked[s.sb.ID]
		if ok && now.Sub(last) < c.cfg.HealthEvery {
			out = append(out, s)
			continue
		}
		hctx, cancel := context.WithTimeout(ctx, healthTimeout)
		err := c.cfg.Healthy(hctx, s.sb)
		cancel()
		if err != nil {
			c.remove(ctx, s, "its guest agent does not answer: "+err.Error())
			continue
		}
		c.checked[s.sb.ID] = now
		out = append(out, s)
	}
	for id := range c.checked {
		if !seen[id] {
			delete(c.checked, id)
		}
	}
	return out
}

func (c *Controller) budgetFull(ctx context.Context, p model.Pool, used model.Resources) {
	msg := fmt.Sprintf("%d CPUs, %d MiB of %d, %d", used.CPUs, used.MemoryMiB, c.cfg.CPUs, c.cfg.MemoryMiB)
	if msg == c.full {
		return
	}
	c.full = msg
	c.log.InfoContext(ctx, "pools hold their whole budget on this node; not filling further", "pool", p.ID,
		"used_cpus", used.CPUs, "used_memory_mib", used.MemoryMiB, "budget_cpus", c.cfg.CPUs, "budget_memory_mib", c.cfg.MemoryMiB)
}
