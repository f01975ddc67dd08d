package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/envid"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// listPools: GET /v1/pools → 200 PoolList.
func (a *API) listPools(w http.ResponseWriter, r *http.Request, _ principal) {
	pools, err := a.cfg.Store.ListPools(r.Context())
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
	counts, err := a.cfg.Store.CountPoolSandboxes(ctx)
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
	res := model.DefaultResources()
	res.DiskMiB = a.cfg.DefaultDiskMiB
	if c.present["cpus"] {
		res.CPUs = c.in.CPUs
	}
	if c.present["memory_mib"] {
		res.MemoryMiB = c.in.MemoryMiB
	}
	if err := res.Validate(); err != nil {
		return nil, err
	}
	if a.cfg.Capacity != nil {
		if err := res.FitsNode(*a.cfg.Capacity); err != nil {
			return nil, errorf(http.StatusBadRequest, apiv1.CodeExceedsCapacity, "%s", err.Error())
		}
	}
	envName, err := a.poolEnvironment(ctx, c.present["environment"], c.in.Environment)
	if err != nil {
		return nil, err
	}
	if _, err := a.cfg.Store.ResolveTemplate(ctx, ref); errors.Is(err, store.ErrNotFound) {
		return nil, errorf(http.StatusNotFound, apiv1.CodeTemplateNotFound, "template %s not found", ref)
	} else if err != nil {
		return nil, fmt.Errorf("resolve template %s: %w", ref, err)
	}
	p, err := a.cfg.Store.PutPool(ctx, model.Pool{
		ID:   model.NewPoolID(),
		Key:  model.PoolKey{Template: ref, Environment: envName, CPUs: res.CPUs, MemoryMiB: res.MemoryMiB},
		Size: c.in.Size, LastUsed: c.now, CreatedAt: c.now, UpdatedAt: c.now,
	})
	if err != nil {
		return nil, fmt.Errorf("put pool: %w", err)
	}
	a.log.InfoContext(ctx, "pool set", "pool", p.ID, "template", ref, "environment", envName, "size", p.Size, "by", c.p.keyID)
	fill, err := a.poolFill(ctx)
	if err != nil {
		return nil, err
	}
	return idempotentReply(ctx, a, c, http.StatusOK, a.poolOut(p, fill[p.ID]))
}

// poolEnvironment is the environment name of a pool: the one given (which
// must be known here) or the server's default; "" on a server without
// environments.
func (a *API) poolEnvironment(ctx context.Context, given bool, s string) (string, error) {
	if a.cfg.Environments == nil {
		if given {
			return "", errorf(http.StatusNotImplemented, apiv1.CodeNotSupported, "this server cannot choose an execution environment")
		}
		return "", nil
	}
	name := a.cfg.Environments.Default()
	if given {
		sel, err := envid.ParseSelector(s)
		if err != nil || sel.Name == "" {
			return "", errorf(http.StatusBadRequest, apiv1.CodeEnvironmentUnknown, "environment: a pool names its environment by name (e.g. runsc), not %q", s)
		}
		name = sel.Name
	}
	if a.cfg.Placer != nil && !a.cfg.ClaimPools {
		return string(name), nil // an api replica: the nodes check it
	}
	if _, err := a.createEnvironment(ctx, true, string(name)); err != nil {
		return "", err
	}
	return string(name), nil
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
	p, err := a.cfg.Store.DeletePool(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound("pool %s not found", id)
	} else if err != nil {
		return nil, fmt.Errorf("delete pool %s: %w", id, err)
	}
	a.log.InfoContext(ctx, "pool deleted", "pool", p.ID, "template", p.Key.Template, "by", c.p.keyID)
	return idempotentReply(ctx, a, c, http.StatusOK, a.poolOut(p, fill[p.ID]))
}

// poolCreate is what a create asks, for matching it with a pool.
type poolCreate struct {
	ref       model.TemplateRef
	tpl       model.TemplateDigest
	env       envid.Selector
	envRef    model.EnvironmentRef
	resources model.Resources
}

// poolCreateOf describes a create for matching it with a pool. envRef is
// the environment's reference when the create resolved it already (no
// placement); else it is resolved here, on this node.
func (a *API) poolCreateOf(ctx context.Context, ref model.TemplateRef, tpl model.TemplateDigest, sel envid.Selector, envRef model.EnvironmentRef, res model.Resources) poolCreate {
	pc := poolCreate{ref: ref, tpl: tpl, env: sel, envRef: envRef, resources: res}
	if envRef == "" && a.cfg.ClaimPools && a.cfg.Environments != nil {
		if r, err := a.cfg.Environments.Resolve(ctx, sel); err == nil {
			pc.envRef = r
		}
	}
	return pc
}

