package sandboxes

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/placement"
	"github.com/airlockdev/airlock/internal/store"
)

// CreateRequest is a new sandbox as a project asks for it, parsed.
type CreateRequest struct {
	Project  model.ProjectID
	Template model.TemplateRef
	// Resources start from DefaultResources with what the request sets.
	Resources    model.Resources
	Env          model.Env
	Metadata     model.Metadata
	Timeouts     model.Timeouts
	Egress       policy.Spec
	NodeSelector model.NodeLabels
	// PublicPorts: the sandbox's guest ports answer without its traffic
	// token (E2B's allowPublicTraffic).
	PublicPorts bool
	// Snapshot, if set, is the saved snapshot the sandbox starts from: its
	// template, resources and environment are the snapshot's (Template,
	// Resources, Environment and NodeSelector are ignored), on its node.
	Snapshot model.SnapshotID
	// Environment is the execution environment asked for (a name or a
	// reference); nil: the server's default.
	Environment *environment.Selector
	// Volumes are the project's volumes to mount (read-write). The
	// sandbox is placed on the node that holds them.
	Volumes []VolumeMountRequest
	// Local places the sandbox on this node (Config.Self), never claimed
	// from a pool: a template build's sandbox, whose writable layer this
	// node reads.
	Local bool
	// Now is the request's time: the sandbox's creation and last activity.
	Now time.Time
	// Idempotency, if set, builds the idempotency record stored with the
	// sandbox from what is about to be stored (it may be called more than
	// once, for each node a placement tries; the last call's is stored).
	Idempotency func(Created) (*store.IdempotencyRecord, error)
}

// Created is a sandbox the service created.
type Created struct {
	Sandbox   model.Sandbox
	Operation model.Operation
	Egress    policy.Spec
	// FromPool: claimed from a warm pool of this node, so already running
	// and its create operation succeeded; else pending, its create queued.
	FromPool bool
}

// Create makes a new sandbox: it checks what is asked (resources, egress
// policy, environment), waits for a template that is still building,
// resolves the template, claims a ready sandbox from a matching warm pool
// of this node or else places the sandbox on a node and stores it pending
// with its create operation. The project's quota (and the node's room) is
// checked last, by the store, in the transaction that inserts the sandbox:
// racing creates cannot both take the last slot.
func (s *Service) Create(ctx context.Context, req CreateRequest) (Created, error) {
	if req.Snapshot != "" {
		var idem func([]Created) (*store.IdempotencyRecord, error)
		if req.Idempotency != nil {
			idem = func(out []Created) (*store.IdempotencyRecord, error) { return req.Idempotency(out[0]) }
		}
		out, err := s.createFromSnapshot(ctx, req, req.Snapshot, 1, false, idem)
		if err != nil {
			return Created{}, err
		}
		return out[0], nil
	}
	if err := s.CheckResources(req.Resources); err != nil {
		return Created{}, err
	}
	if _, err := s.compileEgress(ctx, req.Egress); err != nil {
		return Created{}, err
	}
	if len(req.NodeSelector) > 0 && s.cfg.Placer == nil {
		return Created{}, errorf(NotSupported, "this server does not place sandboxes on nodes: node_selector is not supported")
	}
	envSel, err := s.environmentSelector(req.Environment)
	if err != nil {
		return Created{}, err
	}
	if err := s.checkTimeoutKind(ctx, envSel, req.Timeouts.SnapshotKind); err != nil {
		return Created{}, err
	}
	// Its host tasks, charged against its node's pids budget: one that
	// alone exceeds this node's is refused here (ExceedsCapacity), one
	// that does not fit what the nodes have left by placement and the
	// store (NoCapacity).
	if req.Resources.HostPids, err = s.hostPids(ctx, envSel, req.Resources.MemoryMiB); err != nil {
		return Created{}, err
	}
	if err := s.CheckResources(req.Resources); err != nil {
		return Created{}, err
	}
	volumes, volumeNode, err := s.resolveVolumes(ctx, req, envSel)
	if err != nil {
		return Created{}, err
	}
	var envRef model.EnvironmentRef
	if s.cfg.Placer == nil || req.Local {
		if envRef, err = s.resolveEnvironment(ctx, envSel); err != nil {
			return Created{}, err
		}
	}
	ref := req.Template
	if name, ok := ref.Name(); ok {
		// A template that is still building (the server's default on a
		// fresh host) is waited for.
		if err := s.waitForBuild(ctx, name, req.Project); err != nil {
			return Created{}, err
		}
	}
	tpl, err := s.cfg.Store.ResolveTemplate(ctx, ref)
	if errors.Is(err, store.ErrNotFound) {
		return Created{}, errorf(TemplateNotFound, "template %s not found", ref)
	}
	if err != nil {
		return Created{}, fmt.Errorf("resolve template %s: %w", ref, err)
	}
	sb := model.Sandbox{
		ID:        model.NewSandboxID(),
		ProjectID: req.Project,
		Template:  tpl.Digest,
		Resources: req.Resources,
		Env:       req.Env,
		Metadata:  req.Metadata,
		State:     model.StatePending,
		CreatedAt: req.Now,
		UpdatedAt: req.Now,

		Timeouts:     req.Timeouts,
		LastActivity: req.Now, // created is used: the idle limit counts from now
		NodeSelector: req.NodeSelector,
		Environment:  envRef,
		PublicPorts:  req.PublicPorts,
		VolumeMounts: volumes,
	}
	if req.Local {
		sb.NodeID = s.cfg.Self
	} else if len(volumes) == 0 { // a pool's sandboxes mount none
		pc := s.poolCreateOf(ctx, ref, tpl.Digest, envSel, envRef, req.Resources)
		if created, ok, err := s.claimFromPool(ctx, req, pc, sb); err != nil || ok {
			return created, err
		}
	}
	op := model.Operation{
		ID:        model.NewOperationID(),
		ProjectID: req.Project,
		SandboxID: sb.ID,
		Kind:      model.OpCreate,
		State:     model.OpPending,
		CreatedAt: req.Now,
		UpdatedAt: req.Now,
	}
	insert := func(sb model.Sandbox) error {
		var rec *store.IdempotencyRecord
		if req.Idempotency != nil {
			var err error
			if rec, err = req.Idempotency(Created{Sandbox: sb, Operation: op, Egress: req.Egress}); err != nil {
				return err
			}
		}
		return s.cfg.Store.CreateSandbox(ctx, sb, req.Egress, op, rec)
	}
	if s.cfg.Placer != nil && !req.Local {
		err = s.insertPlaced(ctx, &sb, envSel, volumeNode, insert)
	} else {
		err = insert(sb)
	}
	err = volumeError(err)
	if errors.Is(err, store.ErrNotFound) {
		// The template was deleted (or collected) since it was resolved.
		return Created{}, errorf(TemplateNotFound, "template %s (%s) was deleted meanwhile", ref, tpl.Digest)
	} else if err != nil {
		return Created{}, fmt.Errorf("create sandbox: %w", err)
	}
	return Created{Sandbox: sb, Operation: op, Egress: req.Egress}, nil
}

