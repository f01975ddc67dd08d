package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/tracing"
)

const operationColumns = `o.id, o.project_id, o.sandbox_id, o.kind, o.state, o.error_code, o.error_message,
	o.attempts, o.not_before, o.created_at, o.updated_at, o.finished_at, o.source, o.trace_parent, o.snapshot_kind`

// operationReturning is operationColumns without the alias, for RETURNING.
const operationReturning = `id, project_id, sandbox_id, kind, state, error_code, error_message,
	attempts, not_before, created_at, updated_at, finished_at, source, trace_parent, snapshot_kind`

func scanOperation(row interface{ Scan(...any) error }) (model.Operation, error) {
	var (
		op                                           model.Operation
		id, project, sandbox, kind, st, source, snap string
		code, msg                                    sql.NullString
		notBefore, created, updated                  int64
		finished                                     sql.NullInt64
	)
	if err := row.Scan(&id, &project, &sandbox, &kind, &st, &code, &msg, &op.Attempts, &notBefore, &created, &updated, &finished, &source, &op.TraceParent, &snap); err != nil {
		return model.Operation{}, err
	}
	if source != "" {
		src, err := model.ParseSource(source)
		if err != nil {
			return model.Operation{}, fmt.Errorf("stored operation %s: %w", id, err)
		}
		op.Source = src
	}
	if snap != "" {
		sk, err := model.ParseSnapshotKind(snap)
		if err != nil {
			return model.Operation{}, fmt.Errorf("stored operation %s: %w", id, err)
		}
		op.SnapshotKind = sk
	}
	k, err := model.ParseOperationKind(kind)
	if err != nil {
		return model.Operation{}, fmt.Errorf("stored operation %s: %w", id, err)
	}
	op.Kind = k
	switch s := model.OperationState(st); s {
	case model.OpPending, model.OpRunning, model.OpSucceeded, model.OpFailed:
		op.State = s
	default:
		return model.Operation{}, fmt.Errorf("stored operation %s: unknown state %q", id, st)
	}
	if code.Valid {
		op.Error = &model.OperationError{Code: code.String, Message: msg.String}
	}
	c := columns{row: "operation " + id}
	op.ID = c.operationID("id", id)
	op.ProjectID = c.projectID("project_id", project)
	op.SandboxID = c.sandboxID("sandbox_id", sandbox)
	if c.err != nil {
		return model.Operation{}, c.err
	}
	op.NotBefore = fromMicroOrZero(notBefore)
	op.CreatedAt = fromMicro(created)
	op.UpdatedAt = fromMicro(updated)
	op.FinishedAt = fromMicroPtr(finished)
	return op, nil
}

// opError splits an optional operation error into nullable columns.
func opError(e *model.OperationError) (code, msg sql.NullString) {
	if e == nil {
		return sql.NullString{}, sql.NullString{}
	}
	return sql.NullString{String: e.Code, Valid: true}, sql.NullString{String: e.Message, Valid: true}
}

// fromMicroOrZero is fromMicro with 0 read as the zero time.
func fromMicroOrZero(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return fromMicro(v)
}

// microOrZero is micro with the zero time written as 0.
func microOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return micro(t)
}

// insertOperation inserts a new pending operation inside t. Its kind must
// be one of the lifecycle table's.
func (t tx) insertOperation(ctx context.Context, op model.Operation) error {
	op.State, op.FinishedAt, op.Source = model.OpPending, nil, ""
	return t.insertOperationAs(ctx, op)
}

