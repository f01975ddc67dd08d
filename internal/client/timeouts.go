package client

import (
	"context"
	"net/http"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// SetSandboxTimeout sets (timeout > 0) or removes (0) a sandbox's deadline,
// timeout seconds from now, and, if on is not empty, what happens then
// (POST /v1/sandboxes/{id}/timeout).
func (c *Client) SetSandboxTimeout(ctx context.Context, id model.SandboxID, req apiv1.SetTimeoutRequest) (apiv1.Sandbox, error) {
	var out apiv1.Sandbox
	err := c.do(ctx, request{method: http.MethodPost, path: "/v1/sandboxes/" + id.String() + "/timeout", body: req}, &out)
	return out, err
}
