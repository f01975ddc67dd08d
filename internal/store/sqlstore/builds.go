package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

const buildColumns = `id, kind, source, recipe, context_dir, name, state, error_code, error_message, digest,
	steps_done, steps_cached, steps_total, attempts, created_at, updated_at, finished_at, project_id`

func scanBuild(row interface{ Scan(...any) error }) (model.TemplateBuild, error) {
	var (
		b                             model.TemplateBuild
		id, kind, name, state, digest string
		project                       string
		code, msg                     sql.NullString
		created, updated              int64
		finished                      sql.NullInt64
	)
	if err := row.Scan(&id, &kind, &b.Source, &b.Recipe, &b.Context, &name, &state, &code, &msg, &digest,
		&b.StepsDone, &b.StepsCached, &b.StepsTotal, &b.Attempts, &created, &updated, &finished, &project); err != nil {
		return model.TemplateBuild{}, err
	}
	c := columns{row: "build " + id}
	var err error
	if b.ID, err = model.ParseBuildID(id); err != nil {
		c.fail("id", id, err)
	}
	if b.Kind, err = model.ParseBuildKind(kind); err != nil {
		c.fail("kind", kind, err)
	}
	if b.State, err = model.ParseBuildState(state); err != nil {
		c.fail("state", state, err)
	}
	if name != "" {
		b.Name = c.taggedName("name", name)
	}
	if digest != "" {
		b.Digest = c.digest("digest", digest)
	}
	if project != "" {
		if b.Project, err = model.ParseProjectID(project); err != nil {
			c.fail("project_id", project, err)
		}
	}
	if c.err != nil {
		return model.TemplateBuild{}, c.err
	}
	if code.Valid {
		b.Error = &model.BuildError{Code: code.String, Message: msg.String}
	}
	b.CreatedAt = fromMicro(created)
	b.UpdatedAt = fromMicro(updated)
	b.FinishedAt = fromMicroPtr(finished)
	return b, nil
}

