package sandboxes

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/guestops"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/placement"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/store/sqlite"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fixture is a service over a fresh SQLite store with one node, one
// project and one template named "base".
type fixture struct {
	t    *testing.T
	ctx  context.Context
	st   *sqlite.Store
	node model.NodeID
	inc  model.Incarnation
	proj model.ProjectID
	tpl  model.TemplateRef
	now  time.Time
	// placer places every sandbox on the fixture's node.
	placer *placement.Placer
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "airlock.db"), slog.New(slog.NewTextHandler(io.Discard, nil)))
	must(t, err)
	t.Cleanup(func() { st.Close() })
	f := &fixture{t: t, ctx: ctx, st: st, node: model.NewNodeID(), inc: model.NewIncarnation(), now: t0}
	_, err = st.RegisterNode(ctx, model.Node{ID: f.node, Incarnation: f.inc, Role: model.RoleAll, AdvertiseURL: "http://127.0.0.1:1", CanPull: true})
	must(t, err)
	f.placer, err = placement.New(placement.Config{Store: st, DeadAfter: time.Hour, Self: f.node})
	must(t, err)
	p := model.Project{ID: model.NewProjectID(), Name: "svc", CreatedAt: t0}
	must(t, st.CreateProject(ctx, p))
	manifest := []byte(`{"rootfs":"svc"}`)
	d := model.DigestFromSHA256(sha256.Sum256(manifest))
	must(t, st.PutTemplate(ctx, model.Template{Digest: d, SizeBytes: 1, Manifest: manifest, CreatedAt: t0}))
	name, err := model.ParseTaggedName("base")
	must(t, err)
	must(t, st.SetTemplateName(ctx, name, d, t0))
	f.proj, f.tpl = p.ID, model.RefByName(name)
	return f
}

// service returns a service over the fixture's store; cfg's Store and
// Now are filled in, and with place its Placer and Self.
func (f *fixture) service(cfg Config, place bool) *Service {
	f.t.Helper()
	cfg.Store, cfg.Now = f.st, func() time.Time { return f.now }
	if place {
		cfg.Placer, cfg.Self = f.placer, f.node
	}
	s, err := New(cfg)
	must(f.t, err)
	return s
}

func (f *fixture) create(s *Service, change func(*CreateRequest)) (Created, error) {
	req := CreateRequest{Project: f.proj, Template: f.tpl, Resources: s.DefaultResources(), Now: f.now}
	if change != nil {
		change(&req)
	}
	return s.Create(f.ctx, req)
}

// run takes a pending sandbox through its create to running on the
// fixture's node, as the controller would.
func (f *fixture) run(id model.SandboxID) {
	f.t.Helper()
	claimed, err := f.st.ClaimOperation(f.ctx, store.Claim{Owner: f.node, Incarnation: f.inc, Lease: time.Hour, Now: f.now})
	must(f.t, err)
	must(f.t, f.st.TransitionOnNode(f.ctx, id, store.Fence{Node: f.node, Incarnation: f.inc}, model.StatePending, model.StateCreating, "", "runc", f.now))
	must(f.t, f.st.FinishOperation(f.ctx, store.Finish{OperationID: claimed.ID, Owner: f.node, Incarnation: f.inc, State: model.OpSucceeded,
		SandboxFrom: model.StateCreating, SandboxTo: model.StateRunning, Now: f.now}))
}

