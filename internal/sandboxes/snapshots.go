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

// MaxForkWait bounds how long a fork waits for its snapshot.
const MaxForkWait = 2 * time.Minute

// SnapshotRequest asks for a saved snapshot of a running sandbox.
type SnapshotRequest struct {
	Project model.ProjectID
	Sandbox model.SandboxID
	Name    model.SnapshotName // "" for none
	Now     time.Time
	// Idempotency, if set, builds the idempotency record stored with the
	// request.
	Idempotency func(SnapshotChanged) (*store.IdempotencyRecord, error)
}

// SnapshotChanged is what a snapshot request made: the snapshot record
// (creating), its operation, and the sandbox (snapshotting).
type SnapshotChanged struct {
	Snapshot  model.SnapshotRecord
	Sandbox   model.Sandbox
	Operation model.Operation
}

// Snapshot queues a live snapshot of a running sandbox of the project
// (its record and its snapshot operation, the sandbox snapshotting) in
// one transaction; the controller writes it, and the sandbox runs on.
// Refused as Lifecycle refuses a lifecycle request (NotFound for another
// project's sandbox; NotSupported when its runtime cannot).
func (s *Service) Snapshot(ctx context.Context, req SnapshotRequest) (SnapshotChanged, error) {
	return s.snapshot(ctx, req, false)
}

func (s *Service) snapshot(ctx context.Context, req SnapshotRequest, fork bool) (SnapshotChanged, error) {
	lc, err := model.LifecycleOf(model.OpSnapshot)
	if err != nil {
		return SnapshotChanged{}, err
	}
	sb, err := s.sandbox(ctx, req.Project, req.Sandbox)
	if err != nil {
		return SnapshotChanged{}, err
	}
	if err := s.checkSupported(sb, model.OpSnapshot); err != nil {
		return SnapshotChanged{}, err
	}
	egress, err := s.cfg.Store.GetSandboxEgressByID(ctx, sb.ID)
	if err != nil {
		return SnapshotChanged{}, fmt.Errorf("egress of sandbox %s: %w", sb.ID, err)
	}
	op := model.Operation{
		ID: model.NewOperationID(), ProjectID: req.Project, SandboxID: sb.ID, Kind: model.OpSnapshot,
		State: model.OpPending, CreatedAt: req.Now, UpdatedAt: req.Now,
	}
	snap := model.SnapshotRecord{
		ID: model.NewSnapshotID(), ProjectID: req.Project, Name: req.Name, Source: sb.ID, State: model.SnapshotCreating,
		NodeID: sb.NodeID, Environment: sb.Environment, Runtime: sb.Runtime, Template: sb.Template,
		Resources: sb.Resources, Env: sb.Env, Operation: op.ID, Fork: fork, CreatedAt: req.Now, UpdatedAt: req.Now,
	}
	moved := sb
	moved.State, moved.StateReason, moved.UpdatedAt = lc.InProgress, "", req.Now
	changed := SnapshotChanged{Snapshot: snap, Sandbox: moved, Operation: op}
	var rec *store.IdempotencyRecord
	if req.Idempotency != nil {
		if rec, err = req.Idempotency(changed); err != nil {
			return SnapshotChanged{}, err
		}
	}
	_, err = s.cfg.Store.RequestSnapshot(ctx, store.SnapshotRequest{
		Request:  store.OperationRequest{ProjectID: req.Project, SandboxID: sb.ID, Operation: op, Idempotency: rec, Now: req.Now},
		Snapshot: snap,
		Egress:   egress,
	})
	if err != nil {
		return SnapshotChanged{}, s.lifecycleError(ctx, req.Project, sb, lc, err)
	}
	return changed, nil
}

// GetSnapshot returns a snapshot of the project; another project's is
// SnapshotNotFound, as one that does not exist (forks' are not shown).
func (s *Service) GetSnapshot(ctx context.Context, project model.ProjectID, id model.SnapshotID) (model.SnapshotRecord, error) {
	rec, err := s.cfg.Store.GetSnapshot(ctx, project, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && rec.Fork {
		return model.SnapshotRecord{}, errorf(SnapshotNotFound, "snapshot %s not found", id)
	}
	if err != nil {
		return model.SnapshotRecord{}, fmt.Errorf("get snapshot %s: %w", id, err)
	}
	return rec, nil
}

// DeleteSnapshot deletes a snapshot of the project: it is deleting, and
// its node removes its files once no sandbox is being created from it,
// then its record. Refused: SnapshotNotFound, Busy while it is being made.
func (s *Service) DeleteSnapshot(ctx context.Context, project model.ProjectID, id model.SnapshotID, now time.Time) (model.SnapshotRecord, error) {
	if _, err := s.GetSnapshot(ctx, project, id); err != nil {
		return model.SnapshotRecord{}, err
	}
	rec, err := s.cfg.Store.RequestSnapshotDelete(ctx, project, id, now)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return model.SnapshotRecord{}, errorf(SnapshotNotFound, "snapshot %s not found", id)
	case errors.Is(err, store.ErrBusy):
		return model.SnapshotRecord{}, errorf(Busy, "snapshot %s is still being made; delete it once it is ready or failed", id)
	case err != nil:
		return model.SnapshotRecord{}, err
	}
	return rec, nil
}

