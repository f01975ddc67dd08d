// Package gc deletes and garbage-collects templates: their store
// rows (tombstoned, see store.Templates) and their trees on disk (see
// template.Store.Remove).
//
// A collection run has two steps:
//
//  1. Tombstone: every live template that no tag and no live sandbox (any
//     state but deleted) uses, and that Config.Keep does not hold, gets a
//     tombstone, each in its own transaction that re-checks those uses under
//     the template row's exclusive lock, so a sandbox create racing the run
//     either commits first (and the template stays) or finds no template.
//     Suspended sandboxes (with their snapshots) and the warm pools'
//     unclaimed sandboxes are live sandboxes, so they hold their templates
//     without a hook; a pool itself holds none (a release none of whose
//     sandboxes is left and no tag names can be collected, and the pool
//     then cannot fill it). The recipe build cache keeps an archive of its
//     own and imports a collected template again when it needs it.
//  2. Remove trees: every tree on disk whose row is tombstoned, or that has
//     no row at all and was published longer than Grace ago (a crash between
//     import and PutTemplate left it; an import just before its PutTemplate
//     is younger), is removed. The rows of all trees are read in one query
//     (store.Templates.TemplateStates); each removal re-checks its row
//     under the template store's removal lock, which importers hold (template.Store.Guard)
//     from their import until they recorded it.
//
// Trees are only ever removed after their row is tombstoned (or never
// existed), and a tombstoned row is never used again unless an import
// publishes the tree again first.
//
// Step 1 is the store's, the same for every node of a cluster: periodic
// runs do it on one node at a time (Config.Tombstones). Step 2 is each
// node's, for the trees on its own disk: every node does it.
package gc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/template"
)

// DefaultGrace is how old a tree without a row must be before it is removed.
const DefaultGrace = time.Hour

// DefaultMinAge is Config.MinAge's default.
const DefaultMinAge = time.Hour

// DefaultInterval is how often the server collects (--template-gc-interval).
const DefaultInterval = 10 * time.Minute

// Config configures a Collector.
type Config struct {
	Store store.Templates
	Trees *template.Store
	// Grace: a tree with no row is kept until it was published this long
	// ago. 0: DefaultGrace.
	Grace time.Duration
	// Keep, if set, returns digests held by users other than tags and
	// live sandboxes: they are neither tombstoned nor removed. The server
	// sets none (see the package comment for why snapshots, pools and the
	// build cache need none). A user that must never lose its template to
	// a concurrent run has to take the template row's share lock as
	// CreateSandbox does; Keep alone is read before the run.
	Keep func(ctx context.Context) (map[model.TemplateDigest]bool, error)
	// MinAge: periodic runs (Run) leave templates created (or imported
	// again) less than this long ago, so an untagged import is not collected
	// before its importer had a chance to use it by digest. Collect takes
	// every unused template. 0: DefaultMinAge.
	MinAge time.Duration
	// Tombstones, if set, says whether a periodic run (Run) tombstones
	// unused templates here: the store's half of a run, which one node of
	// a cluster does at a time (the server's duty lease); every node
	// removes its own trees. Nil: always. Collect always tombstones.
	Tombstones func() bool
	Now        func() time.Time // nil: time.Now
	Logger     *slog.Logger     // nil: discard
}

// Result is what one run removed.
type Result struct {
	// Collected are the templates tombstoned by this run (no tag and no
	// user was left).
	Collected []model.TemplateDigest
	// TreesRemoved are the trees removed from disk: of templates collected
	// now, deleted or collected before, or with no row at all.
	TreesRemoved []model.TemplateDigest
	// Busy: some trees stayed because an import was running; the next run
	// removes them.
	Busy bool
}

// Collector runs collections, one at a time.
type Collector struct {
	cfg Config
	log *slog.Logger
	mu  sync.Mutex // one run at a time
}

