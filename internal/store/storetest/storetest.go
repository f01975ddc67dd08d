// Package storetest is the conformance suite of store.Store. Every
// implementation runs it from its own tests:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store { … })
//	}
//
// open must return a fresh, empty, migrated store for t and register its
// Close with t.Cleanup. Times are compared at microsecond precision, the
// store's resolution; the suite never sleeps to let leases expire (it moves
// the Now fields instead). Node liveness is the database's own clock, which
// cannot be moved: the node tests sleep a few tens of milliseconds to let
// heartbeats grow old.
package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// Run runs every conformance test against stores made by open, each subtest
// on its own fresh store.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	groups := [][]namedTest{
		projectTests(), sandboxTests(), lifecycleTests(), operationTests(), concurrencyTests(),
		quotaTests(), sessionTests(), watchTests(), templateTests(), buildTests(), egressTests(),
		dueTests(), environmentTests(), activityTests(), nodeTests(), nodeFenceTests(),
		attachKeyTests(), poolTests(),
		countTests(),
		auditTests(),
		traceTests(),
		metricsTests(),
		opListTests(),
		volumeTests(),
		snapshotTests(),
		snapshotBlobTests(),
		e2bBuildTests(),
		idempotentCreateTests(),
		fsSuspendTests(),
		keepMemTests(),
	}
	for _, g := range groups {
		for _, tc := range g {
			t.Run(tc.name, func(t *testing.T) {
				tc.fn(newEnv(t, open(t)))
			})
		}
	}
}

type namedTest struct {
	name string
	fn   func(e *env)
}

// env is one subtest's store plus a deterministic clock and fixtures.
type env struct {
	t     *testing.T
	s     store.Store
	ctx   context.Context
	clock time.Time

	mu   sync.Mutex
	incs map[model.NodeID]model.Incarnation // current incarnation of each registered node
	home model.NodeID                       // the node newSandbox places on; "" until first used
}

// baseTime has sub-microsecond digits and a non-UTC zone so that the suite
// checks truncation to microseconds and conversion to UTC.
var baseTime = time.Date(2031, 3, 4, 5, 6, 7, 891234567, time.FixedZone("UTC+2", 2*3600))

func newEnv(t *testing.T, s store.Store) *env {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &env{t: t, s: s, ctx: ctx, clock: baseTime, incs: map[model.NodeID]model.Incarnation{}}
}

// register registers n (a fresh incarnation, role all and an advertise
// URL unless given) and remembers its incarnation.
func (e *env) register(n model.Node) model.NodeStatus {
	e.t.Helper()
	if n.Incarnation == "" {
		n.Incarnation = model.NewIncarnation()
	}
	if n.Role == "" {
		n.Role = model.RoleAll
	}
	if n.AdvertiseURL == "" {
		n.AdvertiseURL = "http://" + string(n.ID) + ".test:8080"
	}
	st, err := e.s.RegisterNode(e.ctx, n)
	if err != nil {
		e.t.Fatalf("RegisterNode %s: %v", n.ID, err)
	}
	e.mu.Lock()
	e.incs[n.ID] = n.Incarnation
	e.mu.Unlock()
	return st
}

// node registers a new node of role all with unbounded room.
func (e *env) node() model.NodeID {
	e.t.Helper()
	return e.register(model.Node{ID: model.NewNodeID()}).ID
}

// restart registers node again under a new incarnation, as its process
// does when it starts again (role all, unbounded room), and returns the
// incarnation it replaced, now fenced.
func (e *env) restart(node model.NodeID) model.Incarnation {
	e.t.Helper()
	old := e.inc(node)
	e.register(model.Node{ID: node})
	return old
}

// inc is node's current incarnation as registered by the env ("" if never).
func (e *env) inc(node model.NodeID) model.Incarnation {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.incs[node]
}

// fence is node's current fencing token.
func (e *env) fence(node model.NodeID) store.Fence {
	return store.Fence{Node: node, Incarnation: e.inc(node)}
}

// homeNode is the node newSandbox places sandboxes on, registered on first
// use (role all, unbounded room).
func (e *env) homeNode() model.NodeID {
	e.t.Helper()
	e.mu.Lock()
	home := e.home
	e.mu.Unlock()
	if home != "" {
		return home
	}
	home = e.node()
	e.mu.Lock()
	e.home = home
	e.mu.Unlock()
	return home
}

