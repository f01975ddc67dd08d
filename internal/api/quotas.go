package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// Per-project quotas bound what a project's live sandboxes (every state
// but deleted) hold together: how many, their vCPUs, memory and disk. The
// store checks them in the transaction that inserts a sandbox (see
// store.Store.CreateSandbox); a create they refuse is answered 403
// quota_exceeded (classify), not 429: waiting does not help, deleting a
// sandbox or a larger quota does, and clients that retry 429s on their own
// must not spin on it.

// quotaBody is the body of PUT …/quota: null fields mean unlimited, as
// absent ones do.
type quotaBody apiv1.QuotaLimits

func (quotaBody) nullable() {}

// quotaOf reads a project's quota and usage.
func (a *API) quotaOf(ctx context.Context, id model.ProjectID) (apiv1.ProjectQuota, error) {
	q, u, err := a.cfg.Store.GetProjectQuota(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return apiv1.ProjectQuota{}, notFound("project %s not found", id)
	}
	if err != nil {
		return apiv1.ProjectQuota{}, fmt.Errorf("get quota of project %s: %w", id, err)
	}
	return quotaOut(id, q, u), nil
}

// getQuota: GET /v1/admin/projects/{id}/quota → 200 ProjectQuota.
func (a *API) getQuota(w http.ResponseWriter, r *http.Request, _ principal) {
	id, err := model.ParseProjectID(r.PathValue("id"))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if id == model.SystemProject {
		a.writeError(w, r, notFound("project %s not found", id))
		return
	}
	out, err := a.quotaOf(r.Context(), id)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// setQuota: PUT /v1/admin/projects/{id}/quota → 200 ProjectQuota. The
// body replaces the whole quota. A quota below the current usage is
// accepted: it refuses new sandboxes until enough are deleted. Setting a
// quota is idempotent by nature.
func (a *API) setQuota(ctx context.Context, c *call[quotaBody]) (*reply, error) {
	q, err := model.ParseQuota(c.in.Sandboxes, c.in.CPUs, c.in.MemoryMiB, c.in.DiskMiB)
	if err != nil {
		return nil, err
	}
	id, err := model.ParseProjectID(c.r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	if id == model.SystemProject {
		// Pools have their own budget (--pool-memory-mib, --pool-cpus).
		return nil, notFound("project %s not found", id)
	}
	// An unknown project is the store's ErrNotFound: no read before.
	if err := a.cfg.Store.SetProjectQuota(ctx, id, q); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, notFound("project %s not found", id)
		}
		return nil, fmt.Errorf("set quota of project %s: %w", id, err)
	}
	out, err := a.quotaOf(ctx, id)
	if err != nil {
		return nil, err
	}
	a.log.InfoContext(ctx, "project quota set", "project", id, "sandboxes", limitText(q.Sandboxes),
		"cpus", limitText(q.CPUs), "memory_mib", limitText(q.MemoryMiB), "disk_mib", limitText(q.DiskMiB), "by", c.p.keyID)
	rep, rec, err := c.reply(http.StatusOK, out)
	if err != nil {
		return nil, err
	}
	if err := a.putIdempotency(ctx, rec); err != nil {
		return nil, err
	}
	return rep, nil
}

// limitText is a limit for the log: its number or "unlimited".
func limitText(l model.Limit) string {
	if m, ok := l.Max(); ok {
		return strconv.FormatInt(m, 10)
	}
	return "unlimited"
}