// insertOperationAs inserts op in its own state (a pool claim records its
// create as succeeded when it is made). An operation without a
// TraceParent records ctx's span (the request's store call), so that the
// controller's span of running it continues the request's trace.
func (t tx) insertOperationAs(ctx context.Context, op model.Operation) error {
	if err := op.Kind.Validate(); err != nil {
		return fmt.Errorf("insert operation %s: %w", op.ID, err)
	}
	if op.SnapshotKind != "" {
		if _, err := model.ParseSnapshotKind(string(op.SnapshotKind)); err != nil {
			return fmt.Errorf("insert operation %s: %w", op.ID, err)
		}
		if op.Kind != model.OpSuspend {
			return fmt.Errorf("insert operation %s: %w: a snapshot kind is for a suspend, not a %s", op.ID, model.ErrInvalid, op.Kind)
		}
	}
	if op.TraceParent == "" {
		op.TraceParent = tracing.TraceParent(ctx)
	}
	code, msg := opError(op.Error)
	var finished sql.NullInt64
	if op.FinishedAt != nil {
		finished = sql.NullInt64{Int64: micro(*op.FinishedAt), Valid: true}
	}
	_, err := t.exec(ctx, `INSERT INTO operations (id, project_id, sandbox_id, kind, state, error_code, error_message,
		attempts, not_before, lease_owner, lease_expires_at, created_at, updated_at, finished_at, source, trace_parent, snapshot_kind)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, '', 0, ?, ?, ?, ?, ?, ?)`,
		string(op.ID), string(op.ProjectID), string(op.SandboxID), string(op.Kind), string(op.State),
		code, msg, op.Attempts, microOrZero(op.NotBefore), micro(op.CreatedAt), micro(op.UpdatedAt), finished, string(op.Source), op.TraceParent, string(op.SnapshotKind))
	if err != nil {
		return fmt.Errorf("insert operation %s: %w", op.ID, t.s.insertErr(err))
	}
	return nil
}

// GetOperation implements store.Store; another project's operation is
// store.ErrNotFound.
func (s *Store) GetOperation(ctx context.Context, project model.ProjectID, id model.OperationID) (model.Operation, error) {
	op, err := scanOperation(s.queryRow(ctx, `SELECT `+operationColumns+` FROM operations o WHERE o.id = ? AND o.project_id = ?`,
		string(id), string(project)))
	if err != nil {
		return model.Operation{}, fmt.Errorf("get operation %s: %w", id, errNotFound(err))
	}
	return op, nil
}

// ListUnfinishedOperations implements store.Store, in (created_at, id) order.
func (s *Store) ListUnfinishedOperations(ctx context.Context) ([]model.Operation, error) {
	rows, err := s.query(ctx, `SELECT `+operationColumns+` FROM operations o WHERE o.state IN (?, ?) ORDER BY o.created_at, o.id`,
		string(model.OpPending), string(model.OpRunning))
	if err != nil {
		return nil, fmt.Errorf("list unfinished operations: %w", err)
	}
	defer rows.Close()
	var out []model.Operation
	for rows.Next() {
		op, err := scanOperation(rows)
		if err != nil {
			return nil, fmt.Errorf("list unfinished operations: %w", err)
		}
		out = append(out, op)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list unfinished operations: %w", err)
	}
	return out, nil
}

func checkClaim(c store.Claim) error {
	if c.Owner == "" {
		return fmt.Errorf("%w: claim without owner", model.ErrInvalid)
	}
	if c.Lease <= 0 {
		return fmt.Errorf("%w: lease %s must be positive", model.ErrInvalid, c.Lease)
	}
	return nil
}

// checkOpClaim is checkClaim plus the incarnation operations are fenced by.
func checkOpClaim(c store.Claim) error {
	if err := checkClaim(c); err != nil {
		return err
	}
	if c.Incarnation == "" {
		return fmt.Errorf("%w: claim of operations without the node's incarnation", model.ErrInvalid)
	}
	return nil
}

