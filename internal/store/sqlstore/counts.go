package sqlstore

import (
	"context"
	"fmt"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// CountSandboxes implements store.Store.
func (s *Store) CountSandboxes(ctx context.Context) ([]store.SandboxCount, error) {
	rows, err := s.query(ctx, `SELECT state, runtime, pool_id, COUNT(*) FROM sandboxes WHERE state <> ?
		GROUP BY state, runtime, pool_id ORDER BY state, runtime, pool_id`, string(model.StateDeleted))
	if err != nil {
		return nil, fmt.Errorf("count sandboxes: %w", err)
	}
	defer rows.Close()
	var out []store.SandboxCount
	for rows.Next() {
		var state, runtime, pool string
		var n int
		if err := rows.Scan(&state, &runtime, &pool, &n); err != nil {
			return nil, fmt.Errorf("count sandboxes: %w", err)
		}
		st, err := model.ParseSandboxState(state)
		if err != nil {
			return nil, fmt.Errorf("count sandboxes: %w", err)
		}
		out = append(out, store.SandboxCount{State: st, Runtime: runtime, Pool: model.PoolID(pool), N: n})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count sandboxes: %w", err)
	}
	return out, nil
}
