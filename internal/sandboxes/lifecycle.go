package sandboxes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/guestops"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// DeleteRequest asks to delete a sandbox of a project.
type DeleteRequest struct {
	Project model.ProjectID
	Sandbox model.SandboxID
	Now     time.Time
	// Idempotency, if set, builds the idempotency record stored with the
	// delete operation.
	Idempotency func(model.Operation) (*store.IdempotencyRecord, error)
}

// Delete moves the sandbox to deleting and queues its delete operation
// (the controller does the work); it cancels a still pending operation of
// it. Refused: NotFound, and model.ErrInvalidTransition while another
// delete of it is unfinished or for a deleted sandbox.
func (s *Service) Delete(ctx context.Context, req DeleteRequest) (model.Operation, error) {
	op := model.Operation{
		ID:        model.NewOperationID(),
		ProjectID: req.Project,
		SandboxID: req.Sandbox,
		Kind:      model.OpDelete,
		State:     model.OpPending,
		CreatedAt: req.Now,
		UpdatedAt: req.Now,
	}
	var rec *store.IdempotencyRecord
	if req.Idempotency != nil {
		var err error
		if rec, err = req.Idempotency(op); err != nil {
			return model.Operation{}, err
		}
	}
	_, err := s.cfg.Store.RequestDelete(ctx, store.DeleteRequest{
		ProjectID: req.Project, SandboxID: req.Sandbox, Operation: op, Idempotency: rec, Now: req.Now,
	})
	if errors.Is(err, store.ErrNotFound) {
		return model.Operation{}, errorf(NotFound, "sandbox %s not found", req.Sandbox)
	}
	if err != nil {
		return model.Operation{}, fmt.Errorf("delete sandbox %s: %w", req.Sandbox, err)
	}
	return op, nil
}

// LifecycleRequest asks for a pause, resume, suspend or wake of a sandbox
// of a project.
type LifecycleRequest struct {
	Project model.ProjectID
	Sandbox model.SandboxID
	Kind    model.OperationKind
	Now     time.Time
	// KeepMemory, for a suspend, is what the caller needs it to keep
	// (nil: whatever the runtime's suspend keeps): true, memory and
	// processes; false, only the filesystem, processes not kept. It is
	// carried on the operation (Operation.SnapshotKind) to the runtime. A
	// runtime that cannot write that kind refuses it (NotSupported, from
	// its capabilities: CheckSuspendKind): runsc and qemu write either
	// (memory by default), runc and crun only the filesystem.
	KeepMemory *bool
	// Idempotency, if set, builds the idempotency record stored with the
	// operation from what the request changes.
	Idempotency func(Changed) (*store.IdempotencyRecord, error)
}

// Changed is a sandbox as a lifecycle request leaves it (in the kind's
// in-progress state) and the operation it queued.
type Changed struct {
	Sandbox   model.Sandbox
	Operation model.Operation
}