// ClaimOperation implements store.Store. One UPDATE picks and leases the
// operation: on PostgreSQL its sub-select locks the row with
// FOR UPDATE SKIP LOCKED so concurrent claimers take different rows; on
// SQLite the immediate transaction serializes claimers.
func (s *Store) ClaimOperation(ctx context.Context, c store.Claim) (model.Operation, error) {
	if err := checkOpClaim(c); err != nil {
		return model.Operation{}, fmt.Errorf("claim operation: %w", err)
	}
	now := micro(c.Now)
	var op model.Operation
	err := s.write(ctx, true, func(t tx) error {
		t.concerns(c.Owner) // the operations it may take are on its node
		var err error
		op, err = scanOperation(t.queryRow(ctx, `UPDATE operations
			SET state = ?, attempts = attempts + 1, lease_owner = ?, lease_incarnation = ?, lease_expires_at = ?, updated_at = ?
			WHERE `+s.fenceSQL()+` AND id = (
				SELECT o.id FROM operations o JOIN sandboxes s ON s.id = o.sandbox_id
				WHERE o.state IN (?, ?)
				  AND (o.lease_owner = '' OR o.lease_expires_at <= ?)
				  AND o.not_before <= ?
				  AND s.node_id = ?
				  AND NOT EXISTS (
					SELECT 1 FROM operations p
					WHERE p.sandbox_id = o.sandbox_id AND p.state IN (?, ?)
					  AND (p.created_at < o.created_at OR (p.created_at = o.created_at AND p.id < o.id)))
				ORDER BY o.created_at, o.id
				LIMIT 1 `+s.d.ClaimLock+`)
			RETURNING `+operationReturning,
			string(model.OpRunning), string(c.Owner), string(c.Incarnation), micro(c.Now.Add(c.Lease)), now,
			string(c.Owner), string(c.Incarnation),
			string(model.OpPending), string(model.OpRunning), now, now, string(c.Owner),
			string(model.OpPending), string(model.OpRunning)))
		if errors.Is(err, sql.ErrNoRows) {
			return t.fenced(ctx, c.Owner, c.Incarnation, store.ErrNoWork)
		}
		return err
	})
	if err != nil {
		if errors.Is(err, store.ErrNoWork) {
			return model.Operation{}, store.ErrNoWork
		}
		return model.Operation{}, fmt.Errorf("claim operation for %s: %w", c.Owner, err)
	}
	return op, nil
}

// RenewLease implements store.Store: the lease runs until c.Now + c.Lease.
// It changes nothing a reader of model.Operation sees, so watchers are not
// woken.
func (s *Store) RenewLease(ctx context.Context, id model.OperationID, c store.Claim) error {
	if err := checkOpClaim(c); err != nil {
		return fmt.Errorf("renew lease of %s: %w", id, err)
	}
	res, err := s.exec(ctx, `UPDATE operations SET lease_expires_at = ?
		WHERE id = ? AND lease_owner = ? AND lease_incarnation = ? AND state = ? AND `+s.fenceSQL(),
		micro(c.Now.Add(c.Lease)), string(id), string(c.Owner), string(c.Incarnation), string(model.OpRunning),
		string(c.Owner), string(c.Incarnation))
	if err != nil {
		return fmt.Errorf("renew lease of %s: %w", id, err)
	}
	if err := oneRow(res); err == nil {
		return nil
	}
	var exists int
	if err := s.queryRow(ctx, `SELECT COUNT(*) FROM operations WHERE id = ?`, string(id)).Scan(&exists); err != nil {
		return fmt.Errorf("renew lease of %s: %w", id, err)
	}
	if exists == 0 {
		return fmt.Errorf("renew lease of %s: %w", id, store.ErrNotFound)
	}
	if err := s.fencedNow(ctx, c.Owner, c.Incarnation); err != nil {
		return fmt.Errorf("renew lease of %s for %s: %w: %w", id, c.Owner, store.ErrLeaseLost, err)
	}
	return fmt.Errorf("renew lease of %s for %s: %w", id, c.Owner, store.ErrLeaseLost)
}

