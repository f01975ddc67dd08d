package api

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// listOperations: GET /v1/operations[?sandbox=][&state=…][&kind=…]
// [&project=][&limit=][&cursor=] → 200 OperationList, newest first. A
// member sees its own project; an admin may name another with project.
// state and kind may be given more than once (any of them matches).
func (a *API) listOperations(w http.ResponseWriter, r *http.Request, p principal) {
	q, err := a.parseOperationQuery(r.Context(), p, r.URL.Query())
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	page, err := a.cfg.Store.ListOperations(r.Context(), q)
	if err != nil {
		a.writeError(w, r, fmt.Errorf("list operations: %w", err))
		return
	}
	out := apiv1.OperationList{Operations: make([]apiv1.Operation, 0, len(page.Operations))}
	for _, op := range page.Operations {
		out.Operations = append(out.Operations, operationOut(op))
	}
	if page.Next != nil {
		out.NextCursor = encodeOpCursor(*page.Next)
	}
	writeJSON(w, http.StatusOK, out)
}

// parseOperationQuery parses the query string of GET /v1/operations.
func (a *API) parseOperationQuery(ctx context.Context, p principal, q url.Values) (store.OperationQuery, error) {
	oq := store.OperationQuery{ProjectID: p.project, Limit: defaultListLimit}
	for name, vals := range q {
		switch name {
		case "state":
			for _, v := range vals {
				st, err := parseOperationState(v)
				if err != nil {
					return store.OperationQuery{}, err
				}
				if !slices.Contains(oq.States, st) {
					oq.States = append(oq.States, st)
				}
			}
		case "kind":
			for _, v := range vals {
				k, err := model.ParseOperationKind(v)
				if err != nil {
					return store.OperationQuery{}, err
				}
				if !slices.Contains(oq.Kinds, k) {
					oq.Kinds = append(oq.Kinds, k)
				}
			}
		case "sandbox", "project", "limit", "cursor":
			if len(vals) != 1 {
				return store.OperationQuery{}, badRequest("give %s once", name)
			}
		default:
			return store.OperationQuery{}, badRequest("unknown query parameter %q", truncate(name))
		}
	}
	if v, ok := q["sandbox"]; ok {
		id, err := model.ParseSandboxID(v[0])
		if err != nil {
			return store.OperationQuery{}, err
		}
		oq.SandboxID = id
	}
	if v, ok := q["limit"]; ok {
		n, err := strconv.Atoi(v[0])
		if err != nil || n < 1 || n > maxListLimit {
			return store.OperationQuery{}, badRequest("limit must be an integer from 1 to %d", maxListLimit)
		}
		oq.Limit = n
	}
	if v, ok := q["cursor"]; ok {
		c, err := decodeOpCursor(v[0])
		if err != nil {
			return store.OperationQuery{}, err
		}
		oq.After = &c
	}
	if v, ok := q["project"]; ok {
		id, err := model.ParseProjectID(v[0])
		if err != nil {
			return store.OperationQuery{}, err
		}
		if id != p.project {
			if p.role != model.RoleAdmin {
				return store.OperationQuery{}, errorf(http.StatusForbidden, apiv1.CodePermissionDenied,
					"only an admin key may list another project's operations")
			}
			if _, err := a.cfg.Store.GetProject(ctx, id); err != nil {
				if errors.Is(err, store.ErrNotFound) {
					return store.OperationQuery{}, notFound("project %s not found", id)
				}
				return store.OperationQuery{}, fmt.Errorf("get project %s: %w", id, err)
			}
		}
		oq.ProjectID = id
	}
	slices.Sort(oq.States)
	slices.Sort(oq.Kinds)
	return oq, nil
}

// parseOperationState parses an operation state filter.
func parseOperationState(s string) (model.OperationState, error) {
	switch st := model.OperationState(s); st {
	case model.OpPending, model.OpRunning, model.OpSucceeded, model.OpFailed:
		return st, nil
	}
	return "", badRequest("state must be pending, running, succeeded or failed, not %q", truncate(s))
}

// opCursorVersion is the first byte of an operation listing's cursor.
const opCursorVersion = 1

// encodeOpCursor makes the opaque next_cursor of an operation listing:
// base64url(version ‖ created_at as big-endian Unix nanoseconds ‖ operation ID).
func encodeOpCursor(c store.OperationCursor) string {
	b := make([]byte, 0, 9+len(c.ID))
	b = append(b, opCursorVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(c.CreatedAt.UnixNano()))
	b = append(b, c.ID...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeOpCursor parses a cursor made by encodeOpCursor; anything else,
// including a sandbox listing's cursor, is a 400.
func decodeOpCursor(s string) (store.OperationCursor, error) {
	bad := badRequest("cursor is not one this server issued")
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 10 || b[0] != opCursorVersion {
		return store.OperationCursor{}, bad
	}
	id, err := model.ParseOperationID(string(b[9:]))
	if err != nil {
		return store.OperationCursor{}, bad
	}
	c := store.OperationCursor{CreatedAt: time.Unix(0, int64(binary.BigEndian.Uint64(b[1:9]))).UTC(), ID: id}
	if encodeOpCursor(c) != s {
		return store.OperationCursor{}, bad
	}
	return c, nil
}
