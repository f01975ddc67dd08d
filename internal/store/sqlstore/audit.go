package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

const maxAuditListLimit = 1000

// AppendAudit implements store.Store. The id comes from audit_seq, whose
// row the transaction holds locked until it commits, so ids become visible
// in ascending order.
func (s *Store) AppendAudit(ctx context.Context, e store.AuditEntry) (int64, error) {
	pv := e.PathValues
	if pv == nil {
		pv = map[string]string{}
	}
	values, err := json.Marshal(pv)
	if err != nil {
		return 0, fmt.Errorf("append audit: path values: %w", err)
	}
	var id int64
	err = s.write(ctx, false, func(t tx) error {
		if _, err := t.exec(ctx, `UPDATE audit_seq SET last = last + 1 WHERE id = 1`); err != nil {
			return fmt.Errorf("append audit: next id: %w", err)
		}
		if err := t.queryRow(ctx, `SELECT last FROM audit_seq WHERE id = 1`).Scan(&id); err != nil {
			return fmt.Errorf("append audit: next id: %w", err)
		}
		_, err := t.exec(ctx, `INSERT INTO audit (id, at, request_id, key_id, project, token_sandbox, method, route, action,
			resource_kind, resource_id, path_values, created_id, sandbox, status, error_code)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			id, micro(e.At), e.RequestID, string(e.KeyID), string(e.Project), string(e.TokenSandbox), e.Method, e.Route, e.Action,
			e.ResourceKind, e.ResourceID, string(values), e.CreatedID, string(e.Sandbox), e.Status, e.ErrorCode)
		if err != nil {
			return fmt.Errorf("append audit: %w", err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return id, nil
}

// ListAudit implements store.Store.
func (s *Store) ListAudit(ctx context.Context, q store.AuditQuery) (store.AuditPage, error) {
	if q.Limit < 1 || q.Limit > maxAuditListLimit {
		return store.AuditPage{}, fmt.Errorf("list audit: %w: limit %d must be between 1 and %d", model.ErrInvalid, q.Limit, maxAuditListLimit)
	}
	var (
		where []string
		args  []any
	)
	add := func(cond string, a ...any) {
		where = append(where, cond)
		args = append(args, a...)
	}
	if q.Project != "" {
		add(`project = ?`, string(q.Project))
	}
	if q.Key != "" {
		add(`key_id = ?`, string(q.Key))
	}
	if q.ActionPrefix != "" {
		add(`substr(action, 1, CAST(? AS INTEGER)) = ?`, len(q.ActionPrefix), q.ActionPrefix)
	}
	if q.Resource != "" {
		add(`(resource_id = ? OR created_id = ?)`, q.Resource, q.Resource)
	}
	if q.Sandbox != "" {
		add(`(sandbox = ? OR token_sandbox = ?)`, string(q.Sandbox), string(q.Sandbox))
	}
	switch r := q.Result; {
	case r.Status != 0:
		add(`status = ?`, r.Status)
	case r.OK && !r.Error:
		add(`status >= 100 AND status < 400`)
	case r.Error && !r.OK:
		add(`(status < 100 OR status >= 400)`)
	}
	if !q.Since.IsZero() {
		add(`at >= ?`, micro(q.Since))
	}
	if !q.Until.IsZero() {
		add(`at < ?`, micro(q.Until))
	}
	if q.Before > 0 {
		add(`id < ?`, q.Before)
	}
	query := `SELECT id, at, request_id, key_id, project, token_sandbox, method, route, action,
		resource_kind, resource_id, path_values, created_id, sandbox, status, error_code FROM audit`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, ` AND `)
	}
	query += ` ORDER BY id DESC LIMIT ?`
	args = append(args, q.Limit+1)
	rows, err := s.query(ctx, query, args...)
	if err != nil {
		return store.AuditPage{}, fmt.Errorf("list audit: %w", err)
	}
	defer rows.Close()
	page := store.AuditPage{Entries: []store.AuditEntry{}}
	for rows.Next() {
		e, err := scanAudit(rows)
		if err != nil {
			return store.AuditPage{}, fmt.Errorf("list audit: %w", err)
		}
		page.Entries = append(page.Entries, e)
	}
	if err := rows.Err(); err != nil {
		return store.AuditPage{}, fmt.Errorf("list audit: %w", err)
	}
	if len(page.Entries) > q.Limit {
		page.Entries = page.Entries[:q.Limit]
		page.Next = page.Entries[q.Limit-1].ID
	}
	return page, nil
}

func scanAudit(row interface{ Scan(...any) error }) (store.AuditEntry, error) {
	var (
		e                                  store.AuditEntry
		at                                 int64
		key, project, tokenSandbox, sb, pv string
	)
	if err := row.Scan(&e.ID, &at, &e.RequestID, &key, &project, &tokenSandbox, &e.Method, &e.Route, &e.Action,
		&e.ResourceKind, &e.ResourceID, &pv, &e.CreatedID, &sb, &e.Status, &e.ErrorCode); err != nil {
		return store.AuditEntry{}, err
	}
	e.At = fromMicro(at)
	c := columns{row: fmt.Sprintf("audit entry %d", e.ID)}
	if key != "" {
		e.KeyID = c.apiKeyID("key_id", key)
	}
	if project != "" {
		e.Project = c.projectID("project", project)
	}
	if tokenSandbox != "" {
		e.TokenSandbox = c.sandboxID("token_sandbox", tokenSandbox)
	}
	if sb != "" {
		e.Sandbox = c.sandboxID("sandbox", sb)
	}
	if err := json.Unmarshal([]byte(pv), &e.PathValues); err != nil {
		c.fail("path_values", pv, err)
	}
	if c.err != nil {
		return store.AuditEntry{}, c.err
	}
	return e, nil
}

// PurgeAudit implements store.Store.
func (s *Store) PurgeAudit(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit < 1 || limit > maxPurgeLimit {
		return 0, fmt.Errorf("purge audit: %w: limit %d must be between 1 and %d", model.ErrInvalid, limit, maxPurgeLimit)
	}
	// The oldest rows have the lowest ids: delete the first limit ids
	// whose time is before the bound.
	res, err := s.exec(ctx, `DELETE FROM audit WHERE id IN (SELECT id FROM audit WHERE at < ? ORDER BY id LIMIT ?)`, micro(before), limit)
	if err != nil {
		return 0, fmt.Errorf("purge audit: %w", err)
	}
	return affected(res)
}
