package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// DefaultResumeTimeout bounds how long a request that asks to resume (or
// wake) its sandbox first waits for it to run. It is well below the Go
// client's 60 s per request, so that a client sees resume_timeout rather
// than its own deadline (which it would retry).
const DefaultResumeTimeout = 45 * time.Second

// LifecycleSupport is what the runtime hosting a sandbox can do beyond
// create and delete.
type LifecycleSupport struct {
	// Pause: pause and resume (memory stays resident).
	Pause bool
	// Snapshot is the kind of snapshot a suspend writes; "": the runtime
	// cannot suspend (nor wake).
	Snapshot model.SnapshotKind
}

// lifecycleRoutes are the lifecycle operations on an existing sandbox
// besides delete: each answers 202 SandboxWithOperation.
func (a *API) lifecycleRoutes() []route {
	return []route{
		{"POST", "/v1/sandboxes/{id}/pause", member, mutating(a, a.lifecycleOp(model.OpPause))},
		{"POST", "/v1/sandboxes/{id}/resume", member | sandboxToken, mutating(a, a.lifecycleOp(model.OpResume))},
		{"POST", "/v1/sandboxes/{id}/suspend", member, mutating(a, a.lifecycleOp(model.OpSuspend))},
		{"POST", "/v1/sandboxes/{id}/wake", member | sandboxToken, mutating(a, a.lifecycleOp(model.OpWake))},
	}
}

// lifecycleOp: POST /v1/sandboxes/{id}/{kind} → 202 SandboxWithOperation.
// The sandbox moves to the kind's in-progress state and the operation is
// queued in one transaction (with the idempotency record); the controller
// does the work. Refused: 404 for a sandbox the project does not have, 501
// not_supported when its runtime cannot do it, 409 sandbox_busy while
// another operation of it is unfinished and 409 invalid_transition when
// the kind cannot start from its state.
func (a *API) lifecycleOp(kind model.OperationKind) func(ctx context.Context, c *call[noBody]) (*reply, error) {
	lc, err := model.LifecycleOf(kind)
	if err != nil {
		panic(fmt.Sprintf("api: lifecycle route of %s: %v", kind, err)) // the route table names only known kinds
	}
	return func(ctx context.Context, c *call[noBody]) (*reply, error) {
		sb, err := a.sandboxOf(ctx, c.r, c.p)
		if err != nil {
			return nil, err
		}
		if err := a.checkSupported(sb, kind); err != nil {
			return nil, err
		}
		op := model.Operation{
			ID:        model.NewOperationID(),
			ProjectID: c.p.project,
			SandboxID: sb.ID,
			Kind:      kind,
			State:     model.OpPending,
			CreatedAt: c.now,
			UpdatedAt: c.now,
		}
		// The answer shows the sandbox as the store leaves it when it
		// accepts the request: in the kind's in-progress state. It is
		// encoded before the store call so that the idempotency record
		// is written in the same transaction.
		moved := sb
		moved.State, moved.StateReason, moved.UpdatedAt = lc.InProgress, "", c.now
		rep, rec, err := c.reply(http.StatusAccepted, apiv1.SandboxWithOperation{Sandbox: sandboxOut(moved), Operation: operationOut(op)})
		if err != nil {
			return nil, err
		}
		_, err = a.cfg.Store.RequestOperation(ctx, store.OperationRequest{
			ProjectID: c.p.project, SandboxID: sb.ID, Operation: op, Idempotency: rec, Now: c.now,
		})
		if err != nil {
			return nil, a.lifecycleError(ctx, c.p.project, sb, lc, err)
		}
		return rep, nil
	}
}

