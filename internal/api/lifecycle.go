package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/sandboxes"
	"github.com/airlockdev/airlock/internal/store"
)

// lifecycleRoutes are the lifecycle operations on an existing sandbox
// besides delete: each answers 202 SandboxWithOperation.
func (a *API) lifecycleRoutes() []route {
	return []route{
		{"POST", "/v1/sandboxes/{id}/pause", member, mutating(a, a.lifecycleOp(model.OpPause))},
		{"POST", "/v1/sandboxes/{id}/resume", member | sandboxToken, mutating(a, a.lifecycleOp(model.OpResume))},
		{"POST", "/v1/sandboxes/{id}/suspend", member, mutating(a, a.suspendOp)},
		{"POST", "/v1/sandboxes/{id}/wake", member | sandboxToken, mutating(a, a.lifecycleOp(model.OpWake))},
	}
}

// lifecycleOp: POST /v1/sandboxes/{id}/{kind} → 202 SandboxWithOperation,
// the sandbox in the kind's in-progress state and the queued operation
// (sandboxes.Service.Lifecycle). Refused: 404 for a sandbox the project
// does not have, 501 not_supported when its runtime cannot do it, 409
// sandbox_busy while another operation of it is unfinished and 409
// invalid_transition when the kind cannot start from its state.
func (a *API) lifecycleOp(kind model.OperationKind) func(ctx context.Context, c *call[noBody]) (*reply, error) {
	if _, err := model.LifecycleOf(kind); err != nil {
		panic(fmt.Sprintf("api: lifecycle route of %s: %v", kind, err)) // the route table names only known kinds
	}
	return func(ctx context.Context, c *call[noBody]) (*reply, error) {
		id, err := model.ParseSandboxID(c.r.PathValue("id"))
		if err != nil {
			return nil, err
		}
		// The answer is encoded before the store call so that the
		// idempotency record is written in the same transaction.
		var rep *reply
		_, err = a.cfg.Sandboxes.Lifecycle(ctx, sandboxes.LifecycleRequest{Project: c.p.project, Sandbox: id, Kind: kind, Now: c.now,
			Idempotency: func(ch sandboxes.Changed) (*store.IdempotencyRecord, error) {
				r, rec, err := c.reply(http.StatusAccepted, apiv1.SandboxWithOperation{Sandbox: sandboxOut(ch.Sandbox), Operation: operationOut(ch.Operation)})
				rep = r
				return rec, err
			}})
		if err != nil {
			return nil, err
		}
		return rep, nil
	}
}

// snapshotOut is the wire form of a sandbox's snapshot record (nil: none).
func snapshotOut(s *model.Snapshot) *apiv1.Snapshot {
	if s == nil {
		return nil
	}
	return &apiv1.Snapshot{Kind: string(s.Kind), Environment: s.Environment.String(), SizeBytes: s.SizeBytes, CreatedAt: s.CreatedAt.UTC()}
}

// suspendBody is the optional body of POST /v1/sandboxes/{id}/suspend
// (apiv1.SuspendRequest); none is {}.
type suspendBody apiv1.SuspendRequest

func (suspendBody) optionalBody() {}

// suspendOp: POST /v1/sandboxes/{id}/suspend [SuspendRequest] → 202
// SandboxWithOperation, as lifecycleOp; keep_memory, when given, must be
// what the sandbox's runtime keeps (501 not_supported otherwise: a
// filesystem-only suspend on runsc or qemu, a memory one on runc or crun).
func (a *API) suspendOp(ctx context.Context, c *call[suspendBody]) (*reply, error) {
	id, err := model.ParseSandboxID(c.r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	var rep *reply
	_, err = a.cfg.Sandboxes.Lifecycle(ctx, sandboxes.LifecycleRequest{Project: c.p.project, Sandbox: id, Kind: model.OpSuspend, Now: c.now,
		KeepMemory: c.in.KeepMemory,
		Idempotency: func(ch sandboxes.Changed) (*store.IdempotencyRecord, error) {
			r, rec, err := c.reply(http.StatusAccepted, apiv1.SandboxWithOperation{Sandbox: sandboxOut(ch.Sandbox), Operation: operationOut(ch.Operation)})
			rep = r
			return rec, err
		}})
	if err != nil {
		return nil, err
	}
	return rep, nil
}