// compileEgress compiles a sandbox's policy with the stored profiles (a
// profile that does not exist is an error wrapping
// policy.ErrUnknownProfile).
func (s *Service) compileEgress(ctx context.Context, spec policy.Spec) (*policy.Policy, error) {
	def := s.cfg.EgressDefault
	if def == "" {
		def = policy.Public
	}
	p, err := store.CompileEgress(ctx, s.cfg.Store, spec, def)
	if err != nil {
		return nil, fmt.Errorf("compile egress policy: %w", err)
	}
	return p, nil
}

// environmentSelector is the create's environment as asked, or the
// server's default.
func (s *Service) environmentSelector(asked *environment.Selector) (environment.Selector, error) {
	if asked != nil && s.cfg.Environments == nil {
		return environment.Selector{}, errorf(NotSupported, "this server cannot choose an execution environment")
	}
	if asked != nil {
		return *asked, nil
	}
	if s.cfg.Environments == nil {
		return environment.Selector{}, nil
	}
	return environment.Selector{Name: s.cfg.Environments.Default()}, nil
}

// hostPids is what a sandbox of memoryMiB in the environment sel names may
// hold of the host's tasks (environment.HostPids of its guest limit): the
// environment's name is sel's, or the recorded definition's of sel's
// reference; a reference nobody recorded is charged as a name this binary
// does not know (the most), and placement refuses it anyway.
func (s *Service) hostPids(ctx context.Context, sel environment.Selector, memoryMiB int) (int, error) {
	name, err := s.environmentName(ctx, sel)
	if err != nil {
		return 0, err
	}
	return environment.HostPids(name, model.GuestPids(memoryMiB)), nil
}

// checkTimeoutKind refuses (NotSupported) a deadline whose suspend must
// write a snapshot kind the runtime of the environment sel names cannot
// write (CheckSuspendKind): at create, before anything is stored.
func (s *Service) checkTimeoutKind(ctx context.Context, sel environment.Selector, kind model.SnapshotKind) error {
	if kind == "" {
		return nil
	}
	name, err := s.environmentName(ctx, sel)
	if err != nil || name == "" {
		return err
	}
	// An environment is named after its runtime (runsc, runc, crun, qemu).
	return s.CheckSuspendKind("a deadline's suspend", string(name), kind)
}

// resolveEnvironment resolves the environment sel names to the reference
// a sandbox records, on this node. A server without a registry leaves it
// empty (the worker's default) and refuses a named one.
func (s *Service) resolveEnvironment(ctx context.Context, sel environment.Selector) (model.EnvironmentRef, error) {
	if s.cfg.Environments == nil {
		if sel != (environment.Selector{}) {
			return "", errorf(NotSupported, "this server cannot choose an execution environment")
		}
		return "", nil
	}
	ref, err := s.cfg.Environments.Resolve(ctx, sel)
	switch {
	case err == nil:
		return ref, nil
	case errors.Is(err, environment.ErrUnknown):
		return "", errorf(EnvironmentUnknown, "%s", err.Error())
	case errors.Is(err, environment.ErrArtifactsMissing):
		return "", errorf(EnvironmentArtifactsMissing, "%s", err.Error())
	case errors.Is(err, environment.ErrUnavailable):
		return "", errorf(EnvironmentUnavailable, "%s", err.Error())
	}
	return "", fmt.Errorf("resolve environment %s: %w", sel, err)
}

