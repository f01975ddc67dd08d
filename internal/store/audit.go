package store

import (
	"context"
	"time"

	"github.com/airlockdev/airlock/internal/model"
)

// AuditEntry is one request to a mutating API route, recorded after its
// handler ran (internal/api).
type AuditEntry struct {
	// ID is assigned by AppendAudit: ascending in commit order, so a
	// listing paged by ID never misses an entry committed meanwhile.
	ID        int64
	At        time.Time
	RequestID string // the request's X-Request-Id
	// The principal: an API key and its project, or a sandbox access
	// token (KeyID "") and its sandbox and project.
	KeyID        model.APIKeyID
	Project      model.ProjectID
	TokenSandbox model.SandboxID
	Method       string // e.g. POST
	Route        string // the routing pattern, e.g. /v1/sandboxes/{id}/pause
	Action       string // Method and Route, e.g. "POST /v1/sandboxes/{id}/pause"
	// The resource: its kind (e.g. sandbox, process, api_key) and ID (the
	// route's last path value; "" on a route without any), every path
	// value, the ID a create answered with, and the sandbox concerned.
	ResourceKind string
	ResourceID   string
	PathValues   map[string]string
	CreatedID    string
	Sandbox      model.SandboxID
	// The result: the HTTP status (0: nothing was answered, the client
	// went away first) and the error code ("" : none).
	Status    int
	ErrorCode string
}

// AuditQuery selects audit entries; zero fields match everything.
type AuditQuery struct {
	Project model.ProjectID
	Key     model.APIKeyID
	// ActionPrefix matches entries whose Action starts with it: a whole
	// action ("POST /v1/sandboxes/{id}/pause"), a method ("DELETE") or a
	// route prefix ("POST /v1/admin/").
	ActionPrefix string
	// Resource matches ResourceID or CreatedID exactly.
	Resource string
	// Sandbox matches Sandbox or TokenSandbox.
	Sandbox model.SandboxID
	// Result: OK (a status from 100 to 399), Error (any other, 0
	// included) or one Status; zero: any.
	Result AuditResult
	Since  time.Time // inclusive; zero: no bound
	Until  time.Time // exclusive; zero: no bound
	Limit  int       // 1..1000
	Before int64     // exclusive ID; 0 starts at the newest
}

// AuditResult selects entries by their status.
type AuditResult struct {
	OK, Error bool
	Status    int // 100..599
}

// AuditPage is one page of entries, newest (highest ID) first.
type AuditPage struct {
	Entries []AuditEntry
	Next    int64 // pass as Before for the next page; 0 on the last page
}

// Audit is the audit log.
type Audit interface {
	// AppendAudit records e (its ID is ignored) and returns its ID.
	AppendAudit(ctx context.Context, e AuditEntry) (int64, error)
	// ListAudit returns entries matching q, newest first.
	ListAudit(ctx context.Context, q AuditQuery) (AuditPage, error)
	// PurgeAudit removes up to limit (1..10000) of the oldest entries
	// recorded before the given time and returns how many.
	PurgeAudit(ctx context.Context, before time.Time, limit int) (int, error)
}
