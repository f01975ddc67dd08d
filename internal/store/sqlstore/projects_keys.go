package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// CreateProject implements store.Store. A duplicate ID or name gives
// store.ErrAlreadyExists.
func (s *Store) CreateProject(ctx context.Context, p model.Project) error {
	_, err := s.exec(ctx, `INSERT INTO projects (id, name, created_at) VALUES (?, ?, ?)`,
		string(p.ID), p.Name, micro(p.CreatedAt))
	if err != nil {
		return fmt.Errorf("create project %s: %w", p.ID, s.insertErr(err))
	}
	return nil
}

func scanProject(row interface{ Scan(...any) error }) (model.Project, error) {
	var (
		p       model.Project
		id      string
		created int64
	)
	if err := row.Scan(&id, &p.Name, &created); err != nil {
		return model.Project{}, err
	}
	c := columns{row: "project " + id}
	p.ID = c.projectID("id", id)
	if c.err != nil {
		return model.Project{}, c.err
	}
	p.CreatedAt = fromMicro(created)
	return p, nil
}

// GetProject implements store.Store.
func (s *Store) GetProject(ctx context.Context, id model.ProjectID) (model.Project, error) {
	p, err := scanProject(s.queryRow(ctx, `SELECT id, name, created_at FROM projects WHERE id = ?`, string(id)))
	if err != nil {
		return model.Project{}, fmt.Errorf("get project %s: %w", id, errNotFound(err))
	}
	return p, nil
}

// ListProjects implements store.Store, in (created_at, id) order. The
// system project, which owns unclaimed pool sandboxes, is not listed.
func (s *Store) ListProjects(ctx context.Context) ([]model.Project, error) {
	rows, err := s.query(ctx, `SELECT id, name, created_at FROM projects WHERE id <> ? ORDER BY created_at, id`, string(model.SystemProject))
	if err != nil {
		return nil, fmt.Errorf("list projects: %w", err)
	}
	defer rows.Close()
	var out []model.Project
	for rows.Next() {
		p, err := scanProject(rows)
		if err != nil {
			return nil, fmt.Errorf("list projects: %w", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list projects: %w", err)
	}
	return out, nil
}

const apiKeyColumns = `id, project_id, role, name, secret_hash, created_at, revoked_at`

func scanAPIKey(row interface{ Scan(...any) error }) (model.APIKey, error) {
	var (
		k                 model.APIKey
		id, project, role string
		created           int64
		revoked           sql.NullInt64
	)
	if err := row.Scan(&id, &project, &role, &k.Name, &k.SecretHash, &created, &revoked); err != nil {
		return model.APIKey{}, err
	}
	r, err := model.ParseRole(role)
	if err != nil {
		return model.APIKey{}, fmt.Errorf("stored API key %s: %w", id, err)
	}
	c := columns{row: "API key " + id}
	k.ID = c.apiKeyID("id", id)
	k.ProjectID = c.projectID("project_id", project)
	if c.err != nil {
		return model.APIKey{}, c.err
	}
	k.Role = r
	k.CreatedAt = fromMicro(created)
	k.RevokedAt = fromMicroPtr(revoked)
	return k, nil
}

// CreateAPIKey implements store.Store. A duplicate ID gives
// store.ErrAlreadyExists, an unknown project store.ErrNotFound, a used
// idempotency key *store.IdempotencyConflictError; none of them writes.
func (s *Store) CreateAPIKey(ctx context.Context, k model.APIKey, idem *store.IdempotencyRecord) error {
	if _, err := model.ParseRole(string(k.Role)); err != nil {
		return fmt.Errorf("create API key %s: %w", k.ID, err)
	}
	err := s.write(ctx, false, func(t tx) error {
		if err := t.insertIdempotency(ctx, idem); err != nil {
			return err
		}
		_, err := t.exec(ctx, `INSERT INTO api_keys (`+apiKeyColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			string(k.ID), string(k.ProjectID), string(k.Role), k.Name, nonNil(k.SecretHash),
			micro(k.CreatedAt), microPtr(k.RevokedAt))
		if err != nil {
			return s.insertErr(err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("create API key %s: %w", k.ID, err)
	}
	return nil
}

// GetAPIKey implements store.Store.
func (s *Store) GetAPIKey(ctx context.Context, id model.APIKeyID) (model.APIKey, error) {
	k, err := scanAPIKey(s.queryRow(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE id = ?`, string(id)))
	if err != nil {
		return model.APIKey{}, fmt.Errorf("get API key %s: %w", id, errNotFound(err))
	}
	return k, nil
}

// ListAPIKeys implements store.Store: every key of the project, revoked ones
// included, in (created_at, id) order.
func (s *Store) ListAPIKeys(ctx context.Context, project model.ProjectID) ([]model.APIKey, error) {
	rows, err := s.query(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE project_id = ? ORDER BY created_at, id`, string(project))
	if err != nil {
		return nil, fmt.Errorf("list API keys of project %s: %w", project, err)
	}
	defer rows.Close()
	var out []model.APIKey
	for rows.Next() {
		k, err := scanAPIKey(rows)
		if err != nil {
			return nil, fmt.Errorf("list API keys of project %s: %w", project, err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list API keys of project %s: %w", project, err)
	}
	return out, nil
}

// RevokeAPIKey implements store.Store.
func (s *Store) RevokeAPIKey(ctx context.Context, id model.APIKeyID, at time.Time) error {
	res, err := s.exec(ctx, `UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`, micro(at), string(id))
	if err != nil {
		return fmt.Errorf("revoke API key %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("revoke API key %s: %w", id, err)
	} else if n == 1 {
		return nil
	}
	// Nothing changed: already revoked (fine) or unknown (ErrNotFound).
	if _, err := s.GetAPIKey(ctx, id); err != nil {
		return fmt.Errorf("revoke: %w", err)
	}
	return nil
}

// CountAPIKeys implements store.Store: all keys, revoked ones included.
func (s *Store) CountAPIKeys(ctx context.Context) (int, error) {
	var n int
	if err := s.queryRow(ctx, `SELECT COUNT(*) FROM api_keys`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count API keys: %w", err)
	}
	return n, nil
}
