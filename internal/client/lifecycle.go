package client

import (
	"context"
	"fmt"
	"net/http"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// PauseSandbox asks for a running sandbox to be paused (POST
// /v1/sandboxes/{id}/pause): its processes freeze, its memory stays. The
// sandbox is paused once the returned operation succeeds; see
// WaitOperation.
func (c *Client) PauseSandbox(ctx context.Context, id model.SandboxID) (apiv1.SandboxWithOperation, error) {
	return c.lifecycle(ctx, id, model.OpPause)
}

// ResumeSandbox asks for a paused sandbox to continue (POST
// /v1/sandboxes/{id}/resume).
func (c *Client) ResumeSandbox(ctx context.Context, id model.SandboxID) (apiv1.SandboxWithOperation, error) {
	return c.lifecycle(ctx, id, model.OpResume)
}

// SuspendSandbox asks for a running or paused sandbox to be suspended
// (POST /v1/sandboxes/{id}/suspend): snapshotted, and what it holds while
// running freed. The sandbox's Snapshot says what was kept.
func (c *Client) SuspendSandbox(ctx context.Context, id model.SandboxID) (apiv1.SandboxWithOperation, error) {
	return c.lifecycle(ctx, id, model.OpSuspend)
}

// SuspendSandboxKeeping asks for a suspend that keeps memory (true) or
// only the filesystem (false); the server refuses with not_supported where
// the sandbox's runtime keeps the other (POST /v1/sandboxes/{id}/suspend
// {"keep_memory": …}).
func (c *Client) SuspendSandboxKeeping(ctx context.Context, id model.SandboxID, keepMemory bool) (apiv1.SandboxWithOperation, error) {
	var out apiv1.SandboxWithOperation
	err := c.do(ctx, request{method: http.MethodPost, path: "/v1/sandboxes/" + id.String() + "/suspend",
		body: apiv1.SuspendRequest{KeepMemory: &keepMemory}}, &out)
	return out, err
}

// WakeSandbox asks for a suspended sandbox to be restored from its
// snapshot (POST /v1/sandboxes/{id}/wake).
func (c *Client) WakeSandbox(ctx context.Context, id model.SandboxID) (apiv1.SandboxWithOperation, error) {
	return c.lifecycle(ctx, id, model.OpWake)
}

// LifecycleSandbox asks for the lifecycle operation kind (pause, resume,
// suspend or wake) of a sandbox; other kinds have their own calls.
func (c *Client) LifecycleSandbox(ctx context.Context, id model.SandboxID, kind model.OperationKind) (apiv1.SandboxWithOperation, error) {
	switch kind {
	case model.OpPause, model.OpResume, model.OpSuspend, model.OpWake:
		return c.lifecycle(ctx, id, kind)
	}
	return apiv1.SandboxWithOperation{}, fmt.Errorf("client: %q is not a lifecycle route (pause, resume, suspend, wake)", kind)
}

func (c *Client) lifecycle(ctx context.Context, id model.SandboxID, kind model.OperationKind) (apiv1.SandboxWithOperation, error) {
	var out apiv1.SandboxWithOperation
	err := c.do(ctx, request{method: http.MethodPost, path: "/v1/sandboxes/" + id.String() + "/" + string(kind)}, &out)
	return out, err
}
