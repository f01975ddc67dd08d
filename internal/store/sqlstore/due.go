package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/airlockdev/airlock/internal/model"
)

// NextOperationDue implements store.Store: the smallest "free at" time
// after now among the unfinished operations of sandboxes on owner, where an operation is free at its not_before or, while leased,
// at the later of not_before and the lease's expiry.
func (s *Store) NextOperationDue(ctx context.Context, owner model.NodeID, now time.Time) (time.Time, bool, error) {
	var due sql.NullInt64
	err := s.queryRow(ctx, `SELECT MIN(free_at) FROM (
			SELECT CASE WHEN o.lease_owner <> '' AND o.lease_expires_at > o.not_before
				THEN o.lease_expires_at ELSE o.not_before END AS free_at
			FROM operations o JOIN sandboxes s ON s.id = o.sandbox_id
			WHERE o.state IN (?, ?) AND s.node_id = ?) d
		WHERE free_at > ?`,
		string(model.OpPending), string(model.OpRunning), string(owner), micro(now)).Scan(&due)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("next operation due for %s: %w", owner, err)
	}
	if !due.Valid {
		return time.Time{}, false, nil
	}
	return fromMicro(due.Int64), true, nil
}