// Lifecycle moves the sandbox to the kind's in-progress state and queues
// the operation in one transaction (with the idempotency record); the
// controller does the work. Refused: NotFound, NotSupported when its
// runtime cannot do it (EnvironmentUnavailable when its runtime is not
// driven here), Busy while another operation of it is unfinished and
// InvalidTransition when the kind cannot start from its state.
func (s *Service) Lifecycle(ctx context.Context, req LifecycleRequest) (Changed, error) {
	lc, err := model.LifecycleOf(req.Kind)
	if err != nil {
		return Changed{}, err
	}
	sb, err := s.sandbox(ctx, req.Project, req.Sandbox)
	if err != nil {
		return Changed{}, err
	}
	if err := s.checkSupported(sb, req.Kind); err != nil {
		return Changed{}, err
	}
	snapKind, err := s.checkKeepMemory(sb, req)
	if err != nil {
		return Changed{}, err
	}
	op := model.Operation{
		ID:        model.NewOperationID(),
		ProjectID: req.Project,
		SandboxID: sb.ID,
		Kind:      req.Kind,
		State:     model.OpPending,
		// The kind of snapshot a suspend must write ("": the runtime's).
		SnapshotKind: snapKind,
		CreatedAt:    req.Now,
		UpdatedAt:    req.Now,
	}
	// The sandbox as the store leaves it when it accepts the request: in
	// the kind's in-progress state.
	moved := sb
	moved.State, moved.StateReason, moved.UpdatedAt = lc.InProgress, "", req.Now
	changed := Changed{Sandbox: moved, Operation: op}
	var rec *store.IdempotencyRecord
	if req.Idempotency != nil {
		if rec, err = req.Idempotency(changed); err != nil {
			return Changed{}, err
		}
	}
	_, err = s.cfg.Store.RequestOperation(ctx, store.OperationRequest{
		ProjectID: req.Project, SandboxID: sb.ID, Operation: op, Idempotency: rec, Now: req.Now,
	})
	if err != nil {
		return Changed{}, s.lifecycleError(ctx, req.Project, sb, lc, err)
	}
	return changed, nil
}

// sandbox loads a sandbox of project.
func (s *Service) sandbox(ctx context.Context, project model.ProjectID, id model.SandboxID) (model.Sandbox, error) {
	sb, err := s.cfg.Store.GetSandbox(ctx, project, id)
	if errors.Is(err, store.ErrNotFound) {
		return model.Sandbox{}, errorf(NotFound, "sandbox %s not found", id)
	}
	if err != nil {
		return model.Sandbox{}, fmt.Errorf("get sandbox %s: %w", id, err)
	}
	return sb, nil
}

// lifecycleError turns the store's refusal of a lifecycle request into the
// service's.
func (s *Service) lifecycleError(ctx context.Context, project model.ProjectID, sb model.Sandbox, lc model.Lifecycle, err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return errorf(NotFound, "sandbox %s not found", sb.ID)
	case errors.Is(err, store.ErrBusy):
		return errorf(Busy,
			"a %s of sandbox %s cannot start while %s; retry when that has finished (GET /v1/sandboxes/%s shows its state)",
			lc.Kind, sb.ID, s.underWay(ctx, sb.ID), sb.ID)
	case errors.Is(err, model.ErrInvalidTransition):
		state := sb.State
		if now, gerr := s.cfg.Store.GetSandbox(ctx, project, sb.ID); gerr == nil {
			state = now.State // the state that refused it, not the one read before
		}
		from := make([]string, len(lc.From))
		for i, st := range lc.From {
			from[i] = string(st)
		}
		return errorf(InvalidTransition, "sandbox %s is %s; a %s needs %s%s",
			sb.ID, state, lc.Kind, strings.Join(from, " or "), transitionHint(lc.Kind, state))
	}
	var se *Error
	if errors.As(err, &se) {
		return err
	}
	return fmt.Errorf("request %s of sandbox %s: %w", lc.Kind, sb.ID, err)
}