// findPool returns the pool a create matches, if any: the pool of its
// template reference as given, or, for a create by digest, a pool that
// keeps that digest warm.
func (a *API) findPool(ctx context.Context, pc poolCreate) (model.Pool, bool, error) {
	if pc.env.Name == "" && a.cfg.Environments != nil {
		return model.Pool{}, false, nil // named by reference: pools are keyed by name
	}
	key := model.PoolKey{Template: pc.ref, Environment: string(pc.env.Name), CPUs: pc.resources.CPUs, MemoryMiB: pc.resources.MemoryMiB}
	p, err := a.cfg.Store.FindPool(ctx, key)
	if err == nil {
		return p, true, nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return model.Pool{}, false, err
	}
	if _, byDigest := pc.ref.Digest(); !byDigest {
		return model.Pool{}, false, nil
	}
	pools, err := a.cfg.Store.ListPools(ctx)
	if err != nil {
		return model.Pool{}, false, err
	}
	for _, p := range pools {
		k := p.Key
		if k.Environment == key.Environment && k.CPUs == key.CPUs && k.MemoryMiB == key.MemoryMiB && slices.Contains(p.Releases(), pc.tpl) {
			return p, true, nil
		}
	}
	return model.Pool{}, false, nil
}

// claimFromPool serves a create from a matching pool of this node. It
// returns nil, nil when there is none or it is empty (the create starts
// cold; an empty pool counts a miss).
func (a *API) claimFromPool(ctx context.Context, c *call[apiv1.CreateSandboxRequest], pc poolCreate, sb model.Sandbox, egressSpec policy.Spec) (*reply, error) {
	if !a.cfg.ClaimPools || a.cfg.Self == "" || len(sb.NodeSelector) > 0 || pc.resources.DiskMiB != a.cfg.DefaultDiskMiB {
		return nil, nil
	}
	if pc.envRef == "" && a.cfg.Environments != nil {
		return nil, nil // the environment cannot run here: no pool of it either
	}
	p, ok, err := a.findPool(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("find a pool: %w", err)
	}
	if !ok {
		return nil, nil
	}
	var rep *reply
	claimed, err := a.cfg.Store.ClaimPoolSandbox(ctx, store.PoolClaim{
		Pool: p.ID, Template: pc.tpl, Environment: pc.envRef, Resources: pc.resources, Node: a.cfg.Self,
		ProjectID: sb.ProjectID, Env: sb.Env, Metadata: sb.Metadata, PublicPorts: sb.PublicPorts, Timeouts: sb.Timeouts, Egress: egressSpec,
		Operation: model.Operation{ID: model.NewOperationID(), CreatedAt: c.now, UpdatedAt: c.now},
		Idempotency: func(sb model.Sandbox, op model.Operation) (*store.IdempotencyRecord, error) {
			out := sandboxOut(sb)
			e := egressPolicyOut(egressSpec)
			out.Egress = &e
			r, rec, err := c.reply(http.StatusCreated, apiv1.SandboxWithOperation{Sandbox: out, Operation: operationOut(op)})
			rep = r
			return rec, err
		},
		Now: c.now,
	})
	if errors.Is(err, store.ErrNoWork) {
		if err := a.cfg.Store.NotePoolMiss(ctx, p.ID, c.now); err != nil && !errors.Is(err, store.ErrNotFound) {
			a.log.WarnContext(ctx, "cannot count a pool miss", "pool", p.ID, "err", err)
		}
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if live, ok := a.liveSandbox(claimed.ID); ok {
		// The pool's sandbox ran with no egress; from now on under the
		// policy stored with the claim. Until that is applied it stays
		// closed, never more open than asked.
		var err error
		for attempt := range 3 {
			if err = live.Reload(a.storedPolicy(ctx, claimed.ID)); err == nil {
				break
			}
			a.log.WarnContext(ctx, "claimed sandbox: egress policy stored but not applied yet", "sandbox", claimed.ID, "attempt", attempt+1, "err", err)
		}
		if err != nil {
			a.log.ErrorContext(ctx, "claimed sandbox keeps no egress: its policy could not be applied (PUT its egress policy again to retry)", "sandbox", claimed.ID, "err", err)
		}
	}
	// The claim stored its create as succeeded: counted here, where it ran.
	a.cfg.Metrics.OperationFinished(string(model.OpCreate), true)
	a.cfg.Metrics.CreateFinished(claimed.Runtime, string(model.SourcePool), a.cfg.Now().Sub(c.now))
	a.log.InfoContext(ctx, "sandbox claimed from pool", "sandbox", claimed.ID, "pool", p.ID, "project", claimed.ProjectID)
	return rep, nil
}
