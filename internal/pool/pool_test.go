package pool

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/store/sqlite"
)

const (
	node = model.NodeID("node_aaaaaaaaaaaaaaaaaaaaaaaaaa")
	inc  = model.Incarnation("inc_aaaaaaaaaaaaaaaaaaaaaaaaaa")
)

type fixture struct {
	t     *testing.T
	ctx   context.Context
	st    store.Store
	now   time.Time
	c     *Controller
	mu    sync.Mutex
	sick  map[model.SandboxID]bool
	tname model.TaggedName
}

func newFixture(t *testing.T, mutate func(*Config)) *fixture {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "airlock.db"), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.RegisterNode(ctx, model.Node{ID: node, Incarnation: inc, Role: model.RoleAll, AdvertiseURL: "http://127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, ctx: ctx, st: st, now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), sick: map[model.SandboxID]bool{}}
	f.tname, err = model.ParseTaggedName("python")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Store: st, Node: node, DiskMiB: 1024, MemoryMiB: 4096, CPUs: 8, FillParallel: 100,
		Environment: func(_ context.Context, name string) (model.EnvironmentRef, error) {
			if name != "runc" {
				return "", fmt.Errorf("environment %q is not enabled here", name)
			}
			return envRef, nil
		},
		Healthy: func(_ context.Context, sb model.Sandbox) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.sick[sb.ID] {
				return errors.New("no answer")
			}
			return nil
		},
		Now:    func() time.Time { return f.now },
		Logger: log,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	if f.c, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	return f
}

var envRef = model.EnvironmentRef("env:sha256:" + fmt.Sprintf("%064x", 7))

// release stores a new template and points the tag at it.
func (f *fixture) release() model.TemplateDigest {
	f.t.Helper()
	manifest := []byte(fmt.Sprintf(`{"n":%d}`, f.now.UnixNano()))
	f.now = f.now.Add(time.Second)
	d := model.DigestFromSHA256(sha256.Sum256(manifest))
	must(f.t, f.st.PutTemplate(f.ctx, model.Template{Digest: d, SizeBytes: 1, Manifest: manifest, CreatedAt: f.now}))
	must(f.t, f.st.SetTemplateName(f.ctx, f.tname, d, f.now))
	return d
}

func (f *fixture) pool(size int, env string) model.Pool {
	f.t.Helper()
	ref, err := model.ParseTemplateRef("python")
	must(f.t, err)
	p, err := f.st.PutPool(f.ctx, model.Pool{ID: model.NewPoolID(), Key: model.PoolKey{Template: ref, Environment: env, CPUs: 1, MemoryMiB: 512},
		Size: size, LastUsed: f.now, CreatedAt: f.now, UpdatedAt: f.now})
	must(f.t, err)
	return p
}

func (f *fixture) pass() {
	f.t.Helper()
	must(f.t, f.c.Pass(f.ctx))
}

// reconcile runs every claimable operation to success, as the node's
// reconciler would: creates end running, deletes deleted.
func (f *fixture) reconcile() {
	f.t.Helper()
	for {
		op, err := f.st.ClaimOperation(f.ctx, store.Claim{Owner: node, Incarnation: inc, Lease: time.Minute, Now: f.now})
		if errors.Is(err, store.ErrNoWork) {
			return
		}
		must(f.t, err)
		sb, err := f.st.GetSandboxByID(f.ctx, op.SandboxID)
		must(f.t, err)
		fin := store.Finish{OperationID: op.ID, Owner: node, Incarnation: inc, State: model.OpSucceeded, Now: f.now}
		switch op.Kind {
		case model.OpCreate:
			must(f.t, f.st.TransitionSandbox(f.ctx, sb.ID, sb.State, model.StateCreating, "", f.now))
			fin.SandboxFrom, fin.SandboxTo, fin.Source = model.StateCreating, model.StateRunning, model.SourceCold
		case model.OpDelete:
			fin.SandboxFrom, fin.SandboxTo = model.StateDeleting, model.StateDeleted
		default:
			f.t.Fatalf("unexpected %s operation", op.Kind)
		}
		must(f.t, f.st.FinishOperation(f.ctx, fin))
	}
}