// New returns a Collector.
func New(cfg Config) (*Collector, error) {
	if cfg.Store == nil || cfg.Trees == nil {
		return nil, errors.New("template gc: Store and Trees are required")
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.MinAge <= 0 {
		cfg.MinAge = DefaultMinAge
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Collector{cfg: cfg, log: log}, nil
}

// Collect runs one collection, of every unused template.
func (c *Collector) Collect(ctx context.Context) (Result, error) {
	return c.collect(ctx, time.Time{}, true)
}

// collect runs one collection of the unused templates created before
// createdBefore (zero: all); without tombstone it only removes trees.
func (c *Collector) collect(ctx context.Context, createdBefore time.Time, tombstone bool) (Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	res := Result{Collected: []model.TemplateDigest{}, TreesRemoved: []model.TemplateDigest{}}
	keep := map[model.TemplateDigest]bool{}
	if c.cfg.Keep != nil {
		var err error
		if keep, err = c.cfg.Keep(ctx); err != nil {
			return res, fmt.Errorf("template gc: keep hook: %w", err)
		}
	}
	var cands []model.TemplateDigest
	if tombstone {
		var err error
		if cands, err = c.cfg.Store.TemplateGCCandidates(ctx, createdBefore); err != nil {
			return res, fmt.Errorf("template gc: %w", err)
		}
	}
	for _, d := range cands {
		if keep[d] {
			continue
		}
		ok, err := c.cfg.Store.TombstoneTemplate(ctx, d, c.cfg.Now())
		if err != nil {
			return res, fmt.Errorf("template gc: %w", err)
		}
		if ok {
			c.log.InfoContext(ctx, "template collected", "digest", d)
			res.Collected = append(res.Collected, d)
		}
	}
	trees, err := c.cfg.Trees.Trees()
	if err != nil {
		return res, fmt.Errorf("template gc: %w", err)
	}
	// One read for every tree's row; removeTree checks the row again under
	// the removal lock, so a row that changed since is left alone.
	digests := make([]model.TemplateDigest, 0, len(trees))
	for _, tr := range trees {
		if !keep[tr.Digest] {
			digests = append(digests, tr.Digest)
		}
	}
	states, err := c.cfg.Store.TemplateStates(ctx, digests)
	if err != nil {
		return res, fmt.Errorf("template gc: %w", err)
	}
	for _, tr := range trees {
		if keep[tr.Digest] {
			continue
		}
		st := states[tr.Digest]
		var removed bool
		switch {
		case st == store.TemplateTombstoned:
			removed, err = c.removeTree(ctx, tr.Digest, store.TemplateTombstoned)
		case st == store.TemplateAbsent && c.cfg.Now().Sub(tr.Published) >= c.cfg.Grace:
			removed, err = c.removeTree(ctx, tr.Digest, store.TemplateAbsent)
		default:
			continue
		}
		switch {
		case errors.Is(err, template.ErrBusy):
			res.Busy = true
		case err != nil:
			return res, fmt.Errorf("template gc: %w", err)
		case removed:
			res.TreesRemoved = append(res.TreesRemoved, tr.Digest)
		}
	}
	if len(res.Collected) > 0 || len(res.TreesRemoved) > 0 || res.Busy {
		c.log.InfoContext(ctx, "template gc done", "collected", len(res.Collected), "trees_removed", len(res.TreesRemoved), "busy", res.Busy)
	}
	return res, nil
}

// removeTree removes d's tree if its row is still in state want.
func (c *Collector) removeTree(ctx context.Context, d model.TemplateDigest, want store.TemplateRowState) (bool, error) {
	return c.cfg.Trees.Remove(ctx, d, func(ctx context.Context) (bool, error) {
		st, err := c.cfg.Store.TemplateState(ctx, d)
		return err == nil && st == want, err
	})
}

// RemoveDeleted removes the tree of a template that was just deleted
// (tombstoned), if no import holds it up; otherwise the next run does.
func (c *Collector) RemoveDeleted(ctx context.Context, d model.TemplateDigest) error {
	_, err := c.removeTree(ctx, d, store.TemplateTombstoned)
	if errors.Is(err, template.ErrBusy) {
		c.log.InfoContext(ctx, "template tree left for the next gc: an import is running", "digest", d)
		return nil
	}
	return err
}

// Run collects every interval until ctx ends, leaving templates younger
// than MinAge; interval <= 0 returns at once. Failures are logged and
// retried next time.
func (c *Collector) Run(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		tombstone := c.cfg.Tombstones == nil || c.cfg.Tombstones()
		if _, err := c.collect(ctx, c.cfg.Now().Add(-c.cfg.MinAge), tombstone); err != nil && ctx.Err() == nil {
			c.log.ErrorContext(ctx, "template gc failed", "err", err)
		}
	}
}
