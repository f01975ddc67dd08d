package sqlstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// ListOperations implements store.Store: newest (created_at, id) first.
// With a sandbox the seek runs on operations_sandbox, else on
// operations_project (migration 014); state and kind filter the rows
// found, in index order, so a page stops after limit+1 matches.
func (s *Store) ListOperations(ctx context.Context, q store.OperationQuery) (store.OperationPage, error) {
	if q.Limit < MinListLimit || q.Limit > MaxListLimit {
		return store.OperationPage{}, fmt.Errorf("list operations: %w: limit %d must be between %d and %d",
			model.ErrInvalid, q.Limit, MinListLimit, MaxListLimit)
	}
	if q.ProjectID == "" {
		return store.OperationPage{}, fmt.Errorf("list operations: %w: no project", model.ErrInvalid)
	}
	var (
		where = []string{"o.project_id = ?"}
		args  = []any{string(q.ProjectID)}
	)
	if q.SandboxID != "" {
		// One sandbox's operations are few: seek them on
		// operations_sandbox. "|| ''" keeps the planner (SQLite's, which
		// has no statistics) from walking the whole project on
		// operations_project instead; the project still has to match.
		where[0] = "o.project_id || '' = ?"
		where = append(where, "o.sandbox_id = ?")
		args = append(args, string(q.SandboxID))
	}
	if len(q.States) > 0 {
		where = append(where, "o.state IN ("+placeholders(len(q.States))+")")
		for _, st := range q.States {
			args = append(args, string(st))
		}
	}
	if len(q.Kinds) > 0 {
		where = append(where, "o.kind IN ("+placeholders(len(q.Kinds))+")")
		for _, k := range q.Kinds {
			args = append(args, string(k))
		}
	}
	if q.After != nil {
		where = append(where, "(o.created_at < ? OR (o.created_at = ? AND o.id < ?))")
		c := micro(q.After.CreatedAt)
		args = append(args, c, c, string(q.After.ID))
	}
	args = append(args, q.Limit+1)
	rows, err := s.query(ctx, `SELECT `+operationColumns+` FROM operations o WHERE `+strings.Join(where, " AND ")+
		` ORDER BY o.created_at DESC, o.id DESC LIMIT ?`, args...)
	if err != nil {
		return store.OperationPage{}, fmt.Errorf("list operations of project %s: %w", q.ProjectID, err)
	}
	defer rows.Close()
	var list []model.Operation
	for rows.Next() {
		op, err := scanOperation(rows)
		if err != nil {
			return store.OperationPage{}, fmt.Errorf("list operations of project %s: %w", q.ProjectID, err)
		}
		list = append(list, op)
	}
	if err := rows.Err(); err != nil {
		return store.OperationPage{}, fmt.Errorf("list operations of project %s: %w", q.ProjectID, err)
	}
	page := store.OperationPage{Operations: list}
	if len(list) > q.Limit {
		page.Operations = list[:q.Limit]
		last := page.Operations[q.Limit-1]
		page.Next = &store.OperationCursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	return page, nil
}