// fill counts this node's unclaimed, live sandboxes of pool p by digest and state.
func (f *fixture) fill(p model.PoolID) map[model.TemplateDigest]map[model.SandboxState]int {
	f.t.Helper()
	sbs, err := f.st.ListPoolSandboxes(f.ctx, node)
	must(f.t, err)
	out := map[model.TemplateDigest]map[model.SandboxState]int{}
	for _, ps := range sbs {
		if ps.Pool != p {
			continue
		}
		if out[ps.Sandbox.Template] == nil {
			out[ps.Sandbox.Template] = map[model.SandboxState]int{}
		}
		out[ps.Sandbox.Template][ps.Sandbox.State]++
	}
	return out
}

func (f *fixture) wantFill(p model.PoolID, want map[model.TemplateDigest]map[model.SandboxState]int) {
	f.t.Helper()
	if got := f.fill(p); fmt.Sprint(got) != fmt.Sprint(want) {
		f.t.Fatalf("fill of pool %s = %v, want %v", p, got, want)
	}
}

func (f *fixture) claim(p model.Pool, d model.TemplateDigest, project model.ProjectID) (model.Sandbox, error) {
	return f.st.ClaimPoolSandbox(f.ctx, store.PoolClaim{
		Pool: p.ID, Template: d, Environment: envRef, Node: node,
		Resources: model.Resources{CPUs: 1, MemoryMiB: 512, DiskMiB: 1024}, ProjectID: project,
		Operation: model.Operation{ID: model.NewOperationID(), CreatedAt: f.now, UpdatedAt: f.now}, Now: f.now,
	})
}

func (f *fixture) project() model.ProjectID {
	p := model.Project{ID: model.NewProjectID(), Name: "p" + fmt.Sprint(f.now.UnixNano()), CreatedAt: f.now}
	must(f.t, f.st.CreateProject(f.ctx, p))
	return p.ID
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestFillClaimRefill: a pool is filled to its size, a claim takes one
// sandbox out of it, the next pass replaces it, and the claimed sandbox is
// never touched again.
func TestFillClaimRefill(t *testing.T) {
	f := newFixture(t, nil)
	d := f.release()
	p := f.pool(3, "runc")
	f.pass()
	f.wantFill(p.ID, map[model.TemplateDigest]map[model.SandboxState]int{d: {model.StatePending: 3}})
	f.pass() // nothing more while they start
	f.wantFill(p.ID, map[model.TemplateDigest]map[model.SandboxState]int{d: {model.StatePending: 3}})
	f.reconcile()
	f.wantFill(p.ID, map[model.TemplateDigest]map[model.SandboxState]int{d: {model.StateRunning: 3}})
	sbs, err := f.st.ListPoolSandboxes(f.ctx, node)
	must(t, err)
	for _, ps := range sbs {
		sb := ps.Sandbox
		if sb.ProjectID != model.SystemProject || sb.Environment != envRef || sb.Resources.DiskMiB != 1024 || sb.NodeID != node {
			t.Fatalf("pool sandbox %+v", sb)
		}
		if spec, err := f.st.GetSandboxEgressByID(f.ctx, sb.ID); err != nil || spec.Default != policy.None {
			t.Fatalf("pool sandbox's egress = %+v, %v; want none until claimed", spec, err)
		}
	}
	owner := f.project()
	claimed, err := f.claim(p, d, owner)
	must(t, err)
	f.pass()
	f.wantFill(p.ID, map[model.TemplateDigest]map[model.SandboxState]int{d: {model.StateRunning: 2, model.StatePending: 1}})
	f.reconcile()
	// Shrinking removes unclaimed ones only.
	p.Size = 1
	_, err = f.st.PutPool(f.ctx, p)
	must(t, err)
	f.pass()
	f.reconcile()
	f.wantFill(p.ID, map[model.TemplateDigest]map[model.SandboxState]int{d: {model.StateRunning: 1}})
	if sb, err := f.st.GetSandbox(f.ctx, owner, claimed.ID); err != nil || sb.State != model.StateRunning {
		t.Fatalf("claimed sandbox after the pool shrank: %+v, %v", sb, err)
	}
	// Deleting the pool removes its unclaimed sandboxes, not the claimed one.
	_, err = f.st.DeletePool(f.ctx, p.ID)
	must(t, err)
	f.pass()
	f.reconcile()
	f.wantFill(p.ID, map[model.TemplateDigest]map[model.SandboxState]int{})
	if sb, err := f.st.GetSandbox(f.ctx, owner, claimed.ID); err != nil || sb.State != model.StateRunning {
		t.Fatalf("claimed sandbox after the pool was deleted: %+v, %v", sb, err)
	}
}

// TestRollingReleases: when the tag moves, the newest two releases are
// kept warm and older ones drain.
func TestRollingReleases(t *testing.T) {
	f := newFixture(t, nil)
	d1 := f.release()
	p := f.pool(1, "runc")
	f.pass()
	f.reconcile()
	d2 := f.release()
	f.pass()
	f.reconcile()
	f.wantFill(p.ID, map[model.TemplateDigest]map[model.SandboxState]int{d1: {model.StateRunning: 1}, d2: {model.StateRunning: 1}})
	d3 := f.release()
	f.pass()
	f.reconcile()
	f.wantFill(p.ID, map[model.TemplateDigest]map[model.SandboxState]int{d2: {model.StateRunning: 1}, d3: {model.StateRunning: 1}})
	got, err := f.st.GetPool(f.ctx, p.ID)
	must(t, err)
	if got.Current != d3 || got.Previous != d2 {
		t.Fatalf("releases %s, %s; want %s, %s", got.Current, got.Previous, d3, d2)
	}
}

// resolveCounter counts ResolveTemplate calls.
type resolveCounter struct {
	store.Store
	mu sync.Mutex
	n  int
}

func (r *resolveCounter) ResolveTemplate(ctx context.Context, ref model.TemplateRef) (model.Template, error) {
	r.mu.Lock()
	r.n++
	r.mu.Unlock()
	return r.Store.ResolveTemplate(ctx, ref)
}

func (r *resolveCounter) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.n
	r.n = 0
	return n
}