// RetryOperation implements store.Store: the lease is given up (owner
// cleared, expiry 0) and not_before set, in one UPDATE that only matches the
// owner's running operation. Watchers are woken (NotBefore and UpdatedAt
// change), but the operation becomes claimable only when not_before passes,
// which a controller learns from NextOperationDue and wakes for.
func (s *Store) RetryOperation(ctx context.Context, r store.Retry) error {
	if r.Owner == "" {
		return fmt.Errorf("retry operation %s: %w: empty owner", r.OperationID, model.ErrInvalid)
	}
	err := s.write(ctx, true, func(t tx) error {
		t.concerns(r.Owner) // a held operation's sandbox is on its holder's node
		res, err := t.exec(ctx, `UPDATE operations SET lease_owner = '', lease_incarnation = '', lease_expires_at = 0, not_before = ?, updated_at = ?
			WHERE id = ? AND lease_owner = ? AND lease_incarnation = ? AND state = ? AND `+s.fenceSQL(),
			microOrZero(r.NotBefore), micro(r.Now), string(r.OperationID), string(r.Owner), string(r.Incarnation), string(model.OpRunning),
			string(r.Owner), string(r.Incarnation))
		if err != nil {
			return err
		}
		if err := oneRow(res); err == nil {
			return nil
		}
		var exists int
		if err := t.queryRow(ctx, `SELECT COUNT(*) FROM operations WHERE id = ?`, string(r.OperationID)).Scan(&exists); err != nil {
			return err
		}
		if exists == 0 {
			return store.ErrNotFound
		}
		if err := t.fenced(ctx, r.Owner, r.Incarnation, nil); err != nil {
			return fmt.Errorf("%w: %w", store.ErrLeaseLost, err)
		}
		return fmt.Errorf("%w: not held by %s", store.ErrLeaseLost, r.Owner)
	})
	if err != nil {
		return fmt.Errorf("retry operation %s: %w", r.OperationID, err)
	}
	return nil
}

