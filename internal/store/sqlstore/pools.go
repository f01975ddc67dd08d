package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

const poolColumns = `p.id, p.template, p.environment, p.cpus, p.memory_mib, p.size, p.current_digest, p.previous_digest,
	p.hits, p.misses, p.last_used_at, p.created_at, p.updated_at`

func scanPool(row interface{ Scan(...any) error }) (model.Pool, error) {
	var (
		p                         model.Pool
		id, tpl, cur, prev        string
		lastUsed, created, update int64
	)
	if err := row.Scan(&id, &tpl, &p.Key.Environment, &p.Key.CPUs, &p.Key.MemoryMiB, &p.Size, &cur, &prev,
		&p.Hits, &p.Misses, &lastUsed, &created, &update); err != nil {
		return model.Pool{}, err
	}
	var err error
	if p.ID, err = model.ParsePoolID(id); err != nil {
		return model.Pool{}, fmt.Errorf("stored pool: %w", err)
	}
	if p.Key.Template, err = model.ParseTemplateRef(tpl); err != nil {
		return model.Pool{}, fmt.Errorf("stored pool %s: %w", id, err)
	}
	c := columns{row: "pool " + id}
	if cur != "" {
		p.Current = c.digest("current_digest", cur)
	}
	if prev != "" {
		p.Previous = c.digest("previous_digest", prev)
	}
	if c.err != nil {
		return model.Pool{}, c.err
	}
	p.LastUsed = fromMicroOrZero(lastUsed)
	p.CreatedAt = fromMicro(created)
	p.UpdatedAt = fromMicro(update)
	return p, nil
}

// PutPool implements store.Store.
func (s *Store) PutPool(ctx context.Context, p model.Pool) (model.Pool, error) {
	if err := p.Validate(); err != nil {
		return model.Pool{}, fmt.Errorf("put pool: %w", err)
	}
	var out model.Pool
	err := s.write(ctx, true, func(t tx) error {
		t.concernsAll() // every node keeps the pools filled
		key := p.Key
		if _, err := model.ParsePoolID(string(p.ID)); err != nil {
			return err
		}
		// One statement: concurrent first PUTs of a key do not both insert.
		_, err := t.exec(ctx, `INSERT INTO pools (id, template, environment, cpus, memory_mib, size, current_digest, previous_digest,
			hits, misses, last_used_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, '', '', 0, 0, ?, ?, ?)
			ON CONFLICT (template, environment, cpus, memory_mib)
			DO UPDATE SET size = excluded.size, updated_at = excluded.updated_at, last_used_at = excluded.last_used_at`,
			string(p.ID), key.Template.String(), key.Environment, key.CPUs, key.MemoryMiB, p.Size,
			microOrZero(p.LastUsed), micro(p.CreatedAt), micro(p.UpdatedAt))
		if err != nil {
			return s.insertErr(err)
		}
		out, err = scanPool(t.queryRow(ctx, `SELECT `+poolColumns+` FROM pools p
			WHERE p.template = ? AND p.environment = ? AND p.cpus = ? AND p.memory_mib = ?`,
			key.Template.String(), key.Environment, key.CPUs, key.MemoryMiB))
		return err
	})
	if err != nil {
		return model.Pool{}, fmt.Errorf("put pool %s: %w", p.Key.Template, err)
	}
	return out, nil
}

// GetPool implements store.Store.
func (s *Store) GetPool(ctx context.Context, id model.PoolID) (model.Pool, error) {
	p, err := scanPool(s.queryRow(ctx, `SELECT `+poolColumns+` FROM pools p WHERE p.id = ?`, string(id)))
	if err != nil {
		return model.Pool{}, fmt.Errorf("get pool %s: %w", id, errNotFound(err))
	}
	return p, nil
}