// TestResolveOncePerPass: pools of one template reference share a pass's
// resolution, and every pass resolves afresh, so a moved tag is seen.
func TestResolveOncePerPass(t *testing.T) {
	var rc *resolveCounter
	f := newFixture(t, func(cfg *Config) {
		rc = &resolveCounter{Store: cfg.Store}
		cfg.Store = rc
	})
	d1 := f.release()
	p1, p2 := f.pool(1, "runc"), f.pool(2, "crun")
	f.pass()
	if n := rc.count(); n != 1 {
		t.Fatalf("a pass over two pools of one reference resolved it %d times, want 1", n)
	}
	d2 := f.release()
	f.pass()
	if n := rc.count(); n != 1 {
		t.Fatalf("the next pass resolved %d times, want 1", n)
	}
	for _, p := range []model.Pool{p1, p2} {
		got, err := f.st.GetPool(f.ctx, p.ID)
		must(t, err)
		if got.Current != d2 || got.Previous != d1 {
			t.Fatalf("pool %s releases %s, %s; want %s, %s", p.ID, got.Current, got.Previous, d2, d1)
		}
	}
}

// TestDrainWhenUnused: a pool no create matched for DrainAfter keeps no
// sandboxes; a miss makes it fill again.
func TestDrainWhenUnused(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.DrainAfter = time.Hour })
	d := f.release()
	p := f.pool(2, "runc")
	f.pass()
	f.reconcile()
	f.now = f.now.Add(2 * time.Hour)
	f.pass()
	f.reconcile()
	f.wantFill(p.ID, map[model.TemplateDigest]map[model.SandboxState]int{})
	must(t, f.st.NotePoolMiss(f.ctx, p.ID, f.now))
	f.pass()
	f.wantFill(p.ID, map[model.TemplateDigest]map[model.SandboxState]int{d: {model.StatePending: 2}})
}

