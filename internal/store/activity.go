package store

import (
	"context"
	"time"

	"github.com/airlockdev/airlock/internal/model"
)

// ReapQuery selects sandboxes the reaper (internal/reaper) may act on.
type ReapQuery struct {
	// Node: only sandboxes placed on this node (required for idle; for
	// deadlines, sandboxes placed nowhere yet are included too).
	Node  model.NodeID
	Now   time.Time
	Limit int // 1..1000
}

// Purge says which finished rows PurgeFinished removes.
type Purge struct {
	// Before: rows that finished strictly before it are removed: deleted
	// sandboxes (by their last change) and finished operations (by
	// finished_at).
	Before time.Time
	// Limit bounds the rows of each kind one call removes (1..10000), so
	// that a call holds the database briefly; call again while it removed
	// Limit of some kind.
	Limit int
}

// PurgeCounts is what one PurgeFinished call removed.
type PurgeCounts struct {
	Sandboxes int // deleted sandboxes, with their metadata, egress profile links, sessions and operations
	Sessions  int // command sessions of those sandboxes
	// Operations: finished operations of sandboxes that are not (yet)
	// purged, finished before Purge.Before.
	Operations int
}

// Max reports the largest of the counts Purge.Limit bounds (sandboxes and
// operations), to compare with it.
func (c PurgeCounts) Max() int { return max(c.Sandboxes, c.Operations) }

// Activity is the store's side of idle limits, deadlines and retention:
// what the activity tracker flushes, what the reaper asks for, and the
// purge of finished rows.
type Activity interface {
	// TouchSandboxes moves each sandbox's last_activity_at forward to the
	// given time (never back: an older time is ignored) and returns how
	// many rows it changed. Unknown sandboxes are skipped. It does not wake
	// watchers: activity is not a state change.
	TouchSandboxes(ctx context.Context, at map[model.SandboxID]time.Time) (int, error)
	// BackfillActivity sets last_activity_at to now on the node's
	// sandboxes that are not deleted and have none (stored before activity
	// was recorded), so that their idle time counts from now rather than
	// from their last state change, and returns how many it changed.
	BackfillActivity(ctx context.Context, node model.NodeID, now time.Time) (int, error)
	// SetSandboxTimeout replaces a sandbox's deadline (zero: none),
	// on_timeout and the kind of snapshot its suspend writes (kind, ""
	// the runtime's own; only with OnTimeoutSuspend, else model.ErrInvalid),
	// and returns the sandbox as it is then. A sandbox that is
	// deleting or deleted is refused with an error wrapping
	// model.ErrInvalidTransition; another project's is ErrNotFound.
	SetSandboxTimeout(ctx context.Context, project model.ProjectID, id model.SandboxID, deadline time.Time, on model.OnTimeout, kind model.SnapshotKind, now time.Time) (model.Sandbox, error)
	// ClearDeadline sets a sandbox's deadline to none if it is still
	// deadline (a compare-and-swap, so that a deadline changed meanwhile is
	// kept) and reports whether it did.
	ClearDeadline(ctx context.Context, id model.SandboxID, deadline time.Time) (bool, error)
	// ListDeadlinePassed returns up to q.Limit sandboxes on q.Node or on no
	// node, in any state, whose deadline is set and not after q.Now,
	// earliest deadline first (an indexed read).
	ListDeadlinePassed(ctx context.Context, q ReapQuery) ([]model.Sandbox, error)
	// NextDeadline returns the earliest deadline strictly after q.Now of a
	// sandbox on q.Node or on no node (ok false: none), so that the reaper
	// sleeps until it rather than polling; q.Limit is not used. A deadline
	// at or before q.Now is ListDeadlinePassed's.
	NextDeadline(ctx context.Context, q ReapQuery) (deadline time.Time, ok bool, err error)
	// ListIdle returns up to q.Limit sandboxes on q.Node that are running or
	// paused, have an idle limit, no unfinished operation, and neither
	// activity nor a state change within their idle limit before q.Now,
	// longest idle first.
	ListIdle(ctx context.Context, q ReapQuery) ([]model.Sandbox, error)
	// PurgeFinished removes finished rows (see Purge) and returns how many
	// of each kind.
	PurgeFinished(ctx context.Context, p Purge) (PurgeCounts, error)
}
