package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// getOperation: GET /v1/operations/{id}[?wait=30s] → 200 Operation. With a
// wait it long-polls: it answers as soon as the operation is finished, or
// with its current state when the wait elapses. Store.Watch wakes it; there
// is no polling loop. A client that disconnects ends the wait.
func (a *API) getOperation(w http.ResponseWriter, r *http.Request, p principal) {
	id, err := model.ParseOperationID(r.PathValue("id"))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	unknown := false
	for name := range r.URL.Query() {
		if name != "wait" {
			unknown = true
		}
	}
	if unknown {
		a.writeError(w, r, badRequest("the only query parameter is wait"))
		return
	}
	wait, err := parseWait(r.URL.Query())
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	op, err := a.waitOperation(r.Context(), p.project, id, wait)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, operationOut(op))
}

// waitOperation returns the operation once it is done or wait has elapsed.
func (a *API) waitOperation(ctx context.Context, project model.ProjectID, id model.OperationID, wait time.Duration) (model.Operation, error) {
	var changed <-chan struct{}
	if wait > 0 {
		// Subscribe before the first read so that no change slips between them.
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		changed = a.cfg.Store.Watch(wctx)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		op, err := a.cfg.Store.GetOperation(ctx, project, id)
		if errors.Is(err, store.ErrNotFound) {
			return model.Operation{}, notFound("operation %s not found", id)
		}
		if err != nil {
			return model.Operation{}, fmt.Errorf("get operation %s: %w", id, err)
		}
		if wait == 0 || op.State.Done() {
			return op, nil
		}
		select {
		case <-ctx.Done():
			return model.Operation{}, context.Cause(ctx)
		case <-timer.C:
			wait = 0 // one last read, then answer with what is there
		case _, ok := <-changed:
			if !ok {
				// The watch ended while ctx lives: the store is closing.
				if ctx.Err() != nil {
					return model.Operation{}, context.Cause(ctx)
				}
				changed = nil
				wait = 0
			}
		}
	}
}