// insertPlaced places sb and inserts it with insert, placing it again
// elsewhere while the store finds the chosen node full; it sets sb's node
// and environment reference. Placement errors say what each node lacked.
func (s *Service) insertPlaced(ctx context.Context, sb *model.Sandbox, sel environment.Selector, only model.NodeID, insert func(model.Sandbox) error) error {
	req := placement.Request{Environment: sel, Template: sb.Template, Resources: sb.Resources, Selector: sb.NodeSelector, Only: only}
	err := placement.PlaceAndCommit(ctx, s.cfg.Placer, req, func(d placement.Decision) error {
		if d.Node == s.cfg.Self && s.cfg.Environments != nil {
			// This node: its artifacts are checked now (a runtime binary
			// replaced since the start is refused here, not at create).
			if _, err := s.resolveEnvironment(ctx, environment.Selector{Ref: d.Environment}); err != nil {
				return err
			}
		}
		sb.NodeID, sb.Environment = d.Node, d.Environment
		return insert(*sb)
	})
	switch {
	case errors.Is(err, placement.ErrRefusedEverywhere):
		return errorf(NoCapacity, "nodes filled up while the sandbox was being placed; retry")
	case errors.Is(err, placement.ErrUnknownEnvironment), errors.Is(err, placement.ErrNoNode), errors.Is(err, placement.ErrNoRoom):
		return s.placementError(ctx, sel, err)
	}
	return err
}

// placementError maps a placement failure. When no node can run the
// sandbox and this process runs sandboxes itself, its own environment
// check says more precisely why (not enabled, artifacts missing).
func (s *Service) placementError(ctx context.Context, sel environment.Selector, err error) error {
	switch {
	case errors.Is(err, placement.ErrUnknownEnvironment):
		if s.cfg.Environments != nil {
			if _, lerr := s.resolveEnvironment(ctx, sel); lerr != nil {
				return lerr
			}
		}
		return errorf(EnvironmentUnknown, "%s", err.Error())
	case errors.Is(err, placement.ErrNoNode):
		if s.cfg.Environments != nil && s.cfg.Self != "" {
			if _, lerr := s.resolveEnvironment(ctx, sel); lerr != nil {
				return lerr
			}
		}
		return errorf(NoEligibleNode, "%s", err.Error())
	case errors.Is(err, placement.ErrNoRoom):
		return errorf(NoCapacity, "%s", err.Error())
	}
	return fmt.Errorf("place sandbox: %w", err)
}

// waitForBuild waits, bounded by ctx and MaxBuildWait, for an unfinished
// build that is to point name at a template. Without one it returns at
// once. When the name resolves to nothing afterwards and the newest build
// for it failed, it refuses with BuildFailed naming that build; why it
// failed (its error's message: registry hosts, paths, dial errors) only
// if the caller's project queued it, as GET /v1/builds/{id} shows a
// member only its own project's builds.
func (s *Service) waitForBuild(ctx context.Context, name model.TaggedName, project model.ProjectID) error {
	wctx, cancel := context.WithTimeout(ctx, MaxBuildWait)
	defer cancel()
	changed := s.cfg.Store.Watch(wctx)
	waited := false
	for {
		page, err := s.cfg.Store.ListBuilds(wctx, store.BuildQuery{Scope: store.AllProjects(), Name: name, Limit: 1})
		if err != nil {
			if ctx.Err() == nil && wctx.Err() != nil {
				return errorf(Unavailable, "template %s is still building after %s; try again later", name, MaxBuildWait)
			}
			return fmt.Errorf("builds of %s: %w", name, err)
		}
		if len(page.Builds) == 0 {
			return nil
		}
		b := page.Builds[0]
		if b.State.Done() {
			if b.State == model.BuildFailed {
				if _, err := s.cfg.Store.ResolveTemplate(ctx, model.RefByName(name)); errors.Is(err, store.ErrNotFound) {
					why := "an admin can read why in `airlock build log " + b.ID.String() + "`"
					if b.Error != nil && b.Project == project && project != "" {
						why = b.Error.Message + " (see `airlock build log " + b.ID.String() + "`)"
					} else if b.Error != nil {
						why = b.Error.Code + "; " + why
					}
					return errorf(BuildFailed,
						"template %s is not available: its build %s failed: %s; the busybox template `minimal` needs no build: --template minimal",
						name, b.ID, why)
				}
			}
			if waited {
				s.log.InfoContext(ctx, "create waited for its template's build", "build", b.ID, "name", name, "state", b.State)
			}
			return nil
		}
		waited = true
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return errorf(Unavailable,
				"template %s is still building (build %s) after %s; try again later", name, b.ID, MaxBuildWait)
		case <-changed:
		case <-time.After(5 * time.Second):
		}
	}
}