// TestBudgetAndParallel: the pools' unclaimed sandboxes never hold more
// than the node's budget, and no more are created at once than
// FillParallel.
func TestBudgetAndParallel(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MemoryMiB, c.CPUs, c.FillParallel = 1536, 8, 2 })
	d := f.release()
	p := f.pool(5, "runc")
	f.pass()
	f.wantFill(p.ID, map[model.TemplateDigest]map[model.SandboxState]int{d: {model.StatePending: 2}})
	f.reconcile()
	f.pass()
	f.reconcile()
	f.pass()
	// 3 × 512 MiB is the budget.
	f.wantFill(p.ID, map[model.TemplateDigest]map[model.SandboxState]int{d: {model.StateRunning: 3}})
}

// TestPidsBudget: pool sandboxes are charged their environment's host pids
// (runc 512 MiB: 1024+64) and hold at most the pools' pids budget.
func TestPidsBudget(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Pids, c.FillParallel = 3*1088+1000, 10 })
	d := f.release()
	p := f.pool(5, "runc")
	f.pass()
	// Memory (4096 MiB) would hold 8; 3 × 1088 is the pids budget.
	f.wantFill(p.ID, map[model.TemplateDigest]map[model.SandboxState]int{d: {model.StatePending: 3}})
	list, err := f.st.ListPoolSandboxes(f.ctx, node)
	must(t, err)
	for _, ps := range list {
		if ps.Sandbox.Resources.HostPids != 1088 {
			t.Fatalf("pool sandbox %s charged %d host pids, want 1088", ps.Sandbox.ID, ps.Sandbox.Resources.HostPids)
		}
	}
	if n, err := f.st.GetNode(f.ctx, node); err != nil || n.Usage.Pids != 3*1088 {
		t.Fatalf("node usage %+v, %v; want %d pids", n.Usage, err, 3*1088)
	}
	if _, err := New(Config{Store: f.st, Node: node, DiskMiB: 1, MemoryMiB: 1, CPUs: 1, Pids: -1}); err == nil {
		t.Fatal("a negative pids budget was accepted")
	}
}

// TestReplaceUnhealthyAndFailed: a ready sandbox whose agent stops
// answering and one whose create failed are replaced.
func TestReplaceUnhealthyAndFailed(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.HealthEvery = time.Minute })
	d := f.release()
	p := f.pool(2, "runc")
	f.pass()
	// One create fails.
	op, err := f.st.ClaimOperation(f.ctx, store.Claim{Owner: node, Incarnation: inc, Lease: time.Minute, Now: f.now})
	must(t, err)
	must(t, f.st.TransitionSandbox(f.ctx, op.SandboxID, model.StatePending, model.StateCreating, "", f.now))
	must(t, f.st.FinishOperation(f.ctx, store.Finish{OperationID: op.ID, Owner: node, Incarnation: inc, State: model.OpFailed,
		Error: &model.OperationError{Code: "runtime_error", Message: "x"}, SandboxFrom: model.StateCreating, SandboxTo: model.StateFailed, Now: f.now}))
	f.reconcile()
	f.pass() // removes the failed one; backs off
	f.reconcile()
	f.pass()
	f.wantFill(p.ID, map[model.TemplateDigest]map[model.SandboxState]int{d: {model.StateRunning: 1}})
	f.now = f.now.Add(3 * time.Second)
	f.pass()
	f.reconcile()
	f.wantFill(p.ID, map[model.TemplateDigest]map[model.SandboxState]int{d: {model.StateRunning: 2}})
	if got, err := f.st.GetSandboxByID(f.ctx, op.SandboxID); err != nil || got.State != model.StateDeleted {
		t.Fatalf("failed pool sandbox: %+v, %v; want deleted", got, err)
	}
	sbs, err := f.st.ListPoolSandboxes(f.ctx, node)
	must(t, err)
	f.mu.Lock()
	f.sick[sbs[0].Sandbox.ID] = true
	f.mu.Unlock()
	f.now = f.now.Add(2 * time.Minute)
	f.pass()
	f.reconcile()
	f.pass()
	f.reconcile()
	f.wantFill(p.ID, map[model.TemplateDigest]map[model.SandboxState]int{d: {model.StateRunning: 2}})
	if got, err := f.st.GetSandboxByID(f.ctx, sbs[0].Sandbox.ID); err != nil || got.State != model.StateDeleted {
		t.Fatalf("unhealthy pool sandbox: %+v, %v; want deleted", got, err)
	}
}

