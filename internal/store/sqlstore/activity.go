package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// Bounds of the activity and purge calls.
const (
	maxReapLimit  = 1000
	maxPurgeLimit = 10000
	// purgeChunk bounds the IDs of one IN (…) list.
	purgeChunk = 500
)

// TouchSandboxes implements store.Store.
func (s *Store) TouchSandboxes(ctx context.Context, at map[model.SandboxID]time.Time) (int, error) {
	if len(at) == 0 {
		return 0, nil
	}
	ids := make([]model.SandboxID, 0, len(at))
	for id := range at {
		ids = append(ids, id)
	}
	slices.Sort(ids) // one lock order for concurrent flushes (PostgreSQL)
	total := 0
	err := s.write(ctx, false, func(t tx) error {
		total = 0
		for _, id := range ids {
			v := micro(at[id])
			res, err := t.exec(ctx, `UPDATE sandboxes SET last_activity_at = ? WHERE id = ? AND last_activity_at < ?`,
				v, string(id), v)
			if err != nil {
				return fmt.Errorf("touch %s: %w", id, err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return fmt.Errorf("touch %s: %w", id, err)
			}
			total += int(n)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("touch %d sandboxes: %w", len(ids), err)
	}
	return total, nil
}

// BackfillActivity implements store.Store.
func (s *Store) BackfillActivity(ctx context.Context, node model.NodeID, now time.Time) (int, error) {
	if node == "" {
		return 0, fmt.Errorf("backfill activity: %w: empty node ID", model.ErrInvalid)
	}
	res, err := s.exec(ctx, `UPDATE sandboxes SET last_activity_at = ? WHERE node_id = ? AND state <> ? AND last_activity_at = 0`,
		micro(now), string(node), string(model.StateDeleted))
	if err != nil {
		return 0, fmt.Errorf("backfill activity on node %s: %w", node, err)
	}
	return affected(res)
}

// SetSandboxTimeout implements store.Store.
func (s *Store) SetSandboxTimeout(ctx context.Context, project model.ProjectID, id model.SandboxID, deadline time.Time, on model.OnTimeout, kind model.SnapshotKind, now time.Time) (model.Sandbox, error) {
	on, kind, err := onTimeoutColumns(model.Timeouts{OnTimeout: on, SnapshotKind: kind})
	if err != nil {
		return model.Sandbox{}, fmt.Errorf("set timeout of sandbox %s: %w", id, err)
	}
	var out model.Sandbox
	err = s.write(ctx, true, func(t tx) error {
		state, err := t.lockSandboxState(ctx, id, project)
		if err != nil {
			return err
		}
		if state == model.StateDeleting || state == model.StateDeleted {
			return fmt.Errorf("%w: the sandbox is %s", model.ErrInvalidTransition, state)
		}
		if _, err := t.exec(ctx, `UPDATE sandboxes SET deadline = ?, on_timeout = ?, timeout_snapshot_kind = ?, updated_at = ? WHERE id = ?`,
			microOrZero(deadline), string(on), string(kind), micro(now), string(id)); err != nil {
			return fmt.Errorf("update deadline: %w", err)
		}
		out, err = scanSandbox(t.queryRow(ctx, `SELECT `+sandboxColumns+` FROM sandboxes s WHERE s.id = ?`, string(id)))
		if err != nil {
			return fmt.Errorf("read sandbox: %w", err)
		}
		return nil
	})
	if err != nil {
		return model.Sandbox{}, fmt.Errorf("set timeout of sandbox %s: %w", id, err)
	}
	return out, nil
}

// ClearDeadline implements store.Store.
func (s *Store) ClearDeadline(ctx context.Context, id model.SandboxID, deadline time.Time) (bool, error) {
	if deadline.IsZero() {
		return false, nil
	}
	var cleared bool
	err := s.write(ctx, true, func(t tx) error {
		t.concerns() // no node's loop: the reaper, which cleared it, reads deadlines on its own
		res, err := t.exec(ctx, `UPDATE sandboxes SET deadline = 0 WHERE id = ? AND deadline = ?`, string(id), micro(deadline))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		cleared = n == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("clear deadline of sandbox %s: %w", id, err)
	}
	return cleared, nil
}

func checkReapQuery(q store.ReapQuery) error {
	switch {
	case q.Node == "":
		return fmt.Errorf("%w: empty node ID", model.ErrInvalid)
	case q.Limit < 1 || q.Limit > maxReapLimit:
		return fmt.Errorf("%w: limit %d must be between 1 and %d", model.ErrInvalid, q.Limit, maxReapLimit)
	}
	return nil
}

// ListDeadlinePassed implements store.Store. It reads the partial index on
// deadline (migration 007), which holds only sandboxes with one: the reaper
// clears a deadline once it acted on it, so the index stays small.
func (s *Store) ListDeadlinePassed(ctx context.Context, q store.ReapQuery) ([]model.Sandbox, error) {
	if err := checkReapQuery(q); err != nil {
		return nil, fmt.Errorf("list passed deadlines: %w", err)
	}
	// node_id is compared as an expression (|| ''), which no index
	// serves: without statistics SQLite would otherwise walk the node's
	// sandboxes by (node_id, state), deleted ones included, rather than the
	// few whose deadline passed.
	rows, err := s.query(ctx, `SELECT `+sandboxColumns+` FROM sandboxes s
		WHERE s.deadline <> 0 AND s.deadline <= ? AND (s.node_id || '') IN (?, '')
		ORDER BY s.deadline, s.id LIMIT ?`, micro(q.Now), string(q.Node), q.Limit)
	if err != nil {
		return nil, fmt.Errorf("list passed deadlines: %w", err)
	}
	defer rows.Close()
	list, err := collectSandboxes(rows)
	if err != nil {
		return nil, fmt.Errorf("list passed deadlines: %w", err)
	}
	return list, nil
}

// NextDeadline implements store.Store: one read of the partial index on
// deadline (its minimum above now among the node's and the unplaced
// sandboxes').
func (s *Store) NextDeadline(ctx context.Context, q store.ReapQuery) (time.Time, bool, error) {
	if q.Node == "" {
		return time.Time{}, false, fmt.Errorf("next deadline: %w: empty node ID", model.ErrInvalid)
	}
	var next sql.NullInt64
	err := s.queryRow(ctx, `SELECT MIN(s.deadline) FROM sandboxes s
		WHERE s.deadline <> 0 AND s.deadline > ? AND (s.node_id || '') IN (?, '')`,
		micro(q.Now), string(q.Node)).Scan(&next)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("next deadline: %w", err)
	}
	if !next.Valid {
		return time.Time{}, false, nil
	}
	return fromMicro(next.Int64), true, nil
}

// ListIdle implements store.Store. It reads the node's running and paused
// sandboxes through the (node_id, state) index; a sandbox's idle time counts
// from its last activity or its last change (a wake, a resume), whichever is
// later.
func (s *Store) ListIdle(ctx context.Context, q store.ReapQuery) ([]model.Sandbox, error) {
	if err := checkReapQuery(q); err != nil {
		return nil, fmt.Errorf("list idle sandboxes: %w", err)
	}
	now := micro(q.Now)
	rows, err := s.query(ctx, `SELECT `+sandboxColumns+` FROM sandboxes s
		WHERE s.node_id = ? AND s.state IN (?, ?) AND s.idle_timeout_ms > 0
		AND s.last_activity_at + s.idle_timeout_ms * 1000 < ? AND s.updated_at + s.idle_timeout_ms * 1000 < ?
		AND NOT EXISTS (SELECT 1 FROM operations o WHERE o.sandbox_id = s.id AND o.state IN (?, ?))
		ORDER BY s.last_activity_at, s.id LIMIT ?`,
		string(q.Node), string(model.StateRunning), string(model.StatePaused), now, now,
		string(model.OpPending), string(model.OpRunning), q.Limit)
	if err != nil {
		return nil, fmt.Errorf("list idle sandboxes: %w", err)
	}
	defer rows.Close()
	list, err := collectSandboxes(rows)
	if err != nil {
		return nil, fmt.Errorf("list idle sandboxes: %w", err)
	}
	return list, nil
}

// PurgeFinished implements store.Store. Deleted sandboxes go with every row
// that references them (metadata, egress profile links, command sessions,
// operations), in one transaction per call; then finished operations of
// the sandboxes that remain. A live sandbox's command sessions stay: a
// session's process may outlive its first token (a background command, a
// re-issued attachment token), and the store cannot tell whether it ended.
func (s *Store) PurgeFinished(ctx context.Context, p store.Purge) (store.PurgeCounts, error) {
	if p.Limit < 1 || p.Limit > maxPurgeLimit {
		return store.PurgeCounts{}, fmt.Errorf("purge: %w: limit %d must be between 1 and %d", model.ErrInvalid, p.Limit, maxPurgeLimit)
	}
	before := micro(p.Before)
	var c store.PurgeCounts
	err := s.write(ctx, false, func(t tx) error {
		c = store.PurgeCounts{}
		ids, err := t.deletedSandboxes(ctx, before, p.Limit)
		if err != nil {
			return err
		}
		for chunk := range slices.Chunk(ids, purgeChunk) {
			in, args := "("+placeholders(len(chunk))+")", make([]any, len(chunk))
			for i, id := range chunk {
				args[i] = id
			}
			for _, table := range []string{"sandbox_metadata", "sandbox_egress_profiles", "sandbox_volumes", "command_sessions", "operations", "sandbox_metrics"} {
				res, err := t.exec(ctx, `DELETE FROM `+table+` WHERE sandbox_id IN `+in, args...)
				if err != nil {
					return fmt.Errorf("purge %s of deleted sandboxes: %w", table, err)
				}
				if table == "command_sessions" {
					n, err := affected(res)
					if err != nil {
						return err
					}
					c.Sessions += n
				}
			}
			res, err := t.exec(ctx, `DELETE FROM sandboxes WHERE state = ? AND id IN `+in,
				append([]any{string(model.StateDeleted)}, args...)...)
			if err != nil {
				return fmt.Errorf("purge deleted sandboxes: %w", err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			c.Sandboxes += int(n)
		}
		res, err := t.exec(ctx, `DELETE FROM operations WHERE id IN (SELECT id FROM operations
			WHERE state IN (?, ?) AND finished_at IS NOT NULL AND finished_at < ? LIMIT ?)`,
			string(model.OpSucceeded), string(model.OpFailed), before, p.Limit)
		if err != nil {
			return fmt.Errorf("purge finished operations: %w", err)
		}
		c.Operations, err = affected(res)
		return err
	})
	if err != nil {
		return store.PurgeCounts{}, fmt.Errorf("purge rows finished before %s: %w", p.Before.UTC().Format(time.RFC3339), err)
	}
	return c, nil
}

// deletedSandboxes lists up to limit sandboxes deleted before before.
func (t tx) deletedSandboxes(ctx context.Context, before int64, limit int) ([]string, error) {
	rows, err := t.tx.QueryContext(ctx, t.s.q(`SELECT id FROM sandboxes WHERE state = ? AND updated_at < ?
		ORDER BY updated_at, id LIMIT ?`), string(model.StateDeleted), before, limit)
	if err != nil {
		return nil, fmt.Errorf("list deleted sandboxes: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("list deleted sandboxes: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list deleted sandboxes: %w", err)
	}
	return ids, nil
}

func affected(res interface{ RowsAffected() (int64, error) }) (int, error) {
	n, err := res.RowsAffected()
	return int(n), err
}
