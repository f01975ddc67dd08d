package apiv1

import "time"

// AuditEntry is one request to a mutating route, as GET /v1/audit lists it.
type AuditEntry struct {
	ID        int64     `json:"id"` // ascending in the order entries were recorded
	Time      time.Time `json:"time"`
	RequestID string    `json:"request_id"`
	// Who: an API key and its project, or a sandbox access token (no
	// key_id; token_sandbox_id is its sandbox) and its project.
	KeyID          string `json:"key_id,omitempty"`
	ProjectID      string `json:"project_id"`
	TokenSandboxID string `json:"token_sandbox_id,omitempty"`
	// What: the route, e.g. "POST /v1/sandboxes/{id}/pause".
	Action string `json:"action"`
	Method string `json:"method"`
	Route  string `json:"route"`
	// Which resource: its kind (sandbox, process, template, api_key, …),
	// its ID (the route's last path value), every path value, the ID a
	// create answered with, and the sandbox concerned.
	ResourceKind string            `json:"resource_kind"`
	ResourceID   string            `json:"resource_id,omitempty"`
	PathValues   map[string]string `json:"path_values"`
	CreatedID    string            `json:"created_id,omitempty"`
	SandboxID    string            `json:"sandbox_id,omitempty"`
	// The result: the HTTP status (0: the client went away before an
	// answer) and the error code of a refusal.
	Status    int    `json:"status"`
	ErrorCode string `json:"error_code,omitempty"`
}

// AuditList is the response of GET /v1/audit: newest first.
type AuditList struct {
	Entries    []AuditEntry `json:"entries"`
	NextCursor string       `json:"next_cursor,omitempty"` // pass as ?cursor= for the next (older) page
}
