package sandboxes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// PutPoolRequest is a warm pool as an admin sets it, parsed.
type PutPoolRequest struct {
	Template model.TemplateRef
	// Environment names the pool's environment; "": the server's default
	// ("" on a server without environments).
	Environment environment.Name
	// Resources start from DefaultResources with what the request sets;
	// a pool keeps its sandboxes' CPUs and memory.
	Resources model.Resources
	Size      int // 0..model.MaxPoolSize
	Now       time.Time
}

// PutPool creates the pool of the request's key or sets its size; the
// template and environment must exist now.
func (s *Service) PutPool(ctx context.Context, req PutPoolRequest) (model.Pool, error) {
	if err := s.CheckResources(req.Resources); err != nil {
		return model.Pool{}, err
	}
	envName, err := s.poolEnvironment(ctx, req.Environment)
	if err != nil {
		return model.Pool{}, err
	}
	// Its sandboxes' host pids (the pool controller charges them so).
	res := req.Resources
	res.HostPids = environment.HostPids(environment.Name(envName), model.GuestPids(res.MemoryMiB))
	if err := s.CheckResources(res); err != nil {
		return model.Pool{}, err
	}
	if _, err := s.cfg.Store.ResolveTemplate(ctx, req.Template); errors.Is(err, store.ErrNotFound) {
		return model.Pool{}, errorf(TemplateNotFound, "template %s not found", req.Template)
	} else if err != nil {
		return model.Pool{}, fmt.Errorf("resolve template %s: %w", req.Template, err)
	}
	p, err := s.cfg.Store.PutPool(ctx, model.Pool{
		ID:   model.NewPoolID(),
		Key:  model.PoolKey{Template: req.Template, Environment: envName, CPUs: req.Resources.CPUs, MemoryMiB: req.Resources.MemoryMiB},
		Size: req.Size, LastUsed: req.Now, CreatedAt: req.Now, UpdatedAt: req.Now,
	})
	if err != nil {
		return model.Pool{}, fmt.Errorf("put pool: %w", err)
	}
	return p, nil
}

// poolEnvironment is the environment name of a pool: the one given (which
// must be known here) or the server's default; "" on a server without
// environments.
func (s *Service) poolEnvironment(ctx context.Context, given environment.Name) (string, error) {
	if s.cfg.Environments == nil {
		if given != "" {
			return "", errorf(NotSupported, "this server cannot choose an execution environment")
		}
		return "", nil
	}
	name := s.cfg.Environments.Default()
	if given != "" {
		name = given
	}
	if s.cfg.Placer != nil && !s.cfg.ClaimPools {
		return string(name), nil // an api replica: the nodes check it
	}
	if _, err := s.resolveEnvironment(ctx, environment.Selector{Name: name}); err != nil {
		return "", err
	}
	return string(name), nil
}

// poolCreate is what a create asks, for matching it with a pool.
type poolCreate struct {
	ref       model.TemplateRef
	tpl       model.TemplateDigest
	env       environment.Selector
	envRef    model.EnvironmentRef
	resources model.Resources
}

// poolCreateOf describes a create for matching it with a pool. envRef is
// the environment's reference when the create resolved it already (no
// placement); else it is resolved here, on this node.
func (s *Service) poolCreateOf(ctx context.Context, ref model.TemplateRef, tpl model.TemplateDigest, sel environment.Selector, envRef model.EnvironmentRef, res model.Resources) poolCreate {
	pc := poolCreate{ref: ref, tpl: tpl, env: sel, envRef: envRef, resources: res}
	if envRef == "" && s.cfg.ClaimPools && s.cfg.Environments != nil {
		if r, err := s.cfg.Environments.Resolve(ctx, sel); err == nil {
			pc.envRef = r
		}
	}
	return pc
}

