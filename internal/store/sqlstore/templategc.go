package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// Deleting and collecting templates. A template's row is never removed
// (deleted sandboxes reference it); it gets a tombstone, deleted_at.
//
// Race freedom on both dialects: a sandbox create and a tag move take a
// share lock on the live template row (lockLiveTemplate) and hold it until
// they commit; deleteLocked takes the row exclusively (RowLock), and only
// then counts the live sandboxes and tags. In PostgreSQL the exclusive lock
// waits for every create that holds the share lock, and the count, a later
// statement of a READ COMMITTED transaction, sees what they committed; a
// create that comes later waits for the delete and then finds no live row
// (its condition deleted_at IS NULL is re-checked on the new row version).
// SQLite's immediate transactions serialize all writers. So no sandbox row
// or tag ever references a tombstoned template.

// liveSandboxes is the condition of a sandbox that still uses its template.
const liveSandboxes = `state <> 'deleted'`

// CountTemplateUsers implements store.Store.
func (s *Store) CountTemplateUsers(ctx context.Context, scope store.Scope, digests ...model.TemplateDigest) (map[model.TemplateDigest]int, error) {
	project, limited, err := scope.Project()
	if err != nil {
		return nil, fmt.Errorf("count template users: %w", err)
	}
	query := `SELECT template_digest, COUNT(*) FROM sandboxes WHERE ` + liveSandboxes
	var args []any
	if limited {
		query += ` AND project_id = ?`
		args = append(args, string(project))
	}
	if len(digests) > 0 {
		query += ` AND template_digest IN (` + placeholders(len(digests)) + `)`
		for _, d := range digests {
			args = append(args, string(d))
		}
	}
	rows, err := s.query(ctx, query+` GROUP BY template_digest`, args...)
	if err != nil {
		return nil, fmt.Errorf("count template users: %w", err)
	}
	defer rows.Close()
	out := map[model.TemplateDigest]int{}
	for rows.Next() {
		var d string
		var n int
		if err := rows.Scan(&d, &n); err != nil {
			return nil, fmt.Errorf("count template users: %w", err)
		}
		out[model.TemplateDigest(d)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count template users: %w", err)
	}
	return out, nil
}

// inUse returns a *store.TemplateInUseError if live sandboxes use digest.
func (t tx) inUse(ctx context.Context, digest model.TemplateDigest) error {
	var n int
	if err := t.queryRow(ctx, `SELECT COUNT(*) FROM sandboxes WHERE template_digest = ? AND `+liveSandboxes,
		string(digest)).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	rows, err := t.tx.QueryContext(ctx, t.s.q(`SELECT id FROM sandboxes WHERE template_digest = ? AND `+liveSandboxes+
		` ORDER BY id LIMIT ?`), string(digest), store.MaxInUseExamples)
	if err != nil {
		return err
	}
	defer rows.Close()
	e := &store.TemplateInUseError{Digest: digest, Sandboxes: n}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return err
		}
		e.Examples = append(e.Examples, model.SandboxID(id))
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return e
}

// lockForDelete takes the exclusive lock on a live template's row, or
// answers store.ErrNotFound.
func (t tx) lockForDelete(ctx context.Context, digest model.TemplateDigest) error {
	var one int
	err := t.queryRow(ctx, `SELECT 1 FROM templates WHERE digest = ? AND deleted_at IS NULL `+t.s.d.RowLock,
		string(digest)).Scan(&one)
	if err != nil {
		return errNotFound(err)
	}
	return nil
}

// DeleteTemplateTag implements store.Store.
func (s *Store) DeleteTemplateTag(ctx context.Context, name model.TaggedName) (model.TemplateDigest, error) {
	var digest model.TemplateDigest
	err := s.write(ctx, false, func(t tx) error {
		var d string
		if err := t.queryRow(ctx, `SELECT digest FROM template_tags WHERE name = ? AND tag = ? `+s.d.RowLock,
			string(name.Name), string(name.Tag)).Scan(&d); err != nil {
			return errNotFound(err)
		}
		digest = model.TemplateDigest(d)
		if err := t.inUse(ctx, digest); err != nil {
			return err
		}
		_, err := t.exec(ctx, `DELETE FROM template_tags WHERE name = ? AND tag = ?`, string(name.Name), string(name.Tag))
		return err
	})
	if err != nil {
		return "", fmt.Errorf("delete template tag %s: %w", name, err)
	}
	return digest, nil
}