// now advances the clock by a little over a second and returns it.
func (e *env) now() time.Time {
	e.clock = e.clock.Add(time.Second + 1234*time.Nanosecond)
	return e.clock
}

// us is the value a store returns for t: UTC, truncated to microseconds.
func us(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

func usPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	v := us(*t)
	return &v
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return b
}

func sha(s string) []byte {
	sum := sha256.Sum256([]byte(s))
	return sum[:]
}

func (e *env) project() model.Project {
	e.t.Helper()
	p := model.Project{ID: model.NewProjectID(), CreatedAt: e.now()}
	p.Name = "project-" + string(p.ID)[4:12]
	if err := e.s.CreateProject(e.ctx, p); err != nil {
		e.t.Fatalf("CreateProject: %v", err)
	}
	return p
}

func (e *env) template() model.Template {
	e.t.Helper()
	manifest := []byte(fmt.Sprintf(`{"rootfs":"%x"}`, randomBytes(8)))
	tpl := model.Template{
		Digest:    model.DigestFromSHA256(sha256.Sum256(manifest)),
		SizeBytes: 1 << 20,
		Manifest:  manifest,
		CreatedAt: e.now(),
	}
	if err := e.s.PutTemplate(e.ctx, tpl); err != nil {
		e.t.Fatalf("PutTemplate: %v", err)
	}
	return tpl
}

// newSandbox builds (without storing) a pending sandbox and its create op;
// the sandbox is placed on the home node (only its node claims its
// operations).
func (e *env) newSandbox(p model.ProjectID, tpl model.TemplateDigest, md model.Metadata) (model.Sandbox, model.Operation) {
	home := e.homeNode()
	now := e.now()
	sb := model.Sandbox{
		ID:        model.NewSandboxID(),
		ProjectID: p,
		Template:  tpl,
		Resources: model.Resources{CPUs: 2, MemoryMiB: 256, DiskMiB: 2048},
		Env:       model.Env{"LANG": "C.UTF-8", "EMPTY": ""},
		Metadata:  md,
		State:     model.StatePending,
		NodeID:    home,
		Timeouts:  model.Timeouts{Idle: time.Hour, OnTimeout: model.OnTimeoutSuspend, Deadline: now.Add(24 * time.Hour)},
		// The store keeps what it is given; the API sets these at create.
		LastActivity: now,
		CreatedAt:    now,
		UpdatedAt:    now,
	}
	op := model.Operation{
		ID:        model.NewOperationID(),
		ProjectID: p,
		SandboxID: sb.ID,
		Kind:      model.OpCreate,
		State:     model.OpPending,
		CreatedAt: now,
		UpdatedAt: now,
	}
	return sb, op
}

// sandbox creates a sandbox with its create operation.
func (e *env) sandbox(p model.ProjectID, tpl model.TemplateDigest, md model.Metadata) (model.Sandbox, model.Operation) {
	e.t.Helper()
	sb, op := e.newSandbox(p, tpl, md)
	if err := e.s.CreateSandbox(e.ctx, sb, policy.Spec{}, op, nil); err != nil {
		e.t.Fatalf("CreateSandbox: %v", err)
	}
	return sb, op
}

// idem builds an idempotency record for key in project p.
func (e *env) idem(p model.ProjectID, key string) *store.IdempotencyRecord {
	return &store.IdempotencyRecord{
		ProjectID:   p,
		KeyHash:     sha(key),
		Method:      "POST",
		Path:        "/v1/sandboxes",
		RequestHash: sha(key + "|body"),
		Status:      202,
		SealedBody:  randomBytes(48),
		CreatedAt:   e.now(),
	}
}

func (e *env) deleteOp(sb model.Sandbox) model.Operation {
	now := e.now()
	return model.Operation{
		ID: model.NewOperationID(), ProjectID: sb.ProjectID, SandboxID: sb.ID,
		Kind: model.OpDelete, State: model.OpPending, CreatedAt: now, UpdatedAt: now,
	}
}

