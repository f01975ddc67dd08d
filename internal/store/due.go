package store

import (
	"context"
	"time"

	"github.com/airlockdev/airlock/internal/model"
)

// Due tells a controller when to look for work again after ClaimOperation
// found none, so that it wakes when a retry's delay or a lease runs out
// instead of polling.
type Due interface {
	// NextOperationDue returns the earliest time after now at which an
	// unfinished operation that owner may claim (its sandbox is on no node
	// or on owner's) stops being held back by time: its not_before, or,
	// while a lease is held, the later of not_before and the lease's
	// expiry. ok is false when no unfinished operation waits on a time
	// after now (an operation waiting only on an earlier one of its
	// sandbox is woken by that one's change, not by a time).
	NextOperationDue(ctx context.Context, owner model.NodeID, now time.Time) (due time.Time, ok bool, err error)
}