// FinishOperation implements store.Store. It locks the sandbox row before
// the operation row (the order RequestDelete uses too), checks that f.Owner
// still holds the running operation (store.ErrLeaseLost otherwise), applies
// the optional sandbox compare-and-swap (store.ErrStateChanged,
// model.ErrInvalidTransition) and finishes the operation, atomically.
func (s *Store) FinishOperation(ctx context.Context, f store.Finish) error {
	if f.State != model.OpSucceeded && f.State != model.OpFailed {
		return fmt.Errorf("finish operation %s: %w: final state must be succeeded or failed, not %q", f.OperationID, model.ErrInvalid, f.State)
	}
	if f.SandboxTo != "" {
		if err := model.CheckTransition(f.SandboxFrom, f.SandboxTo); err != nil {
			return fmt.Errorf("finish operation %s: %w", f.OperationID, err)
		}
	}
	err := s.write(ctx, true, func(t tx) error {
		var raw string
		if err := t.queryRow(ctx, `SELECT sandbox_id FROM operations WHERE id = ?`, string(f.OperationID)).Scan(&raw); err != nil {
			return errNotFound(err)
		}
		c := columns{row: "operation " + f.OperationID.String()}
		sandbox := c.sandboxID("sandbox_id", raw)
		if c.err != nil {
			return c.err
		}
		cur, err := t.lockSandboxState(ctx, sandbox, "")
		if err != nil {
			return fmt.Errorf("sandbox %s: %w", sandbox, err)
		}
		var state, owner, inc string
		if err := t.queryRow(ctx, `SELECT o.state, o.lease_owner, o.lease_incarnation FROM operations o WHERE o.id = ? `+s.d.RowLock,
			string(f.OperationID)).Scan(&state, &owner, &inc); err != nil {
			return errNotFound(err)
		}
		if model.OperationState(state) != model.OpRunning || owner != string(f.Owner) || inc != string(f.Incarnation) {
			return fmt.Errorf("%w: operation is %s, leased to %q (%s)", store.ErrLeaseLost, state, owner, inc)
		}
		if err := t.fenced(ctx, f.Owner, f.Incarnation, nil); err != nil {
			return fmt.Errorf("%w: %w", store.ErrLeaseLost, err)
		}
		if f.SandboxTo != "" {
			if cur != f.SandboxFrom {
				return fmt.Errorf("%w: sandbox is %s, expected %s", store.ErrStateChanged, cur, f.SandboxFrom)
			}
			if err := t.setSandboxState(ctx, sandbox, f.SandboxFrom, f.SandboxTo, f.SandboxReason, f.Now); err != nil {
				return err
			}
			if f.SetSnapshot {
				snap, err := encodeSnapshot(f.Snapshot)
				if err != nil {
					return err
				}
				if _, err := t.exec(ctx, `UPDATE sandboxes SET snapshot = ? WHERE id = ?`, snap, string(sandbox)); err != nil {
					return fmt.Errorf("record snapshot: %w", err)
				}
			}
		}
		code, msg := opError(f.Error)
		now := micro(f.Now)
		_, err = t.exec(ctx, `UPDATE operations SET state = ?, error_code = ?, error_message = ?, updated_at = ?, finished_at = ?, source = ?
			WHERE id = ?`, string(f.State), code, msg, now, now, string(f.Source), string(f.OperationID))
		if err != nil {
			return fmt.Errorf("update operation: %w", err)
		}
		if f.Source != "" {
			if _, err := t.exec(ctx, `UPDATE sandboxes SET source = ? WHERE id = ?`, string(f.Source), string(sandbox)); err != nil {
				return fmt.Errorf("record source: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("finish operation %s: %w", f.OperationID, err)
	}
	return nil
}

// fenced returns store.ErrFenced when node does not run incarnation inc or
// is dead, else otherwise (which may be nil). The node's row is share-locked
// (PostgreSQL) until the transaction ends, so a concurrent DeclareDeadNodes
// or RegisterNode waits for the write it fences.
func (t tx) fenced(ctx context.Context, node model.NodeID, inc model.Incarnation, otherwise error) error {
	return checkFence(t.queryRow(ctx, t.s.fenceRowSQL(), string(node), string(inc)), node, inc, otherwise)
}

// fencedNow is fenced outside a transaction, with nil otherwise.
func (s *Store) fencedNow(ctx context.Context, node model.NodeID, inc model.Incarnation) error {
	return checkFence(s.queryRow(ctx, s.fenceRowSQL(), string(node), string(inc)), node, inc, nil)
}

// fenceRowSQL selects the node's row while node ? runs incarnation ? and is
// not dead.
func (s *Store) fenceRowSQL() string {
	return `SELECT 1 FROM nodes fn WHERE fn.id = ? AND fn.incarnation = ? AND fn.state <> 'dead' ` + s.d.ShareLock
}

// fenceSQL is fenceRowSQL as a condition of a write; it takes the node ID
// and the incarnation.
func (s *Store) fenceSQL() string { return `EXISTS (` + s.fenceRowSQL() + `)` }

func checkFence(row *sql.Row, node model.NodeID, inc model.Incarnation, otherwise error) error {
	var one int
	err := row.Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %s is not node %s's current incarnation, or the node is dead", store.ErrFenced, inc, node)
	}
	if err != nil {
		return err
	}
	return otherwise
}

// ReleaseLeases implements store.Store: every unfinished operation leased to
// owner gets a lease expiry of 0 (the distant past), so the next claim of any
// owner takes it; the owner column is kept until then. Watchers are woken
// when at least one lease was released. now is accepted for symmetry with
// the other lease calls; the release does not depend on it.
func (s *Store) ReleaseLeases(ctx context.Context, owner model.NodeID, now time.Time) (int, error) {
	if owner == "" {
		return 0, fmt.Errorf("release leases: %w: empty owner", model.ErrInvalid)
	}
	var n int64
	err := s.write(ctx, true, func(t tx) error {
		t.concerns(owner) // operations are leased to their sandbox's node
		res, err := t.exec(ctx, `UPDATE operations SET lease_expires_at = 0
			WHERE lease_owner = ? AND state IN (?, ?) AND lease_expires_at <> 0`,
			string(owner), string(model.OpPending), string(model.OpRunning))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("release leases of %s at %s: %w", owner, now.UTC().Format(time.RFC3339), err)
	}
	return int(n), nil
}
