package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// HoldDutyLease implements store.Store in one statement: the row is
// written (inserted, or updated when f holds it or it expired) only for a
// live current incarnation, so a row written means f holds the lease.
func (s *Store) HoldDutyLease(ctx context.Context, name string, f store.Fence, ttl time.Duration) (bool, error) {
	if name == "" || f.Node == "" || f.Incarnation == "" || ttl <= 0 {
		return false, fmt.Errorf("hold duty lease %q: %w: a name, a node run and a positive length are required", name, model.ErrInvalid)
	}
	res, err := s.exec(ctx, `INSERT INTO duty_leases (name, owner, incarnation, expires_at)
		SELECT ?, ?, ?, (`+s.dbNow()+`) + ? WHERE `+s.fenceSQL()+`
		ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, incarnation = excluded.incarnation, expires_at = excluded.expires_at
		WHERE (duty_leases.owner = excluded.owner AND duty_leases.incarnation = excluded.incarnation)
			OR duty_leases.expires_at <= (`+s.dbNow()+`)`,
		name, string(f.Node), string(f.Incarnation), ttl.Microseconds(), string(f.Node), string(f.Incarnation))
	if err != nil {
		return false, fmt.Errorf("hold duty lease %q for %s: %w", name, f.Node, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("hold duty lease %q for %s: %w", name, f.Node, err)
	}
	return n > 0, nil
}