// mustIs fails unless errors.Is(err, target).
func mustIs(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error = %v, want one wrapping %v", err, target)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// normSandbox is what a store returns for a stored sandbox.
func normSandbox(sb model.Sandbox) model.Sandbox {
	sb.CreatedAt, sb.UpdatedAt = us(sb.CreatedAt), us(sb.UpdatedAt)
	sb.LastActivity, sb.Timeouts.Deadline = us(sb.LastActivity), us(sb.Timeouts.Deadline)
	if sb.Snapshot != nil {
		snap := *sb.Snapshot
		snap.CreatedAt = us(snap.CreatedAt)
		sb.Snapshot = &snap
	}
	if sb.Env == nil {
		sb.Env = model.Env{}
	}
	if sb.Metadata == nil {
		sb.Metadata = model.Metadata{}
	}
	return sb
}

func checkSandbox(t *testing.T, got, want model.Sandbox) {
	t.Helper()
	got, want = normSandbox(got), normSandbox(want)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("sandbox mismatch\n got: %+v\nwant: %+v", got, want)
	}
}

func normOperation(op model.Operation) model.Operation {
	op.CreatedAt, op.UpdatedAt, op.FinishedAt = us(op.CreatedAt), us(op.UpdatedAt), usPtr(op.FinishedAt)
	return op
}

func checkOperation(t *testing.T, got, want model.Operation) {
	t.Helper()
	got, want = normOperation(got), normOperation(want)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("operation mismatch\n got: %+v\nwant: %+v", got, want)
	}
}

func checkIdem(t *testing.T, got store.IdempotencyRecord, want *store.IdempotencyRecord) {
	t.Helper()
	if got.ProjectID != want.ProjectID || !bytes.Equal(got.KeyHash, want.KeyHash) || got.Method != want.Method ||
		got.Path != want.Path || !bytes.Equal(got.RequestHash, want.RequestHash) || got.Status != want.Status ||
		!bytes.Equal(got.SealedBody, want.SealedBody) || !got.CreatedAt.Equal(us(want.CreatedAt)) ||
		got.CreatedAt.Location() != time.UTC {
		t.Fatalf("idempotency record mismatch\n got: %+v\nwant: %+v", got, *want)
	}
}

// conflict fails unless err is an *store.IdempotencyConflictError holding want.
func conflict(t *testing.T, err error, want *store.IdempotencyRecord) {
	t.Helper()
	var c *store.IdempotencyConflictError
	if !errors.As(err, &c) {
		t.Fatalf("error = %v, want *store.IdempotencyConflictError", err)
	}
	checkIdem(t, c.Existing, want)
}

// getOp reads an operation of its own project.
func (e *env) getOp(op model.Operation) model.Operation {
	e.t.Helper()
	got, err := e.s.GetOperation(e.ctx, op.ProjectID, op.ID)
	if err != nil {
		e.t.Fatalf("GetOperation %s: %v", op.ID, err)
	}
	return got
}

func (e *env) getSandbox(id model.SandboxID) model.Sandbox {
	e.t.Helper()
	got, err := e.s.GetSandboxByID(e.ctx, id)
	if err != nil {
		e.t.Fatalf("GetSandboxByID %s: %v", id, err)
	}
	return got
}

// claim claims as owner (in its current incarnation) at now with a 30 s
// lease and fails on error.
func (e *env) claim(owner model.NodeID, now time.Time) model.Operation {
	e.t.Helper()
	op, err := e.s.ClaimOperation(e.ctx, store.Claim{Owner: owner, Incarnation: e.inc(owner), Lease: 30 * time.Second, Now: now})
	if err != nil {
		e.t.Fatalf("ClaimOperation(%s): %v", owner, err)
	}
	return op
}

func (e *env) noWork(owner model.NodeID, now time.Time) {
	e.t.Helper()
	op, err := e.s.ClaimOperation(e.ctx, store.Claim{Owner: owner, Incarnation: e.inc(owner), Lease: 30 * time.Second, Now: now})
	if !errors.Is(err, store.ErrNoWork) {
		e.t.Fatalf("ClaimOperation(%s) = %+v, %v; want ErrNoWork", owner, op, err)
	}
}

// finish finishes op for owner in its current incarnation.
func (e *env) finish(f store.Finish) error {
	if f.Incarnation == "" {
		f.Incarnation = e.inc(f.Owner)
	}
	return e.s.FinishOperation(e.ctx, f)
}

// retry retries an operation for its owner in its current incarnation.
func (e *env) retry(r store.Retry) error {
	if r.Incarnation == "" {
		r.Incarnation = e.inc(r.Owner)
	}
	return e.s.RetryOperation(e.ctx, r)
}