func (f *fixture) get(id model.SandboxID) model.Sandbox {
	f.t.Helper()
	sb, err := f.st.GetSandbox(f.ctx, f.proj, id)
	must(f.t, err)
	return sb
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantKind fails unless err is an *Error of kind.
func wantKind(t *testing.T, err error, kind Kind) {
	t.Helper()
	var se *Error
	if !errors.As(err, &se) || se.Kind != kind {
		t.Fatalf("err = %v, want a %s refusal", err, kind)
	}
}

// A create stores the sandbox pending with its create operation, and the
// record its Idempotency builds sees both as they are stored; a delete
// queues the delete and a second one is refused while it is unfinished.
func TestCreateAndDelete(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.service(Config{}, true)
	var seen []Created
	created, err := f.create(s, func(r *CreateRequest) {
		r.Env = model.Env{"A": "1"}
		r.Idempotency = func(c Created) (*store.IdempotencyRecord, error) {
			seen = append(seen, c)
			return nil, nil
		}
	})
	must(t, err)
	if created.FromPool || created.Sandbox.State != model.StatePending || created.Operation.Kind != model.OpCreate ||
		created.Operation.SandboxID != created.Sandbox.ID || created.Sandbox.Env["A"] != "1" || !created.Sandbox.LastActivity.Equal(t0) {
		t.Fatalf("created %+v", created)
	}
	if len(seen) != 1 || seen[0].Sandbox.ID != created.Sandbox.ID || seen[0].Operation.ID != created.Operation.ID {
		t.Fatalf("Idempotency saw %+v", seen)
	}
	if sb := f.get(created.Sandbox.ID); sb.State != model.StatePending || sb.Template != created.Sandbox.Template || sb.NodeID != f.node {
		t.Fatalf("stored %+v", sb)
	}

	var recorded model.Operation
	op, err := s.Delete(f.ctx, DeleteRequest{Project: f.proj, Sandbox: created.Sandbox.ID, Now: f.now,
		Idempotency: func(op model.Operation) (*store.IdempotencyRecord, error) { recorded = op; return nil, nil }})
	must(t, err)
	if op.Kind != model.OpDelete || op.State != model.OpPending || recorded.ID != op.ID {
		t.Fatalf("delete op %+v, recorded %+v", op, recorded)
	}
	if sb := f.get(created.Sandbox.ID); sb.State != model.StateDeleting {
		t.Fatalf("after delete: %s", sb.State)
	}
	if _, err := s.Delete(f.ctx, DeleteRequest{Project: f.proj, Sandbox: created.Sandbox.ID, Now: f.now}); !errors.Is(err, model.ErrInvalidTransition) {
		t.Fatalf("second delete: %v", err)
	}
	_, err = s.Delete(f.ctx, DeleteRequest{Project: f.proj, Sandbox: model.NewSandboxID(), Now: f.now})
	wantKind(t, err, NotFound)
}

// A create is refused, and nothing stored, for what this server cannot
// give: resources out of bounds or over capacity, a node selector without
// placement, an environment without a registry, a missing template or
// egress profile.
func TestCreateRefusals(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.service(Config{Capacity: &model.NodeCapacity{CPUs: 2, MemoryMiB: 4096}}, false)
	_, err := f.create(s, func(r *CreateRequest) { r.Resources.CPUs = 4 })
	wantKind(t, err, ExceedsCapacity)
	if _, err := f.create(s, func(r *CreateRequest) { r.Resources.CPUs = -1 }); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("negative cpus: %v", err)
	}
	_, err = f.create(s, func(r *CreateRequest) { r.NodeSelector = model.NodeLabels{"gpu": "yes"} })
	wantKind(t, err, NotSupported)
	_, err = f.create(s, func(r *CreateRequest) { r.Environment = &environment.Selector{Name: environment.NameRunsc} })
	wantKind(t, err, NotSupported)
	nope, err := model.ParseTemplateRef("nope")
	must(t, err)
	_, err = f.create(s, func(r *CreateRequest) { r.Template = nope })
	wantKind(t, err, TemplateNotFound)
	if _, err := f.create(s, func(r *CreateRequest) { r.Egress = policy.Spec{Profiles: []policy.ProfileName{"ghost"}} }); !errors.Is(err, policy.ErrUnknownProfile) {
		t.Fatalf("unknown profile: %v", err)
	}
	page, err := f.st.ListSandboxes(f.ctx, store.SandboxQuery{ProjectID: f.proj, Limit: 10})
	must(t, err)
	if len(page.Sandboxes) != 0 {
		t.Fatalf("refused creates stored %d sandboxes", len(page.Sandboxes))
	}
	if _, err := New(Config{Store: f.st, DefaultDiskMiB: 8193, Capacity: &model.NodeCapacity{DiskMiB: 8192}}); err == nil {
		t.Fatal("a default disk above the maximum was accepted")
	}
}

