package api

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/textclip"
)

// Bounds of GET /v1/audit.
const (
	defaultAuditLimit = 50
	maxAuditLimit     = 500
)

// auditCursorVersion is the first byte of an audit cursor.
const auditCursorVersion = 1

// encodeAuditCursor makes the opaque next_cursor of GET /v1/audit:
// base64url(version ‖ the last entry's ID, big-endian).
func encodeAuditCursor(before int64) string {
	b := binary.BigEndian.AppendUint64([]byte{auditCursorVersion}, uint64(before))
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeAuditCursor(s string) (int64, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 9 || b[0] != auditCursorVersion {
		return 0, badRequest("cursor is not one this server issued")
	}
	id := int64(binary.BigEndian.Uint64(b[1:]))
	if id <= 0 || encodeAuditCursor(id) != s {
		return 0, badRequest("cursor is not one this server issued")
	}
	return id, nil
}

// listAudit: GET /v1/audit → 200 AuditList, newest first.
func (a *API) listAudit(w http.ResponseWriter, r *http.Request, _ principal) {
	q, err := parseAuditQuery(r.URL.Query())
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	page, err := a.cfg.Store.ListAudit(r.Context(), q)
	if err != nil {
		a.writeError(w, r, fmt.Errorf("list audit: %w", err))
		return
	}
	out := apiv1.AuditList{Entries: make([]apiv1.AuditEntry, 0, len(page.Entries))}
	for _, e := range page.Entries {
		out.Entries = append(out.Entries, auditEntryOut(e))
	}
	if page.Next != 0 {
		out.NextCursor = encodeAuditCursor(page.Next)
	}
	writeJSON(w, http.StatusOK, out)
}

func auditEntryOut(e store.AuditEntry) apiv1.AuditEntry {
	pv := e.PathValues
	if pv == nil {
		pv = map[string]string{}
	}
	return apiv1.AuditEntry{
		ID: e.ID, Time: e.At, RequestID: e.RequestID,
		KeyID: string(e.KeyID), ProjectID: string(e.Project), TokenSandboxID: string(e.TokenSandbox),
		Action: e.Action, Method: e.Method, Route: e.Route,
		ResourceKind: e.ResourceKind, ResourceID: e.ResourceID, PathValues: pv, CreatedID: e.CreatedID,
		SandboxID: string(e.Sandbox), Status: e.Status, ErrorCode: e.ErrorCode,
	}
}

// parseAuditQuery parses the query string of GET /v1/audit. Every
// parameter may be given once.
func parseAuditQuery(vals url.Values) (store.AuditQuery, error) {
	q := store.AuditQuery{Limit: defaultAuditLimit}
	for name, vs := range vals {
		if len(vs) != 1 {
			return store.AuditQuery{}, badRequest("give %s once", textclip.Bytes(name, maxEcho))
		}
		v := vs[0]
		var err error
		switch name {
		case "project":
			q.Project, err = model.ParseProjectID(v)
		case "key":
			q.Key, err = model.ParseAPIKeyID(v)
		case "sandbox":
			q.Sandbox, err = model.ParseSandboxID(v)
		case "action":
			if v == "" || len(v) > maxAuditValue {
				err = badRequest("action must be a route such as \"POST /v1/sandboxes/{id}/pause\" or a prefix of one (\"DELETE\", \"POST /v1/admin/\"), at most %d bytes", maxAuditValue)
			}
			q.ActionPrefix = v
		case "resource":
			if v == "" || len(v) > maxAuditValue {
				err = badRequest("resource must be an ID of 1 to %d bytes", maxAuditValue)
			}
			q.Resource = v
		case "result":
			q.Result, err = parseAuditResult(v)
		case "since", "until":
			var t time.Time
			if t, err = time.Parse(time.RFC3339Nano, v); err != nil {
				err = badRequest("%s must be an RFC 3339 time such as 2026-01-02T15:04:05Z", name)
			} else if name == "since" {
				q.Since = t
			} else {
				q.Until = t
			}
		case "limit":
			n, aerr := strconv.Atoi(v)
			if aerr != nil || n < 1 || n > maxAuditLimit {
				err = badRequest("limit must be an integer from 1 to %d", maxAuditLimit)
			}
			q.Limit = n
		case "cursor":
			q.Before, err = decodeAuditCursor(v)
		default:
			err = badRequest("unknown query parameter %q", textclip.Bytes(name, maxEcho))
		}
		if err != nil {
			return store.AuditQuery{}, err
		}
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Since.Before(q.Until) {
		return store.AuditQuery{}, badRequest("since must be before until")
	}
	return q, nil
}

// parseAuditResult parses result=: ok, error or an HTTP status.
func parseAuditResult(v string) (store.AuditResult, error) {
	switch v {
	case "ok":
		return store.AuditResult{OK: true}, nil
	case "error":
		return store.AuditResult{Error: true}, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 100 || n > 599 || strconv.Itoa(n) != v {
		return store.AuditResult{}, badRequest("result must be ok, error or an HTTP status from 100 to 599")
	}
	return store.AuditResult{Status: n}, nil
}