// createFromSnapshot makes count sandboxes from a ready snapshot of the
// project, in one transaction (the quota admits all or none), on the
// snapshot's node and environment, with its template, resources,
// environment (req.Env replacing it name by name) and egress policy
// (req.Egress if it sets one); the rest is req's.
//
// idem, if set, builds the idempotency record stored in that transaction
// from what is about to be stored.
func (s *Service) createFromSnapshot(ctx context.Context, req CreateRequest, id model.SnapshotID, count int, allowFork bool,
	idem func([]Created) (*store.IdempotencyRecord, error)) ([]Created, error) {
	if err := model.CheckForkCount(count); err != nil {
		return nil, err
	}
	rec, err := s.cfg.Store.GetSnapshot(ctx, req.Project, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && rec.Fork && !allowFork {
		return nil, errorf(SnapshotNotFound, "snapshot %s not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("get snapshot %s: %w", id, err)
	}
	if rec.State != model.SnapshotReady {
		return nil, errorf(SnapshotNotReady, "snapshot %s is %s; a sandbox starts only from a ready snapshot", id, rec.State)
	}
	if err := s.CheckSuspendKind("a deadline's suspend", rec.Runtime, req.Timeouts.SnapshotKind); err != nil {
		return nil, err
	}
	egress := req.Egress
	if isZeroSpec(egress) {
		if egress, err = s.cfg.Store.GetSnapshotEgress(ctx, id); err != nil {
			return nil, err
		}
	}
	if _, err := s.compileEgress(ctx, egress); err != nil {
		return nil, err
	}
	env := model.Env{}
	for k, v := range rec.Env {
		env[k] = v
	}
	for k, v := range req.Env {
		env[k] = v
	}
	sbs := make([]model.Sandbox, count)
	ops := make([]model.Operation, count)
	out := make([]Created, count)
	for i := range sbs {
		sb := model.Sandbox{
			ID: model.NewSandboxID(), ProjectID: req.Project, Template: rec.Template, Resources: rec.Resources,
			Env: env, Metadata: req.Metadata, State: model.StatePending, CreatedAt: req.Now, UpdatedAt: req.Now,
			Timeouts: req.Timeouts, LastActivity: req.Now, PublicPorts: req.PublicPorts, FromSnapshot: rec.ID,
		}
		ops[i] = model.Operation{
			ID: model.NewOperationID(), ProjectID: req.Project, SandboxID: sb.ID, Kind: model.OpCreate,
			State: model.OpPending, CreatedAt: req.Now, UpdatedAt: req.Now,
		}
		sbs[i] = sb
	}
	insert := func(node model.NodeID, envRef model.EnvironmentRef) error {
		for i := range sbs {
			sbs[i].NodeID, sbs[i].Environment = node, envRef
			out[i] = Created{Sandbox: sbs[i], Operation: ops[i], Egress: egress}
		}
		var idemRec *store.IdempotencyRecord
		if idem != nil {
			var err error
			if idemRec, err = idem(out); err != nil {
				return err
			}
		}
		return s.cfg.Store.CreateSandboxes(ctx, sbs, egress, ops, idemRec)
	}
	if rec.Storage == model.SnapshotStored && s.cfg.Placer != nil {
		// Any node of its environment can pull it: its own node first
		// (nothing to pull), else wherever placement finds room.
		err = s.placeFromSnapshot(ctx, rec, insert)
	} else {
		// Its files are on its node only (being saved, or no blob store).
		err = insert(rec.NodeID, rec.Environment)
	}
	switch {
	case errors.Is(err, store.ErrSnapshotNotReady):
		return nil, errorf(SnapshotNotReady, "snapshot %s was deleted meanwhile", id)
	case errors.Is(err, store.ErrNotFound):
		return nil, errorf(TemplateNotFound, "the template %s of snapshot %s was deleted", rec.Template, id)
	case errors.Is(err, store.ErrNodeFull):
		return nil, errorf(NoCapacity, "the node of snapshot %s has no room for %d more sandboxes now; retry", id, count)
	case err != nil:
		var coded *Error
		if errors.As(err, &coded) {
			return nil, err
		}
		return nil, fmt.Errorf("create from snapshot %s: %w", id, err)
	}
	return out, nil
}

// placeFromSnapshot places the sandboxes of a stored snapshot and inserts
// them with insert: on the snapshot's own node if it can take them, else
// on any node of its environment that can (it pulls the snapshot).
func (s *Service) placeFromSnapshot(ctx context.Context, rec model.SnapshotRecord, insert func(model.NodeID, model.EnvironmentRef) error) error {
	sel := environment.Selector{Ref: rec.Environment}
	req := placement.Request{Environment: sel, Template: rec.Template, Resources: rec.Resources, Only: rec.NodeID}
	commit := func(d placement.Decision) error { return insert(d.Node, d.Environment) }
	err := placement.PlaceAndCommit(ctx, s.cfg.Placer, req, commit)
	if errors.Is(err, placement.ErrNoNode) || errors.Is(err, placement.ErrNoRoom) || errors.Is(err, placement.ErrRefusedEverywhere) {
		req.Only = ""
		err = placement.PlaceAndCommit(ctx, s.cfg.Placer, req, commit)
	}
	switch {
	case errors.Is(err, placement.ErrRefusedEverywhere):
		return errorf(NoCapacity, "nodes filled up while the sandboxes of snapshot %s were being placed; retry", rec.ID)
	case errors.Is(err, placement.ErrUnknownEnvironment), errors.Is(err, placement.ErrNoNode), errors.Is(err, placement.ErrNoRoom):
		return s.placementError(ctx, sel, err)
	}
	return err
}

// ForkRequest asks for count new sandboxes continuing from a running
// sandbox of the project at the moment of the fork.
type ForkRequest struct {
	Project  model.ProjectID
	Sandbox  model.SandboxID
	Count    int
	Metadata model.Metadata
	Timeouts model.Timeouts
	Now      time.Time
	// Idempotency, if set, builds the idempotency record stored in the
	// transaction that inserts the forks, from what is about to be stored:
	// a retry of the request never makes a second fork.
	Idempotency func([]Created) (*store.IdempotencyRecord, error)
}

// Fork takes a live snapshot of the sandbox (its source runs on), waits
// for it (at most MaxForkWait) and creates Count sandboxes from it in one
// transaction (the quota admits all or none); the fork's snapshot is
// deleted once they are made. Count outside 1..16 is model.ErrInvalid.
func (s *Service) Fork(ctx context.Context, req ForkRequest) ([]Created, error) {
	if err := model.CheckForkCount(req.Count); err != nil {
		return nil, err
	}
	ch, err := s.snapshot(ctx, SnapshotRequest{Project: req.Project, Sandbox: req.Sandbox, Now: req.Now}, true)
	if err != nil {
		return nil, err
	}
	// Whatever happens from here, the fork's snapshot goes once no
	// sandbox is being made from it (a failed one right away).
	defer func() {
		if _, err := s.cfg.Store.RequestSnapshotDelete(context.WithoutCancel(ctx), req.Project, ch.Snapshot.ID, s.now()); err != nil && !errors.Is(err, store.ErrBusy) {
			s.log.WarnContext(ctx, "delete a fork's snapshot", "snapshot", ch.Snapshot.ID, "err", err)
		}
	}()
	if err := s.waitOperation(ctx, req.Project, ch.Operation.ID); err != nil {
		return nil, err
	}
	cr := CreateRequest{Project: req.Project, Metadata: req.Metadata, Timeouts: req.Timeouts, Now: req.Now}
	return s.createFromSnapshot(ctx, cr, ch.Snapshot.ID, req.Count, true, req.Idempotency)
}

// waitOperation waits, at most MaxForkWait, until operation id ends, and
// refuses with SnapshotFailed unless it succeeded.
func (s *Service) waitOperation(ctx context.Context, project model.ProjectID, id model.OperationID) error {
	wctx, cancel := context.WithTimeout(ctx, MaxForkWait)
	defer cancel()
	changed := s.cfg.Store.Watch(wctx)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		op, err := s.cfg.Store.GetOperation(ctx, project, id)
		if err != nil {
			return fmt.Errorf("operation %s: %w", id, err)
		}
		switch op.State {
		case model.OpSucceeded:
			return nil
		case model.OpFailed:
			why := "it failed"
			if op.Error != nil {
				why = op.Error.Message
			}
			return errorf(SnapshotFailed, "the snapshot of the fork (operation %s) failed: %s", id, why)
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return errorf(SnapshotFailed, "the snapshot of the fork (operation %s) did not finish within %s", id, MaxForkWait)
		case <-changed:
		case <-tick.C:
		}
	}
}

// isZeroSpec reports whether an egress spec sets nothing.
func isZeroSpec(s policy.Spec) bool {
	return s.Default == "" && len(s.Allow) == 0 && len(s.Deny) == 0 && len(s.Profiles) == 0 && len(s.TLSExempt) == 0
}

// ListSnapshots lists the project's snapshots (forks' are not listed).
func (s *Service) ListSnapshots(ctx context.Context, q store.SnapshotQuery) (store.SnapshotPage, error) {
	return s.cfg.Store.ListSnapshots(ctx, q)
}

// ForkKind is what a fork (or a saved snapshot) of a sandbox on runtime
// keeps: model.SnapshotMemory (processes continue), SnapshotFilesystem
// (files; processes start again) or "" (it cannot fork); ok false: not
// known here.
func (s *Service) ForkKind(runtime string) (kind model.SnapshotKind, ok bool) {
	if s.cfg.LifecycleSupport == nil {
		return "", false
	}
	sup, ok := s.cfg.LifecycleSupport(model.Sandbox{Runtime: runtime})
	if !ok || !sup.LiveSnapshot {
		return "", ok
	}
	return sup.Snapshot(), true
}