// A lifecycle request moves the sandbox to the kind's in-progress state
// with its operation; it is refused for a state the kind cannot start
// from, while another operation is unfinished, and for a runtime that
// cannot do it.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sup := LifecycleSupport{Pause: true}
	s := f.service(Config{LifecycleSupport: func(model.Sandbox) (LifecycleSupport, bool) { return sup, true }}, true)
	created, err := f.create(s, nil)
	must(t, err)
	id := created.Sandbox.ID
	req := LifecycleRequest{Project: f.proj, Sandbox: id, Kind: model.OpPause, Now: f.now}
	_, err = s.Lifecycle(f.ctx, req)
	wantKind(t, err, Busy) // its create is still unfinished
	f.run(id)
	_, err = s.Lifecycle(f.ctx, LifecycleRequest{Project: f.proj, Sandbox: id, Kind: model.OpSuspend, Now: f.now})
	wantKind(t, err, NotSupported)
	_, err = s.Lifecycle(f.ctx, LifecycleRequest{Project: f.proj, Sandbox: id, Kind: model.OpResume, Now: f.now})
	wantKind(t, err, InvalidTransition)

	var recorded Changed
	req.Idempotency = func(c Changed) (*store.IdempotencyRecord, error) { recorded = c; return nil, nil }
	ch, err := s.Lifecycle(f.ctx, req)
	must(t, err)
	if ch.Sandbox.State != model.StatePausing || ch.Operation.Kind != model.OpPause || recorded.Operation.ID != ch.Operation.ID {
		t.Fatalf("changed %+v, recorded %+v", ch, recorded)
	}
	if sb := f.get(id); sb.State != model.StatePausing {
		t.Fatalf("stored state %s", sb.State)
	}
	_, err = s.Lifecycle(f.ctx, req)
	wantKind(t, err, Busy)
	_, err = s.Lifecycle(f.ctx, LifecycleRequest{Project: f.proj, Sandbox: model.NewSandboxID(), Kind: model.OpPause, Now: f.now})
	wantKind(t, err, NotFound)
}

// RunFirst returns a running sandbox at once, refuses one that cannot run
// with the guest's not-running error, and queues the resume of a paused
// one, waiting at most ResumeTimeout for it.
func TestRunFirst(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.service(Config{ResumeTimeout: 300 * time.Millisecond}, true)
	created, err := f.create(s, nil)
	must(t, err)
	id := created.Sandbox.ID
	var ge *guestops.Error
	if _, err := s.RunFirst(f.ctx, f.proj, f.get(id)); !errors.As(err, &ge) || ge.Code != apiv1.CodeSandboxNotRunning {
		t.Fatalf("pending: %v", err)
	}
	f.run(id)
	if sb, err := s.RunFirst(f.ctx, f.proj, f.get(id)); err != nil || sb.State != model.StateRunning {
		t.Fatalf("running: %v, %v", sb.State, err)
	}
	// Paused (as the controller leaves it): RunFirst queues a resume that
	// nothing runs here, so it times out.
	_, err = s.Lifecycle(f.ctx, LifecycleRequest{Project: f.proj, Sandbox: id, Kind: model.OpPause, Now: f.now})
	must(t, err)
	claimed, err := f.st.ClaimOperation(f.ctx, store.Claim{Owner: f.node, Incarnation: f.inc, Lease: time.Hour, Now: f.now})
	must(t, err)
	must(t, f.st.FinishOperation(f.ctx, store.Finish{OperationID: claimed.ID, Owner: f.node, Incarnation: f.inc, State: model.OpSucceeded,
		SandboxFrom: model.StatePausing, SandboxTo: model.StatePaused, Now: f.now}))
	_, err = s.RunFirst(f.ctx, f.proj, f.get(id))
	wantKind(t, err, ResumeTimeout)
	if sb := f.get(id); sb.State != model.StateResuming {
		t.Fatalf("after RunFirst: %s, want resuming", sb.State)
	}
}