// findPool returns the pool a create matches, if any: the pool of its
// template reference as given, or, for a create by digest, a pool that
// keeps that digest warm.
func (s *Service) findPool(ctx context.Context, pc poolCreate) (model.Pool, bool, error) {
	if pc.env.Name == "" && s.cfg.Environments != nil {
		return model.Pool{}, false, nil // named by reference: pools are keyed by name
	}
	key := model.PoolKey{Template: pc.ref, Environment: string(pc.env.Name), CPUs: pc.resources.CPUs, MemoryMiB: pc.resources.MemoryMiB}
	p, err := s.cfg.Store.FindPool(ctx, key)
	if err == nil {
		return p, true, nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return model.Pool{}, false, err
	}
	if _, byDigest := pc.ref.Digest(); !byDigest {
		return model.Pool{}, false, nil
	}
	pools, err := s.cfg.Store.ListPools(ctx)
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

// claimFromPool serves a create from a matching pool of this node. ok is
// false when there is none or it is empty (the create starts cold; an
// empty pool counts a miss).
func (s *Service) claimFromPool(ctx context.Context, req CreateRequest, pc poolCreate, sb model.Sandbox) (_ Created, ok bool, _ error) {
	if !s.cfg.ClaimPools || s.cfg.Self == "" || len(sb.NodeSelector) > 0 || pc.resources.DiskMiB != s.cfg.DefaultDiskMiB {
		return Created{}, false, nil
	}
	if pc.envRef == "" && s.cfg.Environments != nil {
		return Created{}, false, nil // the environment cannot run here: no pool of it either
	}
	p, ok, err := s.findPool(ctx, pc)
	if err != nil {
		return Created{}, false, fmt.Errorf("find a pool: %w", err)
	}
	if !ok {
		return Created{}, false, nil
	}
	var created Created
	claimed, err := s.cfg.Store.ClaimPoolSandbox(ctx, store.PoolClaim{
		Pool: p.ID, Template: pc.tpl, Environment: pc.envRef, Resources: pc.resources, Node: s.cfg.Self,
		ProjectID: sb.ProjectID, Env: sb.Env, Metadata: sb.Metadata, PublicPorts: sb.PublicPorts, Timeouts: sb.Timeouts, Egress: req.Egress,
		Operation: model.Operation{ID: model.NewOperationID(), CreatedAt: req.Now, UpdatedAt: req.Now},
		Idempotency: func(sb model.Sandbox, op model.Operation) (*store.IdempotencyRecord, error) {
			created = Created{Sandbox: sb, Operation: op, Egress: req.Egress, FromPool: true}
			if req.Idempotency == nil {
				return nil, nil
			}
			return req.Idempotency(created)
		},
		Now: req.Now,
	})
	if errors.Is(err, store.ErrNoWork) {
		if err := s.cfg.Store.NotePoolMiss(ctx, p.ID, req.Now); err != nil && !errors.Is(err, store.ErrNotFound) {
			s.log.WarnContext(ctx, "cannot count a pool miss", "pool", p.ID, "err", err)
		}
		return Created{}, false, nil
	}
	if err != nil {
		return Created{}, false, err
	}
	created.Sandbox = claimed
	s.applyClaimedEgress(ctx, claimed.ID)
	// The claim stored its create as succeeded: counted here, where it ran.
	s.cfg.Metrics.OperationFinished(string(model.OpCreate), true)
	s.cfg.Metrics.CreateFinished(claimed.Runtime, string(model.SourcePool), s.cfg.Now().Sub(req.Now))
	s.log.InfoContext(ctx, "sandbox claimed from pool", "sandbox", claimed.ID, "pool", p.ID, "project", claimed.ProjectID)
	return created, true, nil
}

// applyClaimedEgress applies the policy stored with a claim to the
// claimed sandbox, if it runs here. The pool's sandbox ran with no egress;
// from now on under the policy stored with the claim. Until that is
// applied it stays closed, never more open than asked.
func (s *Service) applyClaimedEgress(ctx context.Context, id model.SandboxID) {
	if s.cfg.Egress == nil {
		return
	}
	live, ok := s.cfg.Egress.ByID(id)
	if !ok {
		return
	}
	stored := func() (*policy.Policy, error) {
		spec, err := s.cfg.Store.GetSandboxEgressByID(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("egress policy of %s: %w", id, err)
		}
		return s.compileEgress(ctx, spec)
	}
	var err error
	for attempt := range 3 {
		if err = live.Reload(stored); err == nil {
			break
		}
		s.log.WarnContext(ctx, "claimed sandbox: egress policy stored but not applied yet", "sandbox", id, "attempt", attempt+1, "err", err)
	}
	if err != nil {
		s.log.ErrorContext(ctx, "claimed sandbox keeps no egress: its policy could not be applied (PUT its egress policy again to retry)", "sandbox", id, "err", err)
	}
}