// DeleteTemplate implements store.Store.
func (s *Store) DeleteTemplate(ctx context.Context, digest model.TemplateDigest, now time.Time) ([]model.TaggedName, error) {
	var removed []model.TaggedName
	err := s.write(ctx, false, func(t tx) error {
		if err := t.lockForDelete(ctx, digest); err != nil {
			return err
		}
		if err := t.inUse(ctx, digest); err != nil {
			return err
		}
		var err error
		if removed, err = t.tagsOf(ctx, digest); err != nil {
			return err
		}
		if _, err := t.exec(ctx, `DELETE FROM template_tags WHERE digest = ?`, string(digest)); err != nil {
			return err
		}
		_, err = t.exec(ctx, `UPDATE templates SET deleted_at = ? WHERE digest = ?`, micro(now), string(digest))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("delete template %s: %w", digest, err)
	}
	return removed, nil
}

// tagsOf returns the sorted tags of digest.
func (t tx) tagsOf(ctx context.Context, digest model.TemplateDigest) ([]model.TaggedName, error) {
	rows, err := t.tx.QueryContext(ctx, t.s.q(`SELECT name, tag FROM template_tags WHERE digest = ?`), string(digest))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []model.TaggedName
	for rows.Next() {
		var n, tag string
		if err := rows.Scan(&n, &tag); err != nil {
			return nil, err
		}
		c := columns{row: "template tag " + n + ":" + tag}
		tn := model.TaggedName{Name: c.templateName("name", n), Tag: c.templateTag("tag", tag)}
		if c.err != nil {
			return nil, c.err
		}
		out = append(out, tn)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(out, model.TaggedName.Compare)
	return out, nil
}

// TemplateGCCandidates implements store.Store.
func (s *Store) TemplateGCCandidates(ctx context.Context, createdBefore time.Time) ([]model.TemplateDigest, error) {
	query, args := `SELECT t.digest FROM templates t WHERE t.deleted_at IS NULL
		AND NOT EXISTS (SELECT 1 FROM template_tags n WHERE n.digest = t.digest)
		AND NOT EXISTS (SELECT 1 FROM sandboxes s WHERE s.template_digest = t.digest AND s.`+liveSandboxes+`)`, []any(nil)
	if !createdBefore.IsZero() {
		query, args = query+` AND t.created_at < ?`, []any{micro(createdBefore)}
	}
	rows, err := s.query(ctx, query+` ORDER BY t.digest`, args...)
	if err != nil {
		return nil, fmt.Errorf("template gc candidates: %w", err)
	}
	defer rows.Close()
	var out []model.TemplateDigest
	for rows.Next() {
		var d string
		if err := rows.Scan(&d); err != nil {
			return nil, fmt.Errorf("template gc candidates: %w", err)
		}
		c := columns{row: "template " + d}
		out = append(out, c.digest("digest", d))
		if c.err != nil {
			return nil, c.err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("template gc candidates: %w", err)
	}
	return out, nil
}

// errUsed ends TombstoneTemplate's transaction without a change.
var errUsed = errors.New("template used")

// TombstoneTemplate implements store.Store.
func (s *Store) TombstoneTemplate(ctx context.Context, digest model.TemplateDigest, now time.Time) (bool, error) {
	err := s.write(ctx, false, func(t tx) error {
		if err := t.lockForDelete(ctx, digest); err != nil {
			return err
		}
		var tags, users int
		if err := t.queryRow(ctx, `SELECT
			(SELECT COUNT(*) FROM template_tags WHERE digest = ?),
			(SELECT COUNT(*) FROM sandboxes WHERE template_digest = ? AND `+liveSandboxes+`)`,
			string(digest), string(digest)).Scan(&tags, &users); err != nil {
			return err
		}
		if tags > 0 || users > 0 {
			return errUsed
		}
		_, err := t.exec(ctx, `UPDATE templates SET deleted_at = ? WHERE digest = ?`, micro(now), string(digest))
		return err
	})
	switch {
	case errors.Is(err, errUsed), errors.Is(err, store.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("tombstone template %s: %w", digest, err)
	}
	return true, nil
}

// TemplateState implements store.Store.
func (s *Store) TemplateState(ctx context.Context, digest model.TemplateDigest) (store.TemplateRowState, error) {
	var deleted sql.NullInt64
	err := s.queryRow(ctx, `SELECT deleted_at FROM templates WHERE digest = ?`, string(digest)).Scan(&deleted)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.TemplateAbsent, nil
	case err != nil:
		return 0, fmt.Errorf("template %s state: %w", digest, err)
	case deleted.Valid:
		return store.TemplateTombstoned, nil
	}
	return store.TemplateLive, nil
}

// templateStatesBatch bounds the digests of one TemplateStates query.
const templateStatesBatch = 500

// TemplateStates implements store.Store, one query per 500 digests.
func (s *Store) TemplateStates(ctx context.Context, digests []model.TemplateDigest) (map[model.TemplateDigest]store.TemplateRowState, error) {
	out := make(map[model.TemplateDigest]store.TemplateRowState, len(digests))
	for _, d := range digests {
		out[d] = store.TemplateAbsent
	}
	for rest := digests; len(rest) > 0; {
		n := min(len(rest), templateStatesBatch)
		args := make([]any, n)
		for i, d := range rest[:n] {
			args[i] = string(d)
		}
		if err := s.templateStates(ctx, args, out); err != nil {
			return nil, fmt.Errorf("template states: %w", err)
		}
		rest = rest[n:]
	}
	return out, nil
}

// templateStates records in out the state of each stored digest of args.
func (s *Store) templateStates(ctx context.Context, args []any, out map[model.TemplateDigest]store.TemplateRowState) error {
	rows, err := s.query(ctx, `SELECT digest, deleted_at IS NOT NULL FROM templates WHERE digest IN (`+placeholders(len(args))+`)`, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var d string
		var deleted bool
		if err := rows.Scan(&d, &deleted); err != nil {
			return err
		}
		st := store.TemplateLive
		if deleted {
			st = store.TemplateTombstoned
		}
		out[model.TemplateDigest(d)] = st
	}
	return rows.Err()
}
