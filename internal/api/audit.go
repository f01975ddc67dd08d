package api

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/textclip"
)

// The audit log.
//
// Every request to a route whose method is not GET or HEAD (route.audited:
// a property of the routing table, so a new route cannot forget it) is
// recorded in the store after its handler ran: who (the principal), what
// (the route), which resource (the path values, and the ID a create
// answered with) and the result (status and error code). Refusals are
// recorded too (403, 400, 404, 409, …) once the caller is authenticated.
// Nothing is read back from the answer's body: the status is the logging
// middleware's (statusWriter), the error code is noted by writeError and
// the created ID by the create's handler (call.created), both in the
// request's requestInfo; a forwarded request's hosting node sends both
// back in headers (noderoute.HeaderErrorCode, HeaderCreatedID).
// Not recorded:
//   - requests whose credentials were not accepted (401, or no principal):
//     anyone can send them, and recording them would let anonymous traffic
//     fill the table (the request log line has them);
//   - requests refused by the rate limit (429 rate_limited): the limit
//     exists to bound a key's write load, which a row per refusal would
//     undo;
//   - requests forwarded by another replica (the one the client called
//     records it, with the answer it relayed): each request once;
//   - the port proxy (guestTraffic: a sandbox's own HTTP traffic, not a
//     change to Airlock's state).
//
// The entry is written after the change happened; if writing it fails the
// request's answer stands (it is already decided), the failure is logged at
// error level and counted (API.AuditFailures).

// auditTimeout bounds writing one audit entry.
const auditTimeout = 5 * time.Second

// maxAuditValue bounds one recorded path value.
const maxAuditValue = 256

// audited reports whether requests to the route are recorded in the audit
// log: every method but GET and HEAD, except a sandbox's own traffic
// (guestTraffic: the port proxy).
func (rt route) audited() bool {
	return rt.method != http.MethodGet && rt.method != http.MethodHead && !rt.has(guestTraffic)
}

// AuditFailures is how many audit entries could not be written since the
// API started.
func (a *API) AuditFailures() int64 { return a.auditFailures.Load() }

// recordAudit writes the audit entry of a request to rt that p made and
// w answered (panicked: the handler panicked, a 500 follows). The status
// is the one the logging middleware's statusWriter saw; the error code and
// the created ID are what the request's requestInfo noted.
func (a *API) recordAudit(r *http.Request, rt route, p principal, w http.ResponseWriter, panicked bool) {
	ctx := r.Context()
	if p.project == "" || peerFrom(ctx) != nil {
		return // not authenticated, or the forwarding replica records it
	}
	status := responseStatus(w)
	if panicked && status == 0 {
		status = http.StatusInternalServerError
	}
	var code, created string
	if info := infoFrom(ctx); info != nil {
		code, created = info.errorCode, info.created
	}
	if status == http.StatusTooManyRequests && code == apiv1.CodeRateLimited {
		return
	}
	if panicked && code == "" {
		code = apiv1.CodeInternal
	}
	e := store.AuditEntry{
		At:           a.now(),
		RequestID:    requestIDFrom(ctx),
		KeyID:        p.keyID,
		Project:      p.project,
		TokenSandbox: p.sandbox,
		Method:       rt.method,
		Route:        rt.pattern,
		Action:       rt.method + " " + rt.pattern,
		Status:       status,
	}
	e.ResourceKind, e.ResourceID, e.PathValues = auditResource(rt.pattern, r)
	if strings.HasPrefix(rt.pattern, "/v1/sandboxes/{id}") {
		if id, err := model.ParseSandboxID(r.PathValue("id")); err == nil {
			e.Sandbox = id
		}
	}
	if status >= 400 || status < 100 {
		e.ErrorCode = auditText(code)
	} else if e.ResourceID == "" {
		e.CreatedID = auditText(created)
		if id, err := model.ParseSandboxID(created); err == nil {
			e.Sandbox = id
		}
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
	defer cancel()
	if _, err := a.cfg.Store.AppendAudit(wctx, e); err != nil {
		a.auditFailures.Add(1)
		a.cfg.Metrics.AuditWriteFailed()
		a.log.ErrorContext(ctx, "audit entry not recorded", "action", e.Action, "status", e.Status,
			"key", e.KeyID, "project", e.Project, "resource", e.ResourceID, "request_id", e.RequestID, "err", err)
	}
}

// auditResource names the resource of a request to pattern: the kind is
// the collection its last path value is in (the route's first collection
// when it has none, e.g. a create), its ID that value.
func auditResource(pattern string, r *http.Request) (kind, id string, values map[string]string) {
	values = map[string]string{}
	segs := strings.Split(strings.TrimPrefix(strings.TrimPrefix(pattern, "/v1/"), "admin/"), "/")
	prev := ""
	for _, seg := range segs {
		if !strings.HasPrefix(seg, "{") {
			prev = seg
			continue
		}
		name := strings.TrimSuffix(strings.Trim(seg, "{}"), "...")
		id = auditText(r.PathValue(name))
		values[name] = id
		kind = prev
	}
	if kind == "" {
		// No path value: the route's first collection (POST /v1/sandboxes,
		// POST /v1/admin/attach-keys/rotate).
		kind = segs[0]
	}
	return singular(kind), id, values
}

// singular names a resource kind after its collection.
func singular(collection string) string {
	switch collection {
	case "sandboxes":
		return "sandbox"
	case "processes":
		return "process"
	case "keys":
		return "api_key"
	case "tags":
		return "template_tag"
	}
	return strings.ReplaceAll(strings.TrimSuffix(collection, "s"), "-", "_")
}

// auditText makes a request's value fit to store: valid UTF-8 without NUL,
// at most maxAuditValue bytes.
func auditText(s string) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
	return textclip.Prefix(s, maxAuditValue)
}