// underWay names the unfinished operation of sandbox id, for a message.
func (s *Service) underWay(ctx context.Context, id model.SandboxID) string {
	ops, err := s.cfg.Store.ListUnfinishedOperations(ctx)
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

// checkSupported refuses, with NotSupported, a kind that the runtime
// hosting sb cannot do, and with EnvironmentUnavailable any kind for a
// sandbox hosted by a runtime this server does not drive. A sandbox not
// placed yet is not checked here (its state refuses these kinds anyway).
func (s *Service) checkSupported(sb model.Sandbox, kind model.OperationKind) error {
	if s.cfg.LifecycleSupport == nil {
		return nil
	}
	sup, ok := s.cfg.LifecycleSupport(sb)
	if !ok {
		if sb.Runtime != "" {
			return errorf(EnvironmentUnavailable, "sandbox %s runs on %s, which this server does not drive; restart it with --env %s to %s it", sb.ID, sb.Runtime, sb.Runtime, kind)
		}
		return nil
	}
	switch kind {
	case model.OpPause, model.OpResume:
		if !sup.Pause {
			return errorf(NotSupported, "sandbox %s runs on %s, which cannot pause", sb.ID, runtimeName(sb))
		}
	case model.OpSnapshot:
		if !sup.LiveSnapshot {
			return errorf(NotSupported, "sandbox %s runs on %s, which cannot snapshot a running sandbox (nor fork it)", sb.ID, runtimeName(sb))
		}
	case model.OpSuspend, model.OpWake:
		if sup.Snapshot() == "" {
			return errorf(NotSupported, "sandbox %s runs on %s, which cannot snapshot a sandbox: it cannot be suspended", sb.ID, runtimeName(sb))
		}
	}
	return nil
}

// checkKeepMemory returns the kind of snapshot a suspend with KeepMemory
// must write ("" without KeepMemory: the runtime's own), refusing with
// NotSupported one the sandbox's runtime cannot write (see
// LifecycleRequest.KeepMemory), and a KeepMemory on any other kind
// (model.ErrInvalid).
func (s *Service) checkKeepMemory(sb model.Sandbox, req LifecycleRequest) (model.SnapshotKind, error) {
	if req.KeepMemory == nil {
		return "", nil
	}
	if req.Kind != model.OpSuspend {
		return "", fmt.Errorf("%w: keep_memory applies to a suspend, not a %s", model.ErrInvalid, req.Kind)
	}
	want := model.SnapshotKindKeeping(*req.KeepMemory)
	// A sandbox not placed yet is not known to any runtime (its state
	// refuses a suspend anyway).
	if err := s.CheckSuspendKind("sandbox "+string(sb.ID), sb.Runtime, want); err != nil {
		return "", err
	}
	return want, nil
}

// CheckSuspendKind refuses, with NotSupported, a suspend that must write a
// snapshot of kind on runtime when the runtime's capabilities
// (LifecycleSupport.Suspends) say it cannot write one: a suspend asked with
// keep_memory, and at create and set-timeout a deadline's suspend
// (model.Timeouts.SnapshotKind); what names that suspend in the message. A
// runtime this server does not know of (nor a server without
// LifecycleSupport) is not checked here: its sandboxes' deadlines fall back
// to the runtime's own suspend (reaper).
func (s *Service) CheckSuspendKind(what, runtime string, kind model.SnapshotKind) error {
	if s.cfg.LifecycleSupport == nil || kind == "" {
		return nil
	}
	sup, ok := s.cfg.LifecycleSupport(model.Sandbox{Runtime: runtime})
	if !ok || sup.CanSuspendAs(kind) {
		return nil
	}
	can := "cannot suspend a sandbox"
	if len(sup.Suspends) > 0 {
		ks := make([]string, len(sup.Suspends))
		for i, k := range sup.Suspends {
			ks[i] = kept(k)
		}
		can = "suspends keeping " + strings.Join(ks, ", or on request ")
	}
	return errorf(NotSupported, "%s runs on %s, which %s: a suspend that keeps %s (keep_memory %v) is not supported there",
		what, runtime, can, kept(kind), kind == model.SnapshotMemory)
}

// kept says what a snapshot of kind keeps, for a message.
func kept(kind model.SnapshotKind) string {
	if kind == model.SnapshotMemory {
		return "memory and processes"
	}
	return "only the filesystem (processes end)"
}

func runtimeName(sb model.Sandbox) string {
	if sb.Runtime == "" {
		return "a runtime"
	}
	return sb.Runtime
}

// RunFirst makes sandbox sb of project run for a request that asked to
// resume it first: a paused sandbox is resumed, a suspended one woken, and
// one in between is waited for, at most Config.ResumeTimeout; a running
// sandbox is returned at once. A sandbox in any other state, and an
// operation that fails, are refused with the *guestops.Error a request
// without resume would have had (sandbox_not_running, sandbox_paused,
// sandbox_suspended) and what went wrong; the bound passing is
// ResumeTimeout.
func (s *Service) RunFirst(ctx context.Context, project model.ProjectID, sb model.Sandbox) (model.Sandbox, error) {
	if sb.State == model.StateRunning {
		return sb, nil
	}
	wctx, cancel := context.WithTimeout(ctx, s.resumeTimeout())
	defer cancel()
	changed := s.cfg.Store.Watch(wctx) // before the first read: no change slips between
	// A backstop in case a change is coalesced away or the watch ends.
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var requested *model.Operation
	for {
		cur, err := s.sandbox(ctx, project, sb.ID)
		if err != nil {
			return model.Sandbox{}, err
		}
		switch cur.State {
		case model.StateRunning:
			return cur, nil
		case model.StatePaused, model.StateSuspended:
			if requested != nil {
				got, err := s.cfg.Store.GetOperation(ctx, project, requested.ID)
				if err != nil {
					return model.Sandbox{}, fmt.Errorf("get operation %s: %w", requested.ID, err)
				}
				if got.State != model.OpSucceeded {
					// Back where it was: the operation this request queued failed.
					return model.Sandbox{}, failedFirst(cur, got)
				}
				// It ran and was paused (suspended) again since: once more.
			}
			op, err := s.requestRun(ctx, project, cur)
			switch {
			case errors.Is(err, model.ErrInvalidTransition):
				// Another operation is under way or the state moved on:
				// wait for it and look again.
			case err != nil:
				return model.Sandbox{}, err
			default:
				requested = &op
				s.log.InfoContext(ctx, "request resumes its sandbox first", "sandbox", cur.ID, "operation", op.ID, "kind", op.Kind)
				continue // it is now resuming (or waking)
			}
		case model.StatePausing, model.StateResuming, model.StateSuspending, model.StateWaking, model.StateSnapshotting:
			// An operation is under way: wait for it to end.
		default:
			return model.Sandbox{}, guestops.NotRunning(cur.ID, cur.State)
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return model.Sandbox{}, context.Cause(ctx)
			}
			return model.Sandbox{}, errorf(ResumeTimeout,
				"sandbox %s did not run within %s of asking it to resume (it is %s); retry, or look at GET /v1/sandboxes/%s",
				sb.ID, s.resumeTimeout(), cur.State, sb.ID)
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
func (s *Service) requestRun(ctx context.Context, project model.ProjectID, sb model.Sandbox) (model.Operation, error) {
	kind := model.OpResume
	if sb.State == model.StateSuspended {
		kind = model.OpWake
	}
	if err := s.checkSupported(sb, kind); err != nil {
		return model.Operation{}, err
	}
	now := s.now()
	op := model.Operation{
		ID: model.NewOperationID(), ProjectID: project, SandboxID: sb.ID, Kind: kind,
		State: model.OpPending, CreatedAt: now, UpdatedAt: now,
	}
	if _, err := s.cfg.Store.RequestOperation(ctx, store.OperationRequest{
		ProjectID: project, SandboxID: sb.ID, Operation: op, Now: now,
	}); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return model.Operation{}, errorf(NotFound, "sandbox %s not found", sb.ID)
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
	base := guestops.NotRunning(sb.ID, sb.State)
	return &guestops.Error{Status: base.Status, Code: base.Code, Message: fmt.Sprintf(
		"the %s (%s) this request asked for failed: %s; sandbox %s is %s", op.Kind, op.ID, why, sb.ID, sb.State)}
}

// resumeTimeout is Config.ResumeTimeout or, when that is not positive,
// DefaultResumeTimeout.
func (s *Service) resumeTimeout() time.Duration {
	if s.cfg.ResumeTimeout > 0 {
		return s.cfg.ResumeTimeout
	}
	return DefaultResumeTimeout
}
