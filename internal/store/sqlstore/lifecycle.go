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

// Code and message of the error given to pending operations that a delete
// request supersedes.
const (
	CancelledCode    = model.OpErrCancelled
	CancelledMessage = "superseded by delete"
)

// lockSandboxState reads a sandbox's state inside t, locking its row where
// the dialect can, so that the compare-and-swap that follows cannot race.
// project "" matches any project. The change is recorded as concerning the
// sandbox's node (the caller is about to change the sandbox).
func (t tx) lockSandboxState(ctx context.Context, id model.SandboxID, project model.ProjectID) (model.SandboxState, error) {
	query, args := `SELECT s.state, s.node_id FROM sandboxes s WHERE s.id = ?`, []any{string(id)}
	if project != "" {
		query, args = query+` AND s.project_id = ?`, append(args, string(project))
	}
	var state, node string
	if err := t.queryRow(ctx, query+" "+t.s.d.RowLock, args...).Scan(&state, &node); err != nil {
		return "", errNotFound(err)
	}
	t.concerns(model.NodeID(node))
	return model.ParseSandboxState(state)
}

// setSandboxState is the compare-and-swap itself; the caller has already
// locked the row and checked the state machine.
func (t tx) setSandboxState(ctx context.Context, id model.SandboxID, from, to model.SandboxState, reason string, now time.Time) error {
	res, err := t.exec(ctx, `UPDATE sandboxes SET state = ?, state_reason = ?, updated_at = ? WHERE id = ? AND state = ?`,
		string(to), reason, micro(now), string(id), string(from))
	if err != nil {
		return fmt.Errorf("update sandbox state: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("update sandbox state: %w", err)
	}
	if n != 1 {
		return store.ErrStateChanged
	}
	if to == model.StateDeleted {
		// Its resource samples go with it (store.Metrics).
		if _, err := t.exec(ctx, `DELETE FROM sandbox_metrics WHERE sandbox_id = ?`, string(id)); err != nil {
			return fmt.Errorf("remove the metrics of a deleted sandbox: %w", err)
		}
	}
	return nil
}

// RequestDelete implements store.Store. The sandbox moves to deleting,
// every still-pending operation of it fails with code "cancelled" (running
// ones are left to their controller), and the delete operation and the
// idempotency record are inserted, in one transaction. It returns the
// sandbox as it is after the change.
func (s *Store) RequestDelete(ctx context.Context, req store.DeleteRequest) (model.Sandbox, error) {
	op := req.Operation
	del, err := model.LifecycleOf(model.OpDelete)
	if err != nil {
		return model.Sandbox{}, fmt.Errorf("delete sandbox %s: %w", req.SandboxID, err)
	}
	switch {
	case op.Kind != model.OpDelete:
		return model.Sandbox{}, fmt.Errorf("delete sandbox %s: %w: operation kind must be delete, not %q", req.SandboxID, model.ErrInvalid, op.Kind)
	case op.State != "" && op.State != model.OpPending:
		return model.Sandbox{}, fmt.Errorf("delete sandbox %s: %w: a new operation must be pending, not %s", req.SandboxID, model.ErrInvalid, op.State)
	case op.SandboxID != req.SandboxID || op.ProjectID != req.ProjectID:
		return model.Sandbox{}, fmt.Errorf("delete sandbox %s: %w: operation %s belongs to another sandbox or project", req.SandboxID, model.ErrInvalid, op.ID)
	}
	var out model.Sandbox
	err = s.write(ctx, true, func(t tx) error {
		if err := t.insertIdempotency(ctx, req.Idempotency); err != nil {
			return err
		}
		from, err := t.lockSandboxState(ctx, req.SandboxID, req.ProjectID)
		if err != nil {
			return err
		}
		if from == del.InProgress {
			// A delete whose operation ended (it failed) may be requested
			// again; while one is still under way, a second is refused.
			var unfinished int
			if err := t.queryRow(ctx, `SELECT COUNT(*) FROM operations WHERE sandbox_id = ? AND state IN (?, ?)`,
				string(req.SandboxID), string(model.OpPending), string(model.OpRunning)).Scan(&unfinished); err != nil {
				return fmt.Errorf("count unfinished operations: %w", err)
			}
			if unfinished > 0 {
				return fmt.Errorf("%w: sandbox is already being deleted", model.ErrInvalidTransition)
			}
		} else {
			if err := del.CheckStart(from); err != nil {
				return err
			}
			// The state reason is kept unless the request gives one: why a
			// failed sandbox failed stays visible.
			set, args := `state = ?, updated_at = ?`, []any{string(del.InProgress), micro(req.Now)}
			if req.Reason != "" {
				set, args = set+`, state_reason = ?`, append(args, req.Reason)
			}
			res, err := t.exec(ctx, `UPDATE sandboxes SET `+set+` WHERE id = ? AND state = ?`,
				append(args, string(req.SandboxID), string(from))...)
			if err != nil {
				return fmt.Errorf("update sandbox state: %w", err)
			}
			if err := oneRow(res); err != nil {
				return fmt.Errorf("%w: sandbox left %s", store.ErrStateChanged, from)
			}
		}
		now := micro(req.Now)
		if _, err := t.exec(ctx, `UPDATE operations SET state = ?, error_code = ?, error_message = ?, updated_at = ?, finished_at = ?
			WHERE sandbox_id = ? AND state = ?`,
			string(model.OpFailed), CancelledCode, CancelledMessage, now, now,
			string(req.SandboxID), string(model.OpPending)); err != nil {
			return fmt.Errorf("cancel pending operations: %w", err)
		}
		if err := t.insertOperation(ctx, op); err != nil {
			return err
		}
		out, err = scanSandbox(t.queryRow(ctx, `SELECT `+sandboxColumns+` FROM sandboxes s WHERE s.id = ?`, string(req.SandboxID)))
		if err != nil {
			return fmt.Errorf("read sandbox: %w", err)
		}
		return nil
	})
	if err != nil {
		return model.Sandbox{}, fmt.Errorf("delete sandbox %s: %w", req.SandboxID, err)
	}
	return out, nil
}

// RequestOperation implements store.Store.
func (s *Store) RequestOperation(ctx context.Context, req store.OperationRequest) (model.Sandbox, error) {
	op := req.Operation
	lc, err := model.LifecycleOf(op.Kind)
	switch {
	case err != nil:
		return model.Sandbox{}, fmt.Errorf("request operation on sandbox %s: %w", req.SandboxID, err)
	case op.Kind == model.OpCreate || op.Kind == model.OpDelete || op.Kind == model.OpSnapshot:
		return model.Sandbox{}, fmt.Errorf("request operation on sandbox %s: %w: a %s has its own request", req.SandboxID, model.ErrInvalid, op.Kind)
	case op.State != "" && op.State != model.OpPending:
		return model.Sandbox{}, fmt.Errorf("request %s of sandbox %s: %w: a new operation must be pending, not %s", op.Kind, req.SandboxID, model.ErrInvalid, op.State)
	case op.SandboxID != req.SandboxID || op.ProjectID != req.ProjectID:
		return model.Sandbox{}, fmt.Errorf("request %s of sandbox %s: %w: operation %s belongs to another sandbox or project", op.Kind, req.SandboxID, model.ErrInvalid, op.ID)
	}
	var out model.Sandbox
	err = s.write(ctx, true, func(t tx) error {
		out, err = t.requestOperation(ctx, req, lc)
		return err
	})
	if err != nil {
		return model.Sandbox{}, fmt.Errorf("request %s of sandbox %s: %w", op.Kind, req.SandboxID, err)
	}
	return out, nil
}

// requestOperation is RequestOperation's transaction: the idempotency
// record, the sandbox's move to the kind's in-progress state and the
// operation; it returns the sandbox after the change.
func (t tx) requestOperation(ctx context.Context, req store.OperationRequest, lc model.Lifecycle) (model.Sandbox, error) {
	if err := t.insertIdempotency(ctx, req.Idempotency); err != nil {
		return model.Sandbox{}, err
	}
	from, err := t.lockSandboxState(ctx, req.SandboxID, req.ProjectID)
	if err != nil {
		return model.Sandbox{}, err
	}
	var kind string
	err = t.queryRow(ctx, `SELECT kind FROM operations WHERE sandbox_id = ? AND state IN (?, ?) ORDER BY created_at LIMIT 1`,
		string(req.SandboxID), string(model.OpPending), string(model.OpRunning)).Scan(&kind)
	switch {
	case err == nil:
		return model.Sandbox{}, fmt.Errorf("%w (a %s)", store.ErrBusy, kind)
	case !errors.Is(err, sql.ErrNoRows):
		return model.Sandbox{}, fmt.Errorf("look for unfinished operations: %w", err)
	}
	if err := lc.CheckStart(from); err != nil {
		return model.Sandbox{}, err
	}
	if err := t.setSandboxState(ctx, req.SandboxID, from, lc.InProgress, req.Reason, req.Now); err != nil {
		return model.Sandbox{}, err
	}
	if err := t.insertOperation(ctx, req.Operation); err != nil {
		return model.Sandbox{}, err
	}
	out, err := scanSandbox(t.queryRow(ctx, `SELECT `+sandboxColumns+` FROM sandboxes s WHERE s.id = ?`, string(req.SandboxID)))
	if err != nil {
		return model.Sandbox{}, fmt.Errorf("read sandbox: %w", err)
	}
	return out, nil
}

// TransitionSandbox implements store.Store: store.ErrNotFound for an unknown
// sandbox, store.ErrStateChanged when it is not in from, an error wrapping
// model.ErrInvalidTransition when the state machine forbids from → to. The
// reason replaces the sandbox's StateReason.
func (s *Store) TransitionSandbox(ctx context.Context, id model.SandboxID, from, to model.SandboxState, reason string, now time.Time) error {
	if err := model.CheckTransition(from, to); err != nil {
		return fmt.Errorf("transition sandbox %s: %w", id, err)
	}
	err := s.write(ctx, true, func(t tx) error {
		cur, err := t.lockSandboxState(ctx, id, "")
		if err != nil {
			return err
		}
		if cur != from {
			return fmt.Errorf("%w: sandbox is %s, expected %s", store.ErrStateChanged, cur, from)
		}
		return t.setSandboxState(ctx, id, from, to, reason, now)
	})
	if err != nil {
		return fmt.Errorf("transition sandbox %s from %s to %s: %w", id, from, to, err)
	}
	return nil
}