// lifecycleError turns the store's refusal of a lifecycle request into the
// API's error.
func (a *API) lifecycleError(ctx context.Context, project model.ProjectID, sb model.Sandbox, lc model.Lifecycle, err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return notFound("sandbox %s not found", sb.ID)
	case errors.Is(err, store.ErrBusy):
		return errorf(http.StatusConflict, apiv1.CodeSandboxBusy,
			"a %s of sandbox %s cannot start while %s; retry when that has finished (GET /v1/sandboxes/%s shows its state)",
			lc.Kind, sb.ID, a.underWay(ctx, sb.ID), sb.ID)
	case errors.Is(err, model.ErrInvalidTransition):
		state := sb.State
		if now, gerr := a.cfg.Store.GetSandbox(ctx, project, sb.ID); gerr == nil {
			state = now.State // the state that refused it, not the one read before
		}
		from := make([]string, len(lc.From))
		for i, s := range lc.From {
			from[i] = string(s)
		}
		return errorf(http.StatusConflict, apiv1.CodeInvalidTransition, "sandbox %s is %s; a %s needs %s%s",
			sb.ID, state, lc.Kind, strings.Join(from, " or "), transitionHint(lc.Kind, state))
	}
	var ae *apiError
	if errors.As(err, &ae) {
		return err
	}
	return fmt.Errorf("request %s of sandbox %s: %w", lc.Kind, sb.ID, err)
}

// underWay names the unfinished operation of sandbox id, for a message.
func (a *API) underWay(ctx context.Context, id model.SandboxID) string {
	ops, err := a.cfg.Store.ListUnfinishedOperations(ctx)
	if err == nil {
		for _, op := range ops {
			if op.SandboxID == id {
				return fmt.Sprintf("its %s (%s) is under way", op.Kind, op.ID)
			}
		}
	}
	return "another operation of it is under way"
}

// transitionHint suggests the request that fits a refused one.
func transitionHint(kind model.OperationKind, state model.SandboxState) string {
	switch {
	case state == model.StateSuspended && (kind == model.OpPause || kind == model.OpResume):
		return " (wake it first)"
	case state == model.StatePaused && kind == model.OpWake:
		return " (a paused sandbox is resumed)"
	case state == model.StateRunning && kind == model.OpResume:
		return " (it already runs)"
	}
	return ""
}

// checkSupported refuses, with 501 not_supported, a kind that the runtime
// hosting sb cannot do, and with 409 environment_unavailable any kind for
// a sandbox hosted by a runtime this server does not drive. A sandbox not
// placed yet is not checked here (its state refuses these kinds anyway).
func (a *API) checkSupported(sb model.Sandbox, kind model.OperationKind) error {
	if a.cfg.LifecycleSupport == nil {
		return nil
	}
	sup, ok := a.cfg.LifecycleSupport(sb)
	if !ok {
		if sb.Runtime != "" {
			return errorf(http.StatusConflict, apiv1.CodeEnvironmentUnavailable, "sandbox %s runs on %s, which this server does not drive; restart it with --env %s to %s it", sb.ID, sb.Runtime, sb.Runtime, kind)
		}
		return nil
	}
	switch kind {
	case model.OpPause, model.OpResume:
		if !sup.Pause {
			return errorf(http.StatusNotImplemented, apiv1.CodeNotSupported, "sandbox %s runs on %s, which cannot pause", sb.ID, runtimeName(sb))
		}
	case model.OpSuspend, model.OpWake:
		if sup.Snapshot == "" {
			return errorf(http.StatusNotImplemented, apiv1.CodeNotSupported, "sandbox %s runs on %s, which cannot snapshot a sandbox: it cannot be suspended", sb.ID, runtimeName(sb))
		}
	}
	return nil
}

func runtimeName(sb model.Sandbox) string {
	if sb.Runtime == "" {
		return "a runtime"
	}
	return sb.Runtime
}