// TestEnvironmentNotHere: a pool of an environment this node does not
// run is not filled here.
func TestEnvironmentNotHere(t *testing.T) {
	f := newFixture(t, nil)
	f.release()
	p := f.pool(2, "qemu")
	f.pass()
	f.wantFill(p.ID, map[model.TemplateDigest]map[model.SandboxState]int{})
}

// TestNodeNotActive: a cordoned node's pools give their sandboxes back and
// fill nothing until it is active again.
func TestNodeNotActive(t *testing.T) {
	f := newFixture(t, nil)
	d := f.release()
	p := f.pool(2, "runc")
	f.pass()
	f.reconcile()
	_, err := f.st.SetNodeState(f.ctx, node, model.NodeCordoned)
	must(t, err)
	f.pass()
	f.reconcile()
	f.pass()
	f.wantFill(p.ID, map[model.TemplateDigest]map[model.SandboxState]int{})
	_, err = f.st.SetNodeState(f.ctx, node, model.NodeActive)
	must(t, err)
	f.pass()
	f.wantFill(p.ID, map[model.TemplateDigest]map[model.SandboxState]int{d: {model.StatePending: 2}})
}

// TestOnePoolDoesNotBlockOthers: a pool over the budget and a pool whose
// release is gone do not keep a later pool from filling.
func TestOnePoolDoesNotBlockOthers(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MemoryMiB = 1024 })
	d := f.release()
	ref, err := model.ParseTemplateRef("python")
	must(t, err)
	big, err := f.st.PutPool(f.ctx, model.Pool{ID: model.NewPoolID(), Key: model.PoolKey{Template: ref, Environment: "runc", CPUs: 1, MemoryMiB: 2048},
		Size: 1, LastUsed: f.now, CreatedAt: f.now, UpdatedAt: f.now})
	must(t, err)
	gone, err := model.ParseTemplateRef(model.DigestFromSHA256([32]byte{9}).String())
	must(t, err)
	ghost, err := f.st.PutPool(f.ctx, model.Pool{ID: model.NewPoolID(), Key: model.PoolKey{Template: gone, Environment: "runc", CPUs: 1, MemoryMiB: 256},
		Size: 1, LastUsed: f.now, CreatedAt: f.now, UpdatedAt: f.now})
	must(t, err)
	f.now = f.now.Add(time.Second)
	small := f.pool(1, "runc")
	f.pass()
	f.wantFill(big.ID, map[model.TemplateDigest]map[model.SandboxState]int{})
	f.wantFill(ghost.ID, map[model.TemplateDigest]map[model.SandboxState]int{})
	f.wantFill(small.ID, map[model.TemplateDigest]map[model.SandboxState]int{d: {model.StatePending: 1}})
}

// TestRunFillsOnChange: Run passes when the store changes (a pool set)
// and returns when its context ends.
func TestRunFillsOnChange(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		c.Interval, c.MinGap, c.DrainAfter = time.Hour, time.Millisecond, 1000*time.Hour
		c.Now = time.Now
	})
	d := f.release()
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- f.c.Run(ctx) }()
	p := f.pool(2, "runc")
	deadline := time.Now().Add(30 * time.Second)
	for fmt.Sprint(f.fill(p.ID)) != fmt.Sprint(map[model.TemplateDigest]map[model.SandboxState]int{d: {model.StatePending: 2}}) {
		if time.Now().After(deadline) {
			t.Fatalf("Run did not fill the pool it was told of: %v", f.fill(p.ID))
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
}
