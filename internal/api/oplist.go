package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/textclip"
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
			return store.OperationQuery{}, badRequest("unknown query parameter %q", textclip.Bytes(name, maxEcho))
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
				return store.OperationQuery{}, errorf(apiv1.CodePermissionDenied,
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
	return "", badRequest("state must be pending, running, succeeded or failed, not %q", textclip.Bytes(s, maxEcho))
}

// encodeOpCursor makes the next_cursor of an operation listing.
func encodeOpCursor(c store.OperationCursor) string {
	return encodeTimeCursor(c.CreatedAt, c.ID.String())
}

// decodeOpCursor parses an operation listing's cursor; anything else,
// including a sandbox listing's cursor, is a 400.
func decodeOpCursor(s string) (store.OperationCursor, error) {
	at, id, err := decodeTimeCursor(s, model.ParseOperationID)
	return store.OperationCursor{CreatedAt: at, ID: id}, err
}
