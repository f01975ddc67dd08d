package client

import (
	"context"
	"net/http"

	"github.com/airlockdev/airlock/internal/apiv1"
)

// ListPools returns every warm pool with its fill and hit/miss counts
// (GET /v1/pools; admin keys only).
func (c *Client) ListPools(ctx context.Context) (apiv1.PoolList, error) {
	var out apiv1.PoolList
	err := c.do(ctx, request{method: http.MethodGet, path: "/v1/pools"}, &out)
	return out, err
}

// PutPool creates a pool or sets its size (PUT /v1/pools; admin keys only).
func (c *Client) PutPool(ctx context.Context, req apiv1.PutPoolRequest) (apiv1.Pool, error) {
	var out apiv1.Pool
	err := c.do(ctx, request{method: http.MethodPut, path: "/v1/pools", body: req}, &out)
	return out, err
}

// DeletePool removes a pool by ID (DELETE /v1/pools/{id}; admin keys only);
// its unclaimed sandboxes are deleted, claimed ones are not touched.
func (c *Client) DeletePool(ctx context.Context, id string) (apiv1.Pool, error) {
	var out apiv1.Pool
	err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/pools/" + id}, &out)
	return out, err
}