// CreateBuild implements store.Store.
func (s *Store) CreateBuild(ctx context.Context, b model.TemplateBuild, idem *store.IdempotencyRecord) error {
	if _, err := model.ParseBuildID(string(b.ID)); err != nil {
		return fmt.Errorf("create build: %w", err)
	}
	if _, err := model.ParseBuildKind(string(b.Kind)); err != nil {
		return fmt.Errorf("create build %s: %w", b.ID, err)
	}
	if b.Project != "" {
		if _, err := model.ParseProjectID(string(b.Project)); err != nil {
			return fmt.Errorf("create build %s: %w", b.ID, err)
		}
	}
	err := s.write(ctx, true, func(t tx) error {
		t.concernsBuilds()
		if err := t.insertIdempotency(ctx, idem); err != nil {
			return err
		}
		_, err := t.exec(ctx, `INSERT INTO template_builds (`+buildColumns+`, lease_owner, lease_expires_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, NULL, NULL, '', 0, 0, 0, 0, ?, ?, NULL, ?, '', 0)`,
			string(b.ID), string(b.Kind), b.Source, b.Recipe, b.Context, buildName(b.Name), string(model.BuildPending),
			micro(b.CreatedAt), micro(b.CreatedAt), string(b.Project))
		if err != nil {
			return s.insertErr(err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("create build %s: %w", b.ID, err)
	}
	return nil
}

// GetBuild implements store.Store.
func (s *Store) GetBuild(ctx context.Context, id model.BuildID) (model.TemplateBuild, error) {
	b, err := scanBuild(s.queryRow(ctx, `SELECT `+buildColumns+` FROM template_builds WHERE id = ?`, string(id)))
	if err != nil {
		return model.TemplateBuild{}, fmt.Errorf("get build %s: %w", id, errNotFound(err))
	}
	return b, nil
}

// ListBuilds implements store.Store.
func (s *Store) ListBuilds(ctx context.Context, q store.BuildQuery) (store.BuildPage, error) {
	if q.Limit < 1 || q.Limit > 1000 {
		return store.BuildPage{}, fmt.Errorf("list builds: %w: limit %d must be 1..1000", model.ErrInvalid, q.Limit)
	}
	project, limited, err := q.Scope.Project()
	if err != nil {
		return store.BuildPage{}, fmt.Errorf("list builds: %w", err)
	}
	var (
		where []string
		args  []any
	)
	if limited {
		where = append(where, "project_id = ?")
		args = append(args, string(project))
	}
	if !q.Name.IsZero() {
		where = append(where, "name = ?")
		args = append(args, buildName(q.Name))
	}
	if len(q.States) > 0 {
		where = append(where, "state IN (?"+strings.Repeat(", ?", len(q.States)-1)+")")
		for _, st := range q.States {
			args = append(args, string(st))
		}
	}
	if q.Before != nil {
		c := micro(q.Before.CreatedAt)
		where = append(where, "(created_at < ? OR (created_at = ? AND id < ?))")
		args = append(args, c, c, string(q.Before.ID))
	}
	query := `SELECT ` + buildColumns + ` FROM template_builds`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	rows, err := s.query(ctx, query+` ORDER BY created_at DESC, id DESC LIMIT ?`, append(args, q.Limit+1)...)
	if err != nil {
		return store.BuildPage{}, fmt.Errorf("list builds: %w", err)
	}
	defer rows.Close()
	var page store.BuildPage
	for rows.Next() {
		b, err := scanBuild(rows)
		if err != nil {
			return store.BuildPage{}, fmt.Errorf("list builds: %w", err)
		}
		page.Builds = append(page.Builds, b)
	}
	if err := rows.Err(); err != nil {
		return store.BuildPage{}, fmt.Errorf("list builds: %w", err)
	}
	if len(page.Builds) > q.Limit {
		page.Builds = page.Builds[:q.Limit]
		last := page.Builds[q.Limit-1]
		page.Next = &store.BuildCursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	return page, nil
}

// ClaimBuild implements store.Store, like ClaimOperation.
func (s *Store) ClaimBuild(ctx context.Context, c store.Claim) (model.TemplateBuild, error) {
	if err := checkClaim(c); err != nil {
		return model.TemplateBuild{}, fmt.Errorf("claim build: %w", err)
	}
	now := micro(c.Now)
	var b model.TemplateBuild
	err := s.write(ctx, true, func(t tx) error {
		t.concernsBuilds()
		var err error
		b, err = scanBuild(t.queryRow(ctx, `UPDATE template_builds
			SET state = ?, attempts = attempts + 1, lease_owner = ?, lease_expires_at = ?, updated_at = ?
			WHERE id = (
				SELECT o.id FROM template_builds o
				WHERE o.state IN (?, ?) AND (o.lease_owner = '' OR o.lease_expires_at <= ?)
				ORDER BY o.created_at, o.id
				LIMIT 1 `+s.d.ClaimLock+`)
			RETURNING `+buildColumns,
			string(model.BuildRunning), string(c.Owner), micro(c.Now.Add(c.Lease)), now,
			string(model.BuildPending), string(model.BuildRunning), now))
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNoWork
		}
		return err
	})
	if err != nil {
		if errors.Is(err, store.ErrNoWork) {
			return model.TemplateBuild{}, store.ErrNoWork
		}
		return model.TemplateBuild{}, fmt.Errorf("claim build for %s: %w", c.Owner, err)
	}
	return b, nil
}

// BuildClaimable implements store.Store with the condition of ClaimBuild's
// sub-select (served by the index on state).
func (s *Store) BuildClaimable(ctx context.Context, now time.Time) (bool, error) {
	var n int
	err := s.queryRow(ctx, `SELECT COUNT(*) FROM (SELECT 1 FROM template_builds o
		WHERE o.state IN (?, ?) AND (o.lease_owner = '' OR o.lease_expires_at <= ?) LIMIT 1) c`,
		string(model.BuildPending), string(model.BuildRunning), micro(now)).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("look for a claimable build: %w", err)
	}
	return n > 0, nil
}

// leaseLost tells a missing build (store.ErrNotFound) from one that another
// owner holds or that finished (store.ErrLeaseLost).
func (s *Store) leaseLost(ctx context.Context, id model.BuildID, owner model.NodeID) error {
	var n int
	if err := s.queryRow(ctx, `SELECT COUNT(*) FROM template_builds WHERE id = ?`, string(id)).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return store.ErrNotFound
	}
	return fmt.Errorf("%w: build %s is not running under %s", store.ErrLeaseLost, id, owner)
}

// RenewBuildLease implements store.Store; it wakes no watcher.
func (s *Store) RenewBuildLease(ctx context.Context, id model.BuildID, c store.Claim) error {
	if err := checkClaim(c); err != nil {
		return fmt.Errorf("renew lease of %s: %w", id, err)
	}
	res, err := s.exec(ctx, `UPDATE template_builds SET lease_expires_at = ? WHERE id = ? AND lease_owner = ? AND state = ?`,
		micro(c.Now.Add(c.Lease)), string(id), string(c.Owner), string(model.BuildRunning))
	if err == nil {
		if err = oneRow(res); err != nil {
			err = s.leaseLost(ctx, id, c.Owner)
		}
	}
	if err != nil {
		return fmt.Errorf("renew lease of %s: %w", id, err)
	}
	return nil
}

// SetBuildProgress implements store.Store.
func (s *Store) SetBuildProgress(ctx context.Context, id model.BuildID, owner model.NodeID, done, cached, total int, now time.Time) error {
	var n int64
	err := s.write(ctx, true, func(t tx) error {
		t.concernsBuilds()
		res, err := t.exec(ctx, `UPDATE template_builds SET steps_done = ?, steps_cached = ?, steps_total = ?, updated_at = ?
			WHERE id = ? AND lease_owner = ? AND state = ?`,
			done, cached, total, micro(now), string(id), string(owner), string(model.BuildRunning))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err == nil && n != 1 {
		err = s.leaseLost(ctx, id, owner)
	}
	if err != nil {
		return fmt.Errorf("set progress of build %s: %w", id, err)
	}
	return nil
}

// FinishBuild implements store.Store.
func (s *Store) FinishBuild(ctx context.Context, f store.BuildFinish) error {
	switch {
	case f.State != model.BuildSucceeded && f.State != model.BuildFailed:
		return fmt.Errorf("finish build %s: %w: final state must be succeeded or failed, not %q", f.ID, model.ErrInvalid, f.State)
	case f.State == model.BuildSucceeded && f.Digest == "":
		return fmt.Errorf("finish build %s: %w: a succeeded build needs a digest", f.ID, model.ErrInvalid)
	}
	var code, msg sql.NullString
	if f.Error != nil {
		code, msg = sql.NullString{String: f.Error.Code, Valid: true}, sql.NullString{String: f.Error.Message, Valid: true}
	}
	err := s.write(ctx, true, func(t tx) error {
		t.concernsBuilds()
		var state, owner, name string
		if err := t.queryRow(ctx, `SELECT state, lease_owner, name FROM template_builds WHERE id = ? `+s.d.RowLock,
			string(f.ID)).Scan(&state, &owner, &name); err != nil {
			return errNotFound(err)
		}
		if model.BuildState(state) != model.BuildRunning || owner != string(f.Owner) {
			return fmt.Errorf("%w: build is %s, leased to %q", store.ErrLeaseLost, state, owner)
		}
		now := micro(f.Now)
		if f.State == model.BuildSucceeded && f.Template != nil {
			if f.Template.Digest != f.Digest {
				return fmt.Errorf("%w: build %s finishes with %s but records template %s", model.ErrInvalid, f.ID, f.Digest, f.Template.Digest)
			}
			if err := t.putTemplate(ctx, *f.Template); err != nil {
				return fmt.Errorf("record template %s: %w", f.Digest, err)
			}
		}
		if f.State == model.BuildSucceeded && name != "" {
			tn, err := model.ParseTaggedName(name)
			if err != nil {
				return fmt.Errorf("build %s names %q: %w", f.ID, name, err)
			}
			if err := t.setTemplateTag(ctx, tn, f.Digest, f.Now); err != nil {
				return fmt.Errorf("name %s: %w", tn, err)
			}
		}
		_, err := t.exec(ctx, `UPDATE template_builds SET state = ?, error_code = ?, error_message = ?, digest = ?,
			updated_at = ?, finished_at = ? WHERE id = ?`,
			string(f.State), code, msg, string(f.Digest), now, now, string(f.ID))
		return err
	})
	if err != nil {
		return fmt.Errorf("finish build %s: %w", f.ID, err)
	}
	return nil
}

// ReleaseBuildLeases implements store.Store.
func (s *Store) ReleaseBuildLeases(ctx context.Context, owner model.NodeID, now time.Time) (int, error) {
	if owner == "" {
		return 0, fmt.Errorf("release build leases: %w: empty owner", model.ErrInvalid)
	}
	var n int64
	err := s.write(ctx, true, func(t tx) error {
		t.concernsBuilds()
		res, err := t.exec(ctx, `UPDATE template_builds SET lease_expires_at = 0
			WHERE lease_owner = ? AND state IN (?, ?) AND lease_expires_at <> 0`,
			string(owner), string(model.BuildPending), string(model.BuildRunning))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("release build leases of %s at %s: %w", owner, now.UTC().Format(time.RFC3339), err)
	}
	return int(n), nil
}

// buildName is a build's name as stored: "name:tag", or "" for none.
func buildName(n model.TaggedName) string {
	if n.IsZero() {
		return ""
	}
	return n.String()
}