// FindPool implements store.Store.
func (s *Store) FindPool(ctx context.Context, key model.PoolKey) (model.Pool, error) {
	p, err := scanPool(s.queryRow(ctx, `SELECT `+poolColumns+` FROM pools p
		WHERE p.template = ? AND p.environment = ? AND p.cpus = ? AND p.memory_mib = ?`,
		key.Template.String(), key.Environment, key.CPUs, key.MemoryMiB))
	if err != nil {
		return model.Pool{}, fmt.Errorf("find pool %s: %w", key.Template, errNotFound(err))
	}
	return p, nil
}

// ListPools implements store.Store, in (created_at, id) order.
func (s *Store) ListPools(ctx context.Context) ([]model.Pool, error) {
	rows, err := s.query(ctx, `SELECT `+poolColumns+` FROM pools p ORDER BY p.created_at, p.id`)
	if err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	defer rows.Close()
	var out []model.Pool
	for rows.Next() {
		p, err := scanPool(rows)
		if err != nil {
			return nil, fmt.Errorf("list pools: %w", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	return out, nil
}

// DeletePool implements store.Store.
func (s *Store) DeletePool(ctx context.Context, id model.PoolID) (model.Pool, error) {
	var out model.Pool
	err := s.write(ctx, true, func(t tx) error {
		t.concernsAll() // every node keeps the pools filled
		var err error
		if out, err = scanPool(t.queryRow(ctx, `SELECT `+poolColumns+` FROM pools p WHERE p.id = ? `+t.s.d.RowLock, string(id))); err != nil {
			return errNotFound(err)
		}
		_, err = t.exec(ctx, `DELETE FROM pools WHERE id = ?`, string(id))
		return err
	})
	if err != nil {
		return model.Pool{}, fmt.Errorf("delete pool %s: %w", id, err)
	}
	return out, nil
}

// SetPoolRelease implements store.Store.
func (s *Store) SetPoolRelease(ctx context.Context, id model.PoolID, digest model.TemplateDigest, now time.Time) (model.Pool, error) {
	var out model.Pool
	err := s.write(ctx, true, func(t tx) error {
		t.concernsAll() // every node keeps the pools filled
		_, err := t.exec(ctx, `UPDATE pools SET previous_digest = current_digest, current_digest = ?, updated_at = ?
			WHERE id = ? AND current_digest <> ?`, string(digest), micro(now), string(id), string(digest))
		if err != nil {
			return err
		}
		out, err = scanPool(t.queryRow(ctx, `SELECT `+poolColumns+` FROM pools p WHERE p.id = ?`, string(id)))
		return errNotFound(err)
	})
	if err != nil {
		return model.Pool{}, fmt.Errorf("set release of pool %s: %w", id, err)
	}
	return out, nil
}

// ListPoolSandboxes implements store.Store.
func (s *Store) ListPoolSandboxes(ctx context.Context, node model.NodeID) ([]store.PoolSandbox, error) {
	q := `SELECT ` + sandboxColumns + ` FROM sandboxes s WHERE s.pool_id <> '' AND s.state <> ?`
	args := []any{string(model.StateDeleted)}
	if node != "" {
		q += ` AND s.node_id = ?`
		args = append(args, string(node))
	}
	rows, err := s.query(ctx, q+` ORDER BY s.created_at, s.id`, args...)
	if err != nil {
		return nil, fmt.Errorf("list pool sandboxes: %w", err)
	}
	defer rows.Close()
	var out []store.PoolSandbox
	for rows.Next() {
		sb, err := scanSandbox(rows)
		if err != nil {
			return nil, fmt.Errorf("list pool sandboxes: %w", err)
		}
		out = append(out, store.PoolSandbox{Pool: sb.Pool, Sandbox: sb})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list pool sandboxes: %w", err)
	}
	return out, nil
}

// CountPoolSandboxes implements store.Store.
func (s *Store) CountPoolSandboxes(ctx context.Context) ([]store.PoolSandboxCount, error) {
	rows, err := s.query(ctx, `SELECT pool_id, template_digest, state, COUNT(*) FROM sandboxes
		WHERE pool_id <> '' AND state <> ?
		GROUP BY pool_id, template_digest, state ORDER BY pool_id, template_digest, state`, string(model.StateDeleted))
	if err != nil {
		return nil, fmt.Errorf("count pool sandboxes: %w", err)
	}
	defer rows.Close()
	var out []store.PoolSandboxCount
	for rows.Next() {
		var pool, digest, state string
		var n int
		if err := rows.Scan(&pool, &digest, &state, &n); err != nil {
			return nil, fmt.Errorf("count pool sandboxes: %w", err)
		}
		st, err := model.ParseSandboxState(state)
		if err != nil {
			return nil, fmt.Errorf("count pool sandboxes: %w", err)
		}
		c := columns{row: "pool " + pool}
		d := c.digest("template_digest", digest)
		if c.err != nil {
			return nil, c.err
		}
		out = append(out, store.PoolSandboxCount{Pool: model.PoolID(pool), Template: d, State: st, N: n})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count pool sandboxes: %w", err)
	}
	return out, nil
}

// ClaimPoolSandbox implements store.Store. On PostgreSQL the candidate row
// is locked with SKIP LOCKED, so concurrent claims take different
// sandboxes instead of waiting for (and then missing) the same one; SQLite's
// immediate transactions serialize them.
func (s *Store) ClaimPoolSandbox(ctx context.Context, c store.PoolClaim) (model.Sandbox, error) {
	if c.ProjectID == model.SystemProject || c.ProjectID == "" {
		return model.Sandbox{}, fmt.Errorf("claim from pool %s: %w: no project to claim for", c.Pool, model.ErrInvalid)
	}
	if err := c.Egress.Check(); err != nil {
		return model.Sandbox{}, fmt.Errorf("claim from pool %s: %w", c.Pool, err)
	}
	egressText, err := encodeSpec(c.Egress)
	if err != nil {
		return model.Sandbox{}, fmt.Errorf("claim from pool %s: %w", c.Pool, err)
	}
	env, err := jsonMap(c.Env)
	if err != nil {
		return model.Sandbox{}, fmt.Errorf("claim from pool %s: env: %w", c.Pool, err)
	}
	metadata, err := jsonMap(c.Metadata)
	if err != nil {
		return model.Sandbox{}, fmt.Errorf("claim from pool %s: metadata: %w", c.Pool, err)
	}
	onTimeout, timeoutKind, err := onTimeoutColumns(c.Timeouts)
	if err != nil {
		return model.Sandbox{}, fmt.Errorf("claim from pool %s: %w", c.Pool, err)
	}
	if c.Timeouts.Idle < 0 || c.Timeouts.Idle > model.MaxIdleTimeout {
		return model.Sandbox{}, fmt.Errorf("claim from pool %s: %w: idle timeout %s must be between 0 and %s", c.Pool, model.ErrInvalid, c.Timeouts.Idle, model.MaxIdleTimeout)
	}
	selector, err := selectorJSON(c.NodeSelector)
	if err != nil {
		return model.Sandbox{}, fmt.Errorf("claim from pool %s: %w", c.Pool, err)
	}
	var out model.Sandbox
	err = s.write(ctx, true, func(t tx) error {
		t.concerns(c.Node)
		var raw string
		// The operations claim's lock clause names its table "o". The
		// literal pool_id <> '' lets the planners use the partial index.
		// Only an active node's sandboxes are handed out: a cordoned or
		// draining node takes no new sandboxes.
		err := t.queryRow(ctx, `SELECT o.id FROM sandboxes o
			WHERE o.pool_id <> '' AND o.pool_id = ? AND o.node_id = ? AND o.state = ? AND o.template_digest = ?
			AND o.environment = ? AND o.cpus = ? AND o.memory_mib = ? AND o.disk_mib = ?
			AND EXISTS (SELECT 1 FROM nodes n WHERE n.id = o.node_id AND n.state = 'active')
			ORDER BY o.created_at, o.id LIMIT 1 `+t.s.d.ClaimLock,
			string(c.Pool), string(c.Node), string(model.StateRunning), string(c.Template), string(c.Environment),
			c.Resources.CPUs, c.Resources.MemoryMiB, c.Resources.DiskMiB).Scan(&raw)
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNoWork
		}
		if err != nil {
			return fmt.Errorf("find a ready sandbox: %w", err)
		}
		cols := columns{row: "sandbox " + raw}
		id := cols.sandboxID("id", raw)
		if cols.err != nil {
			return cols.err
		}
		// The quota first, while the sandbox is not the project's yet:
		// it is counted once, as what the claim adds.
		if err := t.admit(ctx, c.ProjectID, c.Resources); err != nil {
			return err
		}
		res, err := t.exec(ctx, `UPDATE sandboxes SET project_id = ?, pool_id = '', source = ?, env = ?, metadata = ?, public_ports = ?, egress = ?,
			idle_timeout_ms = ?, deadline = ?, on_timeout = ?, timeout_snapshot_kind = ?, last_activity_at = ?, node_selector = ?, created_at = ?, updated_at = ?
			WHERE id = ? AND pool_id = ? AND state = ?`,
			string(c.ProjectID), string(model.SourcePool), env, metadata, boolInt(c.PublicPorts), egressText,
			c.Timeouts.Idle.Milliseconds(), microOrZero(c.Timeouts.Deadline), string(onTimeout), string(timeoutKind), micro(c.Now), selector,
			micro(c.Now), micro(c.Now), string(id), string(c.Pool), string(model.StateRunning))
		if err != nil {
			return fmt.Errorf("claim sandbox %s: %w", id, err)
		}
		if err := oneRow(res); err != nil {
			return fmt.Errorf("claim sandbox %s: %w", id, err)
		}
		if err := t.setSandboxProfiles(ctx, id, c.Egress); err != nil {
			return err
		}
		for k, v := range c.Metadata {
			if _, err := t.exec(ctx, `INSERT INTO sandbox_metadata (sandbox_id, key, value) VALUES (?, ?, ?)`,
				string(id), k, v); err != nil {
				return fmt.Errorf("insert metadata %q: %w", k, err)
			}
		}
		op := c.Operation
		op.SandboxID, op.ProjectID, op.Kind = id, c.ProjectID, model.OpCreate
		op.State, op.Source, op.FinishedAt = model.OpSucceeded, model.SourcePool, &c.Now
		if err := t.insertOperationAs(ctx, op); err != nil {
			return err
		}
		if _, err := t.exec(ctx, `UPDATE pools SET hits = hits + 1, last_used_at = ? WHERE id = ?`, micro(c.Now), string(c.Pool)); err != nil {
			return fmt.Errorf("count the hit: %w", err)
		}
		if out, err = scanSandbox(t.queryRow(ctx, `SELECT `+sandboxColumns+` FROM sandboxes s WHERE s.id = ?`, string(id))); err != nil {
			return err
		}
		if c.Idempotency == nil {
			return nil
		}
		rec, err := c.Idempotency(out, op)
		if err != nil {
			return err
		}
		return t.insertIdempotency(ctx, rec)
	})
	if err != nil {
		return model.Sandbox{}, fmt.Errorf("claim from pool %s: %w", c.Pool, err)
	}
	return out, nil
}

// NotePoolMiss implements store.Store.
func (s *Store) NotePoolMiss(ctx context.Context, id model.PoolID, now time.Time) error {
	err := s.write(ctx, false, func(t tx) error {
		res, err := t.exec(ctx, `UPDATE pools SET misses = misses + 1, last_used_at = ? WHERE id = ?`, micro(now), string(id))
		if err != nil {
			return err
		}
		return oneRow(res)
	})
	if err != nil {
		return fmt.Errorf("count a miss of pool %s: %w", id, err)
	}
	return nil
}
