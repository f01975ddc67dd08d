package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

const idempotencyColumns = `project_id, key_hash, method, path, request_hash, status, sealed_body, created_at`

// insertIdempotency stores rec inside t. When a record with the same
// (project, key hash) exists it returns *store.IdempotencyConflictError with
// the stored record; the caller's transaction is then rolled back, so the
// mutation is not applied. ON CONFLICT DO NOTHING waits for a concurrent
// insert of the same key to commit (PostgreSQL) or is serialized by the
// immediate transaction (SQLite), so exactly one of several concurrent
// requests with one key succeeds.
func (t tx) insertIdempotency(ctx context.Context, rec *store.IdempotencyRecord) error {
	if rec == nil {
		return nil
	}
	if len(rec.KeyHash) == 0 {
		return fmt.Errorf("%w: idempotency record without key hash", model.ErrInvalid)
	}
	res, err := t.exec(ctx, `INSERT INTO idempotency (`+idempotencyColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (project_id, key_hash) DO NOTHING`,
		string(rec.ProjectID), rec.KeyHash, rec.Method, rec.Path, nonNil(rec.RequestHash),
		rec.Status, nonNil(rec.SealedBody), micro(rec.CreatedAt))
	if err != nil {
		return fmt.Errorf("insert idempotency record: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("insert idempotency record: %w", err)
	}
	if n == 1 {
		return nil
	}
	existing, err := scanIdempotency(t.queryRow(ctx, `SELECT `+idempotencyColumns+`
		FROM idempotency WHERE project_id = ? AND key_hash = ?`, string(rec.ProjectID), rec.KeyHash))
	if err != nil {
		// The conflicting row vanished between the insert and the read (only
		// DeleteIdempotencyBefore removes rows): report it rather than guess.
		return fmt.Errorf("read conflicting idempotency record: %w", errNotFound(err))
	}
	return &store.IdempotencyConflictError{Existing: existing}
}

func scanIdempotency(row interface{ Scan(...any) error }) (store.IdempotencyRecord, error) {
	var (
		r       store.IdempotencyRecord
		project string
		created int64
	)
	if err := row.Scan(&project, &r.KeyHash, &r.Method, &r.Path, &r.RequestHash, &r.Status, &r.SealedBody, &created); err != nil {
		return store.IdempotencyRecord{}, err
	}
	c := columns{row: "idempotency record"}
	r.ProjectID = c.projectID("project_id", project)
	if c.err != nil {
		return store.IdempotencyRecord{}, c.err
	}
	r.CreatedAt = fromMicro(created)
	return r, nil
}

// GetIdempotency implements store.Store.
func (s *Store) GetIdempotency(ctx context.Context, project model.ProjectID, keyHash []byte) (store.IdempotencyRecord, error) {
	r, err := scanIdempotency(s.queryRow(ctx, `SELECT `+idempotencyColumns+`
		FROM idempotency WHERE project_id = ? AND key_hash = ?`, string(project), nonNil(keyHash)))
	if err != nil {
		return store.IdempotencyRecord{}, fmt.Errorf("get idempotency record of project %s: %w", project, errNotFound(err))
	}
	return r, nil
}

// DeleteIdempotencyBefore implements store.Store: it removes records created
// strictly before the given time and returns how many it removed.
func (s *Store) DeleteIdempotencyBefore(ctx context.Context, before time.Time) (int, error) {
	res, err := s.exec(ctx, `DELETE FROM idempotency WHERE created_at < ?`, micro(before))
	if err != nil {
		return 0, fmt.Errorf("delete idempotency records before %s: %w", before.Format(time.RFC3339), err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("delete idempotency records: %w", err)
	}
	return int(n), nil
}

// PutIdempotency implements store.Store: it stores rec on its own, or returns
// *store.IdempotencyConflictError with the record already stored under the
// same (project, key hash).
func (s *Store) PutIdempotency(ctx context.Context, rec store.IdempotencyRecord) error {
	err := s.write(ctx, false, func(t tx) error { return t.insertIdempotency(ctx, &rec) })
	if err != nil {
		return fmt.Errorf("put idempotency record of project %s: %w", rec.ProjectID, err)
	}
	return nil
}
