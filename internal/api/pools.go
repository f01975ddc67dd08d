package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/sandboxes"
	"github.com/airlockdev/airlock/internal/store"
)

// listPools: GET /v1/pools → 200 PoolList.
func (a *API) listPools(w http.ResponseWriter, r *http.Request, _ principal) {
	pools, err := a.stores.pools.ListPools(r.Context())
	if err != nil {
		a.writeError(w, r, fmt.Errorf("list pools: %w", err))
		return
	}
	fill, err := a.poolFill(r.Context())
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	out := apiv1.PoolList{Pools: make([]apiv1.Pool, 0, len(pools))}
	for _, p := range pools {
		out.Pools = append(out.Pools, a.poolOut(p, fill[p.ID]))
	}
	writeJSON(w, http.StatusOK, out)
}

// releaseFill counts a pool's unclaimed sandboxes of one digest, on every
// node.
type releaseFill struct{ ready, starting, draining int }

// poolFill counts the unclaimed sandboxes of every pool by digest.
func (a *API) poolFill(ctx context.Context) (map[model.PoolID]map[model.TemplateDigest]releaseFill, error) {
	counts, err := a.stores.pools.CountPoolSandboxes(ctx)
	if err != nil {
		return nil, fmt.Errorf("count pool sandboxes: %w", err)
	}
	out := map[model.PoolID]map[model.TemplateDigest]releaseFill{}
	for _, c := range counts {
		m := out[c.Pool]
		if m == nil {
			m = map[model.TemplateDigest]releaseFill{}
			out[c.Pool] = m
		}
		f := m[c.Template]
		switch c.State {
		case model.StateRunning:
			f.ready += c.N
		case model.StatePending, model.StateCreating:
			f.starting += c.N
		default: // being deleted, or failed (to be deleted)
			f.draining += c.N
		}
		m[c.Template] = f
	}
	return out, nil
}

func (a *API) poolOut(p model.Pool, fill map[model.TemplateDigest]releaseFill) apiv1.Pool {
	out := apiv1.Pool{
		ID: p.ID.String(), Template: p.Key.Template.String(), Environment: p.Key.Environment,
		CPUs: p.Key.CPUs, MemoryMiB: p.Key.MemoryMiB, Size: p.Size,
		Releases: []apiv1.PoolRelease{},
		Hits:     p.Hits, Misses: p.Misses,
		Drained:   p.Drained(a.now(), a.cfg.PoolDrainAfter),
		CreatedAt: p.CreatedAt.UTC(), UpdatedAt: p.UpdatedAt.UTC(),
	}
	if !p.LastUsed.IsZero() {
		t := p.LastUsed.UTC()
		out.LastUsedAt = &t
	}
	// Releases kept warm first (newest first), then older ones draining.
	digests := p.Releases()
	for d := range fill {
		if !slices.Contains(digests, d) {
			digests = append(digests, d)
		}
	}
	for _, d := range digests {
		f := fill[d]
		out.Draining += f.draining
		if f.ready+f.starting == 0 && !slices.Contains(p.Releases(), d) {
			continue // an old release with nothing left but deletes
		}
		out.Releases = append(out.Releases, apiv1.PoolRelease{Digest: d.String(), Ready: f.ready, Starting: f.starting})
		out.Ready += f.ready
		out.Starting += f.starting
	}
	return out
}

// putPool: PUT /v1/pools → 200 Pool. It creates the pool of the request's
// key or sets its size; the template and environment must exist now.
func (a *API) putPool(ctx context.Context, c *call[apiv1.PutPoolRequest]) (*reply, error) {
	ref, err := model.ParseTemplateRef(c.in.Template)
	if err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	if c.in.Size < 0 || c.in.Size > model.MaxPoolSize {
		return nil, badRequest("size must be 0–%d", model.MaxPoolSize)
	}
	req := sandboxes.PutPoolRequest{Template: ref, Resources: a.cfg.Sandboxes.DefaultResources(), Size: c.in.Size, Now: c.now}
	if c.present["cpus"] {
		req.Resources.CPUs = c.in.CPUs
	}
	if c.present["memory_mib"] {
		req.Resources.MemoryMiB = c.in.MemoryMiB
	}
	if c.present["environment"] {
		sel, err := environment.ParseSelector(c.in.Environment)
		if err != nil || sel.Name == "" {
			return nil, errorf(apiv1.CodeEnvironmentUnknown, "environment: a pool names its environment by name (e.g. runsc), not %q", c.in.Environment)
		}
		req.Environment = sel.Name
	}
	p, err := a.cfg.Sandboxes.PutPool(ctx, req)
	if err != nil {
		return nil, err
	}
	a.log.InfoContext(ctx, "pool set", "pool", p.ID, "template", ref, "environment", p.Key.Environment, "size", p.Size, "by", c.p.keyID)
	fill, err := a.poolFill(ctx)
	if err != nil {
		return nil, err
	}
	c.created(p.ID.String())
	c.created(p.ID.String())
	return idempotentReply(ctx, a, c, http.StatusOK, a.poolOut(p, fill[p.ID]))
}

// deletePool: DELETE /v1/pools/{id} → 200 Pool. The pool's unclaimed
// sandboxes are deleted by the nodes' pool controllers.
func (a *API) deletePool(ctx context.Context, c *call[noBody]) (*reply, error) {
	id, err := model.ParsePoolID(c.r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	fill, err := a.poolFill(ctx)
	if err != nil {
		return nil, err
	}
	p, err := a.stores.pools.DeletePool(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound("pool %s not found", id)
	} else if err != nil {
		return nil, fmt.Errorf("delete pool %s: %w", id, err)
	}
	a.log.InfoContext(ctx, "pool deleted", "pool", p.ID, "template", p.Key.Template, "by", c.p.keyID)
	return idempotentReply(ctx, a, c, http.StatusOK, a.poolOut(p, fill[p.ID]))
}
