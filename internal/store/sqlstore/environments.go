package sqlstore

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// Execution environments: definitions by reference (written once, never
// changed) and each node's view of them, replaced as a whole at its start.

// PutEnvironment implements store.Store.
func (s *Store) PutEnvironment(ctx context.Context, rec store.EnvironmentRecord) (bool, error) {
	if _, err := model.ParseEnvironmentRef(string(rec.Ref)); err != nil {
		return false, fmt.Errorf("put environment: %w", err)
	}
	if got := model.EnvironmentRefOf(sha256.Sum256(rec.Definition)); got != rec.Ref {
		return false, fmt.Errorf("put environment %s: %w: the definition hashes to %s", rec.Ref, model.ErrInvalid, got)
	}
	if _, err := environment.ParseName(string(rec.Name)); err != nil {
		return false, fmt.Errorf("put environment %s: %w", rec.Ref, err)
	}
	if rec.SchemaVersion < 1 {
		return false, fmt.Errorf("put environment %s: %w: schema version %d", rec.Ref, model.ErrInvalid, rec.SchemaVersion)
	}
	res, err := s.exec(ctx, `INSERT INTO environments (ref, name, schema_version, definition, first_seen)
		VALUES (?, ?, ?, ?, ?) ON CONFLICT (ref) DO NOTHING`,
		string(rec.Ref), string(rec.Name), rec.SchemaVersion, string(rec.Definition), micro(rec.FirstSeen))
	if err != nil {
		return false, fmt.Errorf("put environment %s: %w", rec.Ref, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("put environment %s: %w", rec.Ref, err)
	}
	return n == 1, nil
}

const environmentColumns = `ref, name, schema_version, definition, first_seen`

func scanEnvironment(row interface{ Scan(...any) error }) (store.EnvironmentRecord, error) {
	var (
		ref, name, def string
		version        int
		first          int64
	)
	if err := row.Scan(&ref, &name, &version, &def, &first); err != nil {
		return store.EnvironmentRecord{}, err
	}
	r, err := model.ParseEnvironmentRef(ref)
	if err != nil {
		return store.EnvironmentRecord{}, fmt.Errorf("stored environment %q: %w", ref, err)
	}
	n, err := environment.ParseName(name)
	if err != nil {
		return store.EnvironmentRecord{}, fmt.Errorf("stored environment %s: %w", ref, err)
	}
	return store.EnvironmentRecord{Ref: r, Name: n, SchemaVersion: version, Definition: []byte(def), FirstSeen: fromMicro(first)}, nil
}

// GetEnvironment implements store.Store.
func (s *Store) GetEnvironment(ctx context.Context, ref model.EnvironmentRef) (store.EnvironmentRecord, error) {
	rec, err := scanEnvironment(s.queryRow(ctx, `SELECT `+environmentColumns+` FROM environments WHERE ref = ?`, string(ref)))
	if err != nil {
		return store.EnvironmentRecord{}, fmt.Errorf("get environment %s: %w", ref, errNotFound(err))
	}
	return rec, nil
}

// ListEnvironments implements store.Store.
func (s *Store) ListEnvironments(ctx context.Context) ([]store.EnvironmentRecord, error) {
	rows, err := s.query(ctx, `SELECT `+environmentColumns+` FROM environments ORDER BY name, first_seen, ref`)
	if err != nil {
		return nil, fmt.Errorf("list environments: %w", err)
	}
	defer rows.Close()
	out := []store.EnvironmentRecord{}
	for rows.Next() {
		rec, err := scanEnvironment(rows)
		if err != nil {
			return nil, fmt.Errorf("list environments: %w", err)
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list environments: %w", err)
	}
	return out, nil
}

// SetNodeEnvironments implements store.Store.
func (s *Store) SetNodeEnvironments(ctx context.Context, node model.NodeID, rows []store.NodeEnvironment) error {
	if _, err := model.ParseNodeID(string(node)); err != nil {
		return fmt.Errorf("set environments of node %s: %w", node, err)
	}
	seen := map[model.EnvironmentRef]bool{}
	for _, r := range rows {
		if r.NodeID != node {
			return fmt.Errorf("set environments of node %s: %w: a row of node %s", node, model.ErrInvalid, r.NodeID)
		}
		if seen[r.Ref] {
			return fmt.Errorf("set environments of node %s: %w: environment %s twice", node, model.ErrInvalid, r.Ref)
		}
		seen[r.Ref] = true
	}
	err := s.write(ctx, false, func(t tx) error {
		if _, err := t.exec(ctx, `DELETE FROM node_environments WHERE node_id = ?`, string(node)); err != nil {
			return err
		}
		for _, r := range rows {
			_, err := t.exec(ctx, `INSERT INTO node_environments (node_id, ref, enabled, available, reason, checked_at)
				VALUES (?, ?, ?, ?, ?, ?)`,
				string(node), string(r.Ref), boolInt(r.Enabled), boolInt(r.Available), r.Reason, micro(r.CheckedAt))
			if err != nil {
				return fmt.Errorf("environment %s: %w", r.Ref, s.insertErr(err))
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("set environments of node %s: %w", node, err)
	}
	return nil
}

// ListNodeEnvironments implements store.Store.
func (s *Store) ListNodeEnvironments(ctx context.Context, q store.NodeEnvironmentQuery) ([]store.NodeEnvironment, error) {
	query := `SELECT node_id, ref, enabled, available, reason, checked_at FROM node_environments WHERE 1 = 1`
	var args []any
	if q.NodeID != "" {
		query += ` AND node_id = ?`
		args = append(args, string(q.NodeID))
	}
	if q.Ref != "" {
		query += ` AND ref = ?`
		args = append(args, string(q.Ref))
	}
	rows, err := s.query(ctx, query+` ORDER BY ref, node_id`, args...)
	if err != nil {
		return nil, fmt.Errorf("list node environments: %w", err)
	}
	defer rows.Close()
	out := []store.NodeEnvironment{}
	for rows.Next() {
		var (
			node, ref, reason  string
			enabled, available int
			checked            int64
		)
		if err := rows.Scan(&node, &ref, &enabled, &available, &reason, &checked); err != nil {
			return nil, fmt.Errorf("list node environments: %w", err)
		}
		var c columns
		n := c.nodeID("node_id", node)
		r, err := model.ParseEnvironmentRef(ref)
		if err != nil {
			c.fail("ref", ref, err)
		}
		if c.err != nil {
			return nil, fmt.Errorf("list node environments: %w", c.err)
		}
		out = append(out, store.NodeEnvironment{NodeID: n, Ref: r, Enabled: enabled != 0, Available: available != 0, Reason: reason, CheckedAt: fromMicro(checked)})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list node environments: %w", err)
	}
	return out, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