// runFirst makes sandbox sb of project run for a request that asked to
// resume it first: a paused sandbox is resumed, a suspended one woken, and
// one in between is waited for, at most cfg.ResumeTimeout; a running
// sandbox is returned at once. A sandbox in any other state, and an
// operation that fails, are refused with the error a request without
// resume would have had (sandbox_not_running, sandbox_paused,
// sandbox_suspended) and what went wrong; the bound passing is 504
// resume_timeout.
func (a *API) runFirst(ctx context.Context, project model.ProjectID, sb model.Sandbox) (model.Sandbox, error) {
	if sb.State == model.StateRunning {
		return sb, nil
	}
	wctx, cancel := context.WithTimeout(ctx, a.resumeTimeout())
	defer cancel()
	changed := a.cfg.Store.Watch(wctx) // before the first read: no change slips between
	// A backstop in case a change is coalesced away or the watch ends.
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var requested *model.Operation
	for {
		cur, err := a.cfg.Store.GetSandbox(ctx, project, sb.ID)
		if errors.Is(err, store.ErrNotFound) {
			return model.Sandbox{}, notFound("sandbox %s not found", sb.ID)
		}
		if err != nil {
			return model.Sandbox{}, fmt.Errorf("get sandbox %s: %w", sb.ID, err)
		}
		switch cur.State {
		case model.StateRunning:
			return cur, nil
		case model.StatePaused, model.StateSuspended:
			if requested != nil {
				got, err := a.cfg.Store.GetOperation(ctx, project, requested.ID)
				if err != nil {
					return model.Sandbox{}, fmt.Errorf("get operation %s: %w", requested.ID, err)
				}
				if got.State != model.OpSucceeded {
					// Back where it was: the operation this request queued failed.
					return model.Sandbox{}, failedFirst(cur, got)
				}
				// It ran and was paused (suspended) again since: once more.
			}
			op, err := a.requestRun(ctx, project, cur)
			switch {
			case errors.Is(err, model.ErrInvalidTransition):
				// Another operation is under way or the state moved on:
				// wait for it and look again.
			case err != nil:
				return model.Sandbox{}, err
			default:
				requested = &op
				a.log.InfoContext(ctx, "request resumes its sandbox first", "sandbox", cur.ID, "operation", op.ID, "kind", op.Kind)
				continue // it is now resuming (or waking)
			}
		case model.StatePausing, model.StateResuming, model.StateSuspending, model.StateWaking:
			// An operation is under way: wait for it to end.
		default:
			return model.Sandbox{}, notRunning(cur)
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return model.Sandbox{}, context.Cause(ctx)
			}
			return model.Sandbox{}, errorf(http.StatusGatewayTimeout, apiv1.CodeResumeTimeout,
				"sandbox %s did not run within %s of asking it to resume (it is %s); retry, or look at GET /v1/sandboxes/%s",
				sb.ID, a.resumeTimeout(), cur.State, sb.ID)
		case _, ok := <-changed:
			if !ok {
				changed = nil // the store is closing or wctx ended; the select sees which
			}
		case <-tick.C:
		}
	}
}

// requestRun queues the resume of a paused or the wake of a suspended
// sandbox.
func (a *API) requestRun(ctx context.Context, project model.ProjectID, sb model.Sandbox) (model.Operation, error) {
	kind := model.OpResume
	if sb.State == model.StateSuspended {
		kind = model.OpWake
	}
	if err := a.checkSupported(sb, kind); err != nil {
		return model.Operation{}, err
	}
	now := a.now()
	op := model.Operation{
		ID: model.NewOperationID(), ProjectID: project, SandboxID: sb.ID, Kind: kind,
		State: model.OpPending, CreatedAt: now, UpdatedAt: now,
	}
	if _, err := a.cfg.Store.RequestOperation(ctx, store.OperationRequest{
		ProjectID: project, SandboxID: sb.ID, Operation: op, Now: now,
	}); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return model.Operation{}, notFound("sandbox %s not found", sb.ID)
		}
		return model.Operation{}, fmt.Errorf("request %s of sandbox %s: %w", kind, sb.ID, err)
	}
	return op, nil
}

// failedFirst is the error of a request whose resume (or wake) op failed.
func failedFirst(sb model.Sandbox, op model.Operation) error {
	why := "it did not finish"
	if op.Error != nil {
		why = op.Error.Message
	}
	base := notRunning(sb)
	return errorf(base.status, base.code, "the %s (%s) this request asked for failed: %s; sandbox %s is %s",
		op.Kind, op.ID, why, sb.ID, sb.State)
}

// snapshotOut is the wire form of a sandbox's snapshot record (nil: none).
func snapshotOut(s *model.Snapshot) *apiv1.Snapshot {
	if s == nil {
		return nil
	}
	return &apiv1.Snapshot{Kind: string(s.Kind), Environment: s.Environment.String(), SizeBytes: s.SizeBytes, CreatedAt: s.CreatedAt.UTC()}
}

// resumeTimeout is Config.ResumeTimeout or, when that is not positive,
// DefaultResumeTimeout.
func (a *API) resumeTimeout() time.Duration {
	if a.cfg.ResumeTimeout > 0 {
		return a.cfg.ResumeTimeout
	}
	return DefaultResumeTimeout
}
