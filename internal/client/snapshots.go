package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// SnapshotSandbox asks for a saved snapshot of a running sandbox (POST
// /v1/sandboxes/{id}/snapshots); it is ready once the returned operation
// succeeds (WaitOperation), and the sandbox runs on.
func (c *Client) SnapshotSandbox(ctx context.Context, id model.SandboxID, req apiv1.SnapshotRequest) (apiv1.SnapshotWithOperation, error) {
	var out apiv1.SnapshotWithOperation
	err := c.do(ctx, request{method: http.MethodPost, path: "/v1/sandboxes/" + id.String() + "/snapshots", body: req}, &out)
	return out, err
}

// ForkSandbox asks for count new sandboxes continuing from a running one
// (POST /v1/sandboxes/{id}/fork); each runs once its create operation
// succeeded.
func (c *Client) ForkSandbox(ctx context.Context, id model.SandboxID, req apiv1.ForkRequest) (apiv1.ForkResult, error) {
	var out apiv1.ForkResult
	err := c.do(ctx, request{method: http.MethodPost, path: "/v1/sandboxes/" + id.String() + "/fork", body: req}, &out)
	return out, err
}

// GetSnapshot returns a saved snapshot (GET /v1/snapshots/{id}).
func (c *Client) GetSnapshot(ctx context.Context, id model.SnapshotID) (apiv1.SavedSnapshot, error) {
	var out apiv1.SavedSnapshot
	err := c.do(ctx, request{method: http.MethodGet, path: "/v1/snapshots/" + id.String()}, &out)
	return out, err
}

// ListSnapshots returns one page of the project's snapshots (GET
// /v1/snapshots), of that name if name is not ""; limit 0 is the server's
// page size.
func (c *Client) ListSnapshots(ctx context.Context, name string, limit int, cursor string) (apiv1.SnapshotList, error) {
	q := url.Values{}
	if name != "" {
		q.Set("name", name)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var out apiv1.SnapshotList
	err := c.do(ctx, request{method: http.MethodGet, path: "/v1/snapshots", query: q}, &out)
	return out, err
}

// DeleteSnapshot deletes a saved snapshot (DELETE /v1/snapshots/{id}):
// it is deleting, and gone once its node removed its files.
func (c *Client) DeleteSnapshot(ctx context.Context, id model.SnapshotID) (apiv1.SavedSnapshot, error) {
	var out apiv1.SavedSnapshot
	err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/snapshots/" + id.String()}, &out)
	return out, err
}
