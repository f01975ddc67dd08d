package server

import (
	"context"
	"log/slog"

	"github.com/airlockdev/airlock/internal/activity"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/reaper"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/store"
)

// timeouts are the server's activity tracker, reaper and purger
// (internal/activity, internal/reaper).
type timeouts struct {
	tracker *activity.Tracker
	reaper  *reaper.Reaper
	purger  *reaper.Purger
	log     *slog.Logger // the purger's
}

// newTimeouts wires idle limits, deadlines and retention for the sandboxes
// the node's enabled environments host.
func newTimeouts(opts Options, st store.Store, node model.NodeID, environments []enabledEnvironment, log *slog.Logger) (*timeouts, error) {
	// Activity is flushed at least as often as the reaper looks, so that
	// last_activity_at is as fresh as what the reaper goes by.
	flush := activity.DefaultInterval
	if opts.ReapInterval > 0 {
		flush = min(flush, opts.ReapInterval)
	}
	tracker, err := activity.New(activity.Config{Store: st, Interval: flush, Logger: log.With("component", "activity")})
	if err != nil {
		return nil, err
	}
	// What each runtime can do, as the API asks it (lifecycleSupport): a
	// sandbox is matched by the runtime that hosts it; one placed nowhere
	// yet or on a runtime not driven here can do neither.
	sup := lifecycleSupport(environmentRuntimes(environments)...)
	for _, e := range environments {
		if info := e.rt.Info(); runtime.SnapshotKindOf(info.Capabilities) == "" {
			log.Info("idle sandboxes are not suspended: the runtime cannot suspend", "runtime", info.Name)
		}
	}
	rp, err := reaper.New(reaper.Config{
		Store:      st,
		Node:       node,
		Activity:   tracker,
		CanSuspend: func(sb model.Sandbox, kind model.SnapshotKind) bool { s, _ := sup(sb); return s.CanSuspendAs(kind) },
		CanPause:   func(sb model.Sandbox) bool { s, _ := sup(sb); return s.Pause },
		Watch:      func(ctx context.Context) <-chan struct{} { return st.WatchNode(ctx, node) },
		Interval:   opts.ReapInterval,
		Logger:     log.With("component", "reaper"),
	})
	if err != nil {
		return nil, err
	}
	purgeLog := log.With("component", "purge")
	pg, err := reaper.NewPurger(reaper.PurgeConfig{Store: st, Retention: opts.Retention, AuditRetention: opts.AuditRetention, Logger: purgeLog})
	if err != nil {
		return nil, err
	}
	return &timeouts{tracker: tracker, reaper: rp, purger: pg, log: purgeLog}, nil
}

// components are the tracker's flushes, the reaper and the purger. The
// purge is cluster-wide: it runs every reaper.DefaultPurgeInterval on the
// node that holds its duty lease (at once when it takes the lease over).
func (t *timeouts) components(purge *duty) []component {
	return []component{loop("activity", t.tracker.Run), loop("reaper", t.reaper.Run), loop("purge", func(ctx context.Context) {
		purge.every(ctx, reaper.DefaultPurgeInterval, t.purge)
	})}
}

// purge runs the purger once, logging a failure (the next pass retries).
func (t *timeouts) purge(ctx context.Context) {
	if _, err := t.purger.Once(ctx); err != nil && ctx.Err() == nil {
		t.log.Warn("purge finished rows", "err", err)
	}
}
