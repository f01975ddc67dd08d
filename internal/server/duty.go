package server

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/airlockdev/airlock/internal/usage"
)

// Names of the duty leases of the cluster-wide passes besides the cluster
// duties (dutyLease): each runs on one node at a time.
const (
	// purgeLease: the purge of finished rows after their retention
	// (internal/reaper's Purger).
	purgeLease = "retention-purge"
	// templateGCLease: the tombstoning of unused templates, the store's
	// half of template garbage collection (internal/template/gc); every
	// node still removes its own trees from its disk.
	templateGCLease = "template-gc"
	// metricsLease: the removal of sandboxes' resource samples older than
	// their retention (internal/usage's Prune), every usage.PruneInterval.
	metricsLease = "metrics-retention"
)

// duty is the lease on one cluster-wide pass as this process knows it. The
// membership's duty loop takes or renews it every heartbeat interval, for
// dutyLeaseIntervals of them (HoldDutyLease), so one node at a time holds
// it; when the holder stops renewing it (it stopped, hangs, or was declared
// dead and fenced), another node takes it over once it expired. The lease
// only saves work: every pass it guards is safe to run on several nodes at
// once (a node that lost the lease may still finish a pass under way).
type duty struct {
	name    string
	held    atomic.Bool
	changed chan struct{} // a value after held changed (for every)
}

func newDuty(name string) *duty {
	return &duty{name: name, changed: make(chan struct{}, 1)}
}

// Held reports whether this process held the lease at its last renewal.
func (d *duty) Held() bool { return d.held.Load() }

// set records whether the lease is held and reports whether that changed.
func (d *duty) set(held bool) bool {
	if d.held.Swap(held) == held {
		return false
	}
	select {
	case d.changed <- struct{}{}:
	default:
	}
	return true
}

// every runs pass while this process holds the lease, until ctx ends: at
// once when it takes the lease over (unless its own last pass is less than
// interval ago), then every interval. Passes run one at a time; the lease
// is renewed meanwhile by the membership's duty loop, not here.
func (d *duty) every(ctx context.Context, interval time.Duration, pass func(context.Context)) {
	var last time.Time // the start of this process's last pass
	timer := time.NewTimer(interval)
	timer.Stop()
	defer timer.Stop()
	for ctx.Err() == nil {
		var due <-chan time.Time
		if d.Held() {
			wait := interval - time.Since(last)
			if last.IsZero() || wait <= 0 {
				last = time.Now()
				pass(ctx)
				continue
			}
			timer.Reset(wait)
			due = timer.C
		}
		select {
		case <-ctx.Done():
		case <-d.changed:
		case <-due:
		}
		timer.Stop()
	}
}

// metricsRetention is the cluster-wide removal of old resource samples: on
// the holder of d's lease, usage.Prune every interval.
func metricsRetention(st usage.PruneStore, d *duty, interval time.Duration, log *slog.Logger) component {
	return loop("metrics retention", func(ctx context.Context) {
		d.every(ctx, interval, func(ctx context.Context) {
			n, err := usage.Prune(ctx, st, time.Now())
			switch {
			case err != nil && ctx.Err() == nil:
				log.Warn("remove old resource samples", "err", err)
			case n > 0:
				log.Debug("removed old resource samples", "samples", n)
			}
		})
	})
}
