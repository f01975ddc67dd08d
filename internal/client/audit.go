package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
)

// AuditQuery selects audit entries (GET /v1/audit); zero fields match
// everything.
type AuditQuery struct {
	Project, Key, Action, Resource, Sandbox string
	Result                                  string // ok, error or an HTTP status
	Since, Until                            time.Time
	Limit                                   int
	Cursor                                  string // a previous page's NextCursor
}

func (q AuditQuery) values() url.Values {
	v := url.Values{}
	for name, s := range map[string]string{"project": q.Project, "key": q.Key, "action": q.Action,
		"resource": q.Resource, "sandbox": q.Sandbox, "result": q.Result, "cursor": q.Cursor} {
		if s != "" {
			v.Set(name, s)
		}
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.Format(time.RFC3339Nano))
	}
	if !q.Until.IsZero() {
		v.Set("until", q.Until.Format(time.RFC3339Nano))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// ListAudit returns one page of the audit log, newest first (admin).
func (c *Client) ListAudit(ctx context.Context, q AuditQuery) (apiv1.AuditList, error) {
	var out apiv1.AuditList
	err := c.do(ctx, request{method: http.MethodGet, path: "/v1/audit", query: q.values()}, &out)
	return out, err
}

// ListAllAudit follows the cursors from q.Cursor to the last page; q.Limit
// is the page size.
func (c *Client) ListAllAudit(ctx context.Context, q AuditQuery) (apiv1.AuditList, error) {
	items, err := allPages("/v1/audit", q.Cursor, func(cursor string) ([]apiv1.AuditEntry, string, error) {
		q.Cursor = cursor
		page, err := c.ListAudit(ctx, q)
		return page.Entries, page.NextCursor, err
	})
	return apiv1.AuditList{Entries: items}, err
}
