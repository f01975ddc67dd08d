package server

import (
	"context"
	"log/slog"
	"sync"

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
}

// newTimeouts wires idle limits, deadlines and retention for the sandboxes
// rt hosts on node.
func newTimeouts(opts Options, st store.Store, node model.NodeID, rt runtime.Runtime, log *slog.Logger) (*timeouts, error) {
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
	// Asked of the runtime instance, once: every sandbox here runs on it.
	_, suspendErr := runtime.AsSuspender(rt)
	_, pauseErr := runtime.AsPauser(rt)
	canSuspend, canPause := suspendErr == nil, pauseErr == nil
	if !canSuspend {
		log.Info("idle sandboxes are not suspended: the runtime cannot suspend", "runtime", rt.Info().Name, "reason", suspendErr)
	}
	rp, err := reaper.New(reaper.Config{
		Store:      st,
		Node:       node,
		Activity:   tracker,
		CanSuspend: func(model.Sandbox) bool { return canSuspend },
		CanPause:   func(model.Sandbox) bool { return canPause },
		Interval:   opts.ReapInterval,
		Logger:     log.With("component", "reaper"),
	})
	if err != nil {
		return nil, err
	}
	pg, err := reaper.NewPurger(reaper.PurgeConfig{Store: st, Retention: opts.Retention, Logger: log.With("component", "purge")})
	if err != nil {
		return nil, err
	}
	return &timeouts{tracker: tracker, reaper: rp, purger: pg}, nil
}

// start runs the tracker's flushes, the reaper and the purger until ctx ends.
func (t *timeouts) start(ctx context.Context, wg *sync.WaitGroup) {
	for _, run := range []func(context.Context){t.tracker.Run, t.reaper.Run, t.purger.Run} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(ctx)
		}()
	}
}
