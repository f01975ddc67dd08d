package client

import (
	"context"
	"net/http"

	"github.com/airlockdev/airlock/internal/apiv1"
)

// ListEnvironments returns the execution environments the server knows.
func (c *Client) ListEnvironments(ctx context.Context) (apiv1.EnvironmentList, error) {
	var out apiv1.EnvironmentList
	err := c.do(ctx, request{method: http.MethodGet, path: "/v1/environments"}, &out)
	return out, err
}
