package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// ListOperationsQuery selects operations for GET /v1/operations.
type ListOperationsQuery struct {
	Sandbox model.SandboxID        // only this sandbox's
	States  []model.OperationState // any of these states
	Kinds   []model.OperationKind  // any of these kinds
	Project model.ProjectID        // admin: another project ("": the key's)
	Limit   int
	Cursor  string // a previous page's NextCursor
}

func (q ListOperationsQuery) values() url.Values {
	v := url.Values{}
	if q.Sandbox != "" {
		v.Set("sandbox", q.Sandbox.String())
	}
	for _, s := range q.States {
		v.Add("state", string(s))
	}
	for _, k := range q.Kinds {
		v.Add("kind", string(k))
	}
	if q.Project != "" {
		v.Set("project", q.Project.String())
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	return v
}

// ListOperations returns one page of operations, newest first.
func (c *Client) ListOperations(ctx context.Context, q ListOperationsQuery) (apiv1.OperationList, error) {
	var out apiv1.OperationList
	err := c.do(ctx, request{method: http.MethodGet, path: "/v1/operations", query: q.values()}, &out)
	return out, err
}

// ListAllOperations follows the cursors from q.Cursor to the last page and
// returns every operation; q.Limit is the page size.
func (c *Client) ListAllOperations(ctx context.Context, q ListOperationsQuery) (apiv1.OperationList, error) {
	items, err := allPages("/v1/operations", q.Cursor, func(cursor string) ([]apiv1.Operation, string, error) {
		q.Cursor = cursor
		page, err := c.ListOperations(ctx, q)
		return page.Operations, page.NextCursor, err
	})
	return apiv1.OperationList{Operations: items}, err
}
