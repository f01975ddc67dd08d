package storetest

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func poolTests() []namedTest {
	return []namedTest{
		{"PoolPutFindDelete", testPoolPutFindDelete},
		{"PoolRelease", testPoolRelease},
		{"PoolClaim", testPoolClaim},
		{"PoolSandboxCounts", testPoolSandboxCounts},
		{"PoolClaimQuota", testPoolClaimQuota},
		{"ConcurrentPoolClaims", testConcurrentPoolClaims},
		{"PoolClaimNeedsActiveNode", testPoolClaimNeedsActiveNode},
		{"PoolSandboxesOfDeadNode", testPoolSandboxesOfDeadNode},
	}
}

func (e *env) pool(tpl string, size int) model.Pool {
	e.t.Helper()
	ref, err := model.ParseTemplateRef(tpl)
	must(e.t, err)
	now := e.now()
	p, err := e.s.PutPool(e.ctx, model.Pool{
		ID: model.NewPoolID(), Key: model.PoolKey{Template: ref, Environment: "runc", CPUs: 1, MemoryMiB: 256},
		Size: size, CreatedAt: now, UpdatedAt: now,
	})
	must(e.t, err)
	return p
}

// poolSandbox stores an unclaimed sandbox of pool p and runs its create as
// the home node's controller would: to the end if ready, else it is left
// creating.
func (e *env) poolSandbox(p model.Pool, tpl model.TemplateDigest, ready bool) model.Sandbox {
	e.t.Helper()
	sb, op := e.newSandbox(model.SystemProject, tpl, nil)
	sb.Pool, sb.Env, sb.Timeouts = p.ID, nil, model.Timeouts{}
	sb.Resources = model.Resources{CPUs: p.Key.CPUs, MemoryMiB: p.Key.MemoryMiB, DiskMiB: 2048}
	must(e.t, e.s.CreateSandbox(e.ctx, sb, policy.Spec{}, op, nil))
	node := sb.NodeID
	claimed, err := e.s.ClaimOperation(e.ctx, store.Claim{Owner: node, Incarnation: e.inc(node), Lease: time.Minute, Now: e.now()})
	must(e.t, err)
	if claimed.ID != op.ID {
		e.t.Fatalf("claimed %s, want the create %s", claimed.ID, op.ID)
	}
	must(e.t, e.s.TransitionSandbox(e.ctx, sb.ID, model.StatePending, model.StateCreating, "", e.now()))
	if !ready {
		return e.getSandbox(sb.ID)
	}
	must(e.t, e.finish(store.Finish{OperationID: op.ID, Owner: node, State: model.OpSucceeded,
		SandboxFrom: model.StateCreating, SandboxTo: model.StateRunning, Source: model.SourceCold, Now: e.now()}))
	return e.getSandbox(sb.ID)
}

func (e *env) poolClaim(p model.Pool, tpl model.TemplateDigest, project model.ProjectID) store.PoolClaim {
	now := e.now()
	return store.PoolClaim{
		Pool: p.ID, Template: tpl, Node: e.homeNode(),
		Resources: model.Resources{CPUs: p.Key.CPUs, MemoryMiB: p.Key.MemoryMiB, DiskMiB: 2048},
		ProjectID: project, Env: model.Env{"A": "1"}, Metadata: model.Metadata{"team": "x"},
		Timeouts:  model.Timeouts{Idle: time.Minute, OnTimeout: model.OnTimeoutDelete},
		Operation: model.Operation{ID: model.NewOperationID(), CreatedAt: now, UpdatedAt: now},
		Now:       now,
	}
}

func testPoolPutFindDelete(e *env) {
	t := e.t
	// The migrations made the system project (and the model names it).
	if sys, err := e.s.GetProject(e.ctx, model.SystemProject); err != nil || sys.ID != model.SystemProject {
		t.Fatalf("GetProject(SystemProject) = %+v, %v", sys, err)
	}
	p := e.pool("python", 2)
	if p.Size != 2 || p.Current != "" || p.Hits != 0 || p.Key.Environment != "runc" {
		t.Fatalf("new pool = %+v", p)
	}
	again := p
	again.ID, again.Size, again.UpdatedAt = model.NewPoolID(), 5, e.now()
	got, err := e.s.PutPool(e.ctx, again)
	must(t, err)
	if got.ID != p.ID || got.Size != 5 {
		t.Fatalf("second put of the same key = %+v, want pool %s of size 5", got, p.ID)
	}
	other := e.pool("python", 1) // same template, other key below
	if other.ID != p.ID {
		t.Fatalf("same key gave another pool")
	}
	k := p.Key
	k.MemoryMiB = 512
	now := e.now()
	q, err := e.s.PutPool(e.ctx, model.Pool{ID: model.NewPoolID(), Key: k, Size: 1, CreatedAt: now, UpdatedAt: now})
	must(t, err)
	if q.ID == p.ID {
		t.Fatal("another key got the same pool")
	}
	found, err := e.s.FindPool(e.ctx, k)
	must(t, err)
	if found.ID != q.ID {
		t.Fatalf("FindPool = %s, want %s", found.ID, q.ID)
	}
	list, err := e.s.ListPools(e.ctx)
	must(t, err)
	if len(list) != 2 {
		t.Fatalf("ListPools = %d pools, want 2", len(list))
	}
	for _, bad := range []int{-1, model.MaxPoolSize + 1} {
		bp := p
		bp.Size = bad
		_, err := e.s.PutPool(e.ctx, bp)
		mustIs(t, err, model.ErrInvalid)
	}
	del, err := e.s.DeletePool(e.ctx, p.ID)
	must(t, err)
	if del.ID != p.ID {
		t.Fatalf("DeletePool returned %s", del.ID)
	}
	_, err = e.s.GetPool(e.ctx, p.ID)
	mustIs(t, err, store.ErrNotFound)
	_, err = e.s.DeletePool(e.ctx, p.ID)
	mustIs(t, err, store.ErrNotFound)
}

func testPoolRelease(e *env) {
	t := e.t
	p := e.pool("python", 1)
	a, b, c := e.template().Digest, e.template().Digest, e.template().Digest
	for _, step := range []struct {
		digest         model.TemplateDigest
		current, prior model.TemplateDigest
	}{
		{a, a, ""},
		{a, a, ""}, // no move
		{b, b, a},
		{c, c, b},
	} {
		got, err := e.s.SetPoolRelease(e.ctx, p.ID, step.digest, e.now())
		must(t, err)
		if got.Current != step.current || got.Previous != step.prior {
			t.Fatalf("after %s: current %s previous %s, want %s %s", step.digest, got.Current, got.Previous, step.current, step.prior)
		}
	}
	if got := fmt.Sprint((model.Pool{Current: c, Previous: b}).Releases()); got != fmt.Sprint([]model.TemplateDigest{c, b}) {
		t.Fatalf("Releases = %s", got)
	}
	_, err := e.s.SetPoolRelease(e.ctx, model.NewPoolID(), a, e.now())
	mustIs(t, err, store.ErrNotFound)
}

func testPoolClaim(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	other := e.template()
	p := e.pool("python", 2)
	_ = e.poolSandbox(p, tpl.Digest, false) // still starting: not claimable
	c := e.poolClaim(p, tpl.Digest, a.ID)
	_, err := e.s.ClaimPoolSandbox(e.ctx, c)
	mustIs(t, err, store.ErrNoWork)
	ready := e.poolSandbox(p, tpl.Digest, true)
	if ready.Source != model.SourceCold || ready.Pool != p.ID || ready.ProjectID != model.SystemProject {
		t.Fatalf("ready pool sandbox = %+v", ready)
	}
	// Not visible to the project before the claim.
	_, err = e.s.GetSandbox(e.ctx, a.ID, ready.ID)
	mustIs(t, err, store.ErrNotFound)
	for name, mutate := range map[string]func(*store.PoolClaim){
		"other digest": func(c *store.PoolClaim) { c.Template = other.Digest },
		"other memory": func(c *store.PoolClaim) { c.Resources.MemoryMiB++ },
		"other node":   func(c *store.PoolClaim) { c.Node = model.NewNodeID() },
		"other pool":   func(c *store.PoolClaim) { c.Pool = model.NewPoolID() },
		"other env": func(c *store.PoolClaim) {
			c.Environment = "env:sha256:" + model.EnvironmentRef(fmt.Sprintf("%064x", 1))
		},
	} {
		bad := e.poolClaim(p, tpl.Digest, a.ID)
		mutate(&bad)
		if _, err := e.s.ClaimPoolSandbox(e.ctx, bad); !errors.Is(err, store.ErrNoWork) {
			t.Fatalf("%s: claim error %v, want ErrNoWork", name, err)
		}
	}
	_, err = e.s.ClaimPoolSandbox(e.ctx, e.poolClaim(p, tpl.Digest, model.SystemProject))
	mustIs(t, err, model.ErrInvalid)

	c = e.poolClaim(p, tpl.Digest, a.ID)
	c.PublicPorts = true
	if ready.PublicPorts {
		t.Fatal("an unclaimed pool sandbox has public ports")
	}
	rec := e.idem(a.ID, "claim-1")
	c.Idempotency = func(sb model.Sandbox, op model.Operation) (*store.IdempotencyRecord, error) {
		if sb.ProjectID != a.ID || op.SandboxID != sb.ID || sb.Source != model.SourcePool {
			return nil, fmt.Errorf("idempotency record made for %+v / %+v", sb, op)
		}
		return rec, nil
	}
	got, err := e.s.ClaimPoolSandbox(e.ctx, c)
	must(t, err)
	if got.ID != ready.ID || got.ProjectID != a.ID || got.Pool != "" || got.Source != model.SourcePool ||
		got.State != model.StateRunning || got.Env["A"] != "1" || got.Metadata["team"] != "x" ||
		got.Timeouts.Idle != time.Minute || !got.LastActivity.Equal(us(c.Now)) || !got.PublicPorts {
		t.Fatalf("claimed sandbox = %+v", got)
	}
	if sb, err := e.s.GetSandbox(e.ctx, a.ID, got.ID); err != nil || sb.ProjectID != a.ID || !sb.PublicPorts {
		t.Fatalf("GetSandbox after the claim = %+v, %v", sb, err)
	}
	if page, err := e.s.ListSandboxes(e.ctx, store.SandboxQuery{ProjectID: a.ID, Metadata: map[string]string{"team": "x"}, Limit: 10}); err != nil || len(page.Sandboxes) != 1 {
		t.Fatalf("the claimed sandbox by its metadata: %+v, %v", page, err)
	}
	op, err := e.s.GetOperation(e.ctx, a.ID, c.Operation.ID)
	must(t, err)
	if op.Kind != model.OpCreate || op.State != model.OpSucceeded || op.Source != model.SourcePool || op.SandboxID != got.ID || op.FinishedAt == nil {
		t.Fatalf("claim's operation = %+v", op)
	}
	if _, err := e.s.GetIdempotency(e.ctx, a.ID, rec.KeyHash); err != nil {
		t.Fatalf("the claim's idempotency record: %v", err)
	}
	// The same key again is a conflict, and claims nothing.
	_ = e.poolSandbox(p, tpl.Digest, true)
	again := e.poolClaim(p, tpl.Digest, a.ID)
	again.Idempotency = func(model.Sandbox, model.Operation) (*store.IdempotencyRecord, error) {
		return e.idem(a.ID, "claim-1"), nil
	}
	_, err = e.s.ClaimPoolSandbox(e.ctx, again)
	var conflict *store.IdempotencyConflictError
	if !errors.As(err, &conflict) {
		t.Fatalf("reused key: %v, want an idempotency conflict", err)
	}
	left, err := e.s.ListPoolSandboxes(e.ctx, e.homeNode())
	must(t, err)
	readyLeft := 0
	for _, ps := range left {
		if ps.Sandbox.ID == got.ID {
			t.Fatal("the claimed sandbox is still listed as the pool's")
		}
		if ps.Pool != p.ID {
			t.Fatalf("pool sandbox of pool %s, want %s", ps.Pool, p.ID)
		}
		if ps.Sandbox.State == model.StateRunning {
			readyLeft++
		}
	}
	if len(left) != 2 || readyLeft != 1 {
		t.Fatalf("pool sandboxes left: %d (%d ready), want 2 (1 ready)", len(left), readyLeft)
	}
	must(t, e.s.NotePoolMiss(e.ctx, p.ID, e.now()))
	pp, err := e.s.GetPool(e.ctx, p.ID)
	must(t, err)
	if pp.Hits != 1 || pp.Misses != 1 || pp.LastUsed.IsZero() {
		t.Fatalf("pool counts = hits %d misses %d last used %v", pp.Hits, pp.Misses, pp.LastUsed)
	}
	mustIs(t, e.s.NotePoolMiss(e.ctx, model.NewPoolID(), e.now()), store.ErrNotFound)
}

func testPoolClaimQuota(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	p := e.pool("python", 1)
	// At its limit minus one, a claim fits: the claimed sandbox is
	// counted once.
	one := int64(1)
	q1, err := model.ParseQuota(&one, nil, nil, nil)
	must(t, err)
	must(t, e.s.SetProjectQuota(e.ctx, a.ID, q1))
	e.poolSandbox(p, tpl.Digest, true)
	_, err = e.s.ClaimPoolSandbox(e.ctx, e.poolClaim(p, tpl.Digest, a.ID))
	must(t, err)
	b := e.project()
	a = b
	ready := e.poolSandbox(p, tpl.Digest, true)
	zero := int64(0)
	q, err := model.ParseQuota(&zero, nil, nil, nil)
	must(t, err)
	must(t, e.s.SetProjectQuota(e.ctx, a.ID, q))
	_, err = e.s.ClaimPoolSandbox(e.ctx, e.poolClaim(p, tpl.Digest, a.ID))
	mustIs(t, err, model.ErrQuotaExceeded)
	// Nothing was written: the sandbox is still the pool's.
	sb := e.getSandbox(ready.ID)
	if sb.Pool != p.ID || sb.ProjectID != model.SystemProject {
		t.Fatalf("after a refused claim the sandbox is %+v", sb)
	}
	// Pool sandboxes count against no project's quota.
	_, usage, err := e.s.GetProjectQuota(e.ctx, a.ID)
	must(t, err)
	if usage.Sandboxes != 0 {
		t.Fatalf("usage %+v, want none", usage)
	}
}

func testConcurrentPoolClaims(e *env) {
	t := e.t
	const ready, claimers = 6, 12
	tpl := e.template()
	p := e.pool("python", ready)
	for range ready {
		e.poolSandbox(p, tpl.Digest, true)
	}
	var projects []model.ProjectID
	for range claimers {
		projects = append(projects, e.project().ID)
	}
	claims := make([]store.PoolClaim, claimers)
	for i := range claims {
		claims[i] = e.poolClaim(p, tpl.Digest, projects[i])
	}
	var (
		mu   sync.Mutex
		got  = map[model.SandboxID]model.ProjectID{}
		miss int
		errs []error
	)
	parallel(claimers, func(i int) {
		sb, err := e.s.ClaimPoolSandbox(e.ctx, claims[i])
		mu.Lock()
		defer mu.Unlock()
		switch {
		case errors.Is(err, store.ErrNoWork):
			miss++
		case err != nil:
			errs = append(errs, err)
		default:
			if prev, dup := got[sb.ID]; dup {
				errs = append(errs, fmt.Errorf("sandbox %s claimed by %s and %s", sb.ID, prev, projects[i]))
			}
			got[sb.ID] = projects[i]
		}
	})
	for _, err := range errs {
		t.Error(err)
	}
	if len(got) != ready || miss != claimers-ready {
		t.Fatalf("%d claims succeeded and %d missed, want %d and %d", len(got), miss, ready, claimers-ready)
	}
	for id, project := range got {
		if sb, err := e.s.GetSandbox(e.ctx, project, id); err != nil || sb.ProjectID != project {
			t.Fatalf("sandbox %s: %+v, %v; want it in project %s", id, sb, err, project)
		}
	}
	pp, err := e.s.GetPool(e.ctx, p.ID)
	must(t, err)
	if pp.Hits != ready {
		t.Fatalf("hits %d, want %d", pp.Hits, ready)
	}
}

// testPoolClaimNeedsActiveNode: a cordoned or draining node's pool
// sandboxes are not handed out.
func testPoolClaimNeedsActiveNode(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	p := e.pool("python", 1)
	e.poolSandbox(p, tpl.Digest, true)
	for _, st := range []model.NodeState{model.NodeCordoned, model.NodeDraining} {
		_, err := e.s.SetNodeState(e.ctx, e.homeNode(), st)
		must(t, err)
		_, err = e.s.ClaimPoolSandbox(e.ctx, e.poolClaim(p, tpl.Digest, a.ID))
		mustIs(t, err, store.ErrNoWork)
	}
	_, err := e.s.SetNodeState(e.ctx, e.homeNode(), model.NodeActive)
	must(t, err)
	_, err = e.s.ClaimPoolSandbox(e.ctx, e.poolClaim(p, tpl.Digest, a.ID))
	must(t, err)
}

// testPoolSandboxesOfDeadNode: the unclaimed pool sandboxes of a dead
// node are deleted (never failed and left, never placed again); claimed
// ones are lost like any sandbox.
func testPoolSandboxesOfDeadNode(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	p := e.pool("python", 3)
	starting := e.poolSandbox(p, tpl.Digest, false)
	ready := e.poolSandbox(p, tpl.Digest, true)
	claimed := e.poolSandbox(p, tpl.Digest, true)
	pendingSb, pendingOp := e.newSandbox(model.SystemProject, tpl.Digest, nil)
	pendingSb.Pool, pendingSb.Env, pendingSb.Timeouts = p.ID, nil, model.Timeouts{}
	pendingSb.Resources = model.Resources{CPUs: p.Key.CPUs, MemoryMiB: p.Key.MemoryMiB, DiskMiB: 2048}
	must(t, e.s.CreateSandbox(e.ctx, pendingSb, policy.Spec{}, pendingOp, nil))
	c := e.poolClaim(p, tpl.Digest, a.ID)
	got, err := e.s.ClaimPoolSandbox(e.ctx, c)
	must(t, err)
	if got.ID != ready.ID && got.ID != claimed.ID {
		t.Fatalf("claimed %s", got.ID)
	}
	e.declareDead()
	for _, id := range []model.SandboxID{starting.ID, pendingSb.ID} {
		if sb := e.getSandbox(id); sb.State != model.StateDeleted || sb.NodeID == "" {
			t.Fatalf("pool sandbox %s of a dead node: %+v, want deleted where it was", id, sb)
		}
	}
	left, err := e.s.ListPoolSandboxes(e.ctx, "")
	must(t, err)
	if len(left) != 0 {
		t.Fatalf("pool sandboxes left after their node died: %+v", left)
	}
	if sb := e.getSandbox(got.ID); sb.State != model.StateFailed || sb.ProjectID != a.ID {
		t.Fatalf("claimed sandbox of a dead node: %+v, want failed in its project", sb)
	}
	if op, err := e.s.GetOperation(e.ctx, model.SystemProject, pendingOp.ID); err != nil || op.State != model.OpFailed {
		t.Fatalf("the unstarted pool create of a dead node: %+v, %v; want failed", op, err)
	}
}

// testPoolSandboxCounts: CountPoolSandboxes counts the unclaimed sandboxes
// of every pool by digest and state, as ListPoolSandboxes lists them.
func testPoolSandboxCounts(e *env) {
	t := e.t
	got, err := e.s.CountPoolSandboxes(e.ctx)
	if err != nil || len(got) != 0 {
		t.Fatalf("CountPoolSandboxes of an empty store = %+v, %v", got, err)
	}
	a := e.project()
	t1, t2 := e.template(), e.template()
	p1, p2 := e.pool("python", 2), e.pool("node", 1)
	e.poolSandbox(p1, t1.Digest, true)
	e.poolSandbox(p1, t1.Digest, true)
	e.poolSandbox(p1, t1.Digest, false)
	e.poolSandbox(p1, t2.Digest, true)
	e.poolSandbox(p2, t1.Digest, true)
	failed := e.poolSandbox(p2, t2.Digest, false)
	must(t, e.s.TransitionSandbox(e.ctx, failed.ID, model.StateCreating, model.StateFailed, "", e.now()))
	gone := e.poolSandbox(p2, t2.Digest, false)
	must(t, e.s.TransitionSandbox(e.ctx, gone.ID, model.StateCreating, model.StateDeleting, "", e.now()))
	must(t, e.s.TransitionSandbox(e.ctx, gone.ID, model.StateDeleting, model.StateDeleted, "", e.now()))
	e.sandbox(a.ID, t1.Digest, nil) // no pool's
	// A claimed sandbox is its project's, no longer the pool's.
	_, err = e.s.ClaimPoolSandbox(e.ctx, e.poolClaim(p1, t1.Digest, a.ID))
	must(t, err)

	got, err = e.s.CountPoolSandboxes(e.ctx)
	must(t, err)
	key := func(p model.PoolID, d model.TemplateDigest, st model.SandboxState) string {
		return fmt.Sprintf("%s/%s/%s", p, d, st)
	}
	counts := map[string]int{}
	var order []string
	for _, c := range got {
		if c.N <= 0 {
			t.Fatalf("CountPoolSandboxes row with count %d: %+v", c.N, c)
		}
		k := key(c.Pool, c.Template, c.State)
		counts[k] += c.N
		order = append(order, k)
	}
	want := map[string]int{
		key(p1.ID, t1.Digest, model.StateRunning):  1,
		key(p1.ID, t1.Digest, model.StateCreating): 1,
		key(p1.ID, t2.Digest, model.StateRunning):  1,
		key(p2.ID, t1.Digest, model.StateRunning):  1,
		key(p2.ID, t2.Digest, model.StateFailed):   1,
	}
	if fmt.Sprint(counts) != fmt.Sprint(want) || len(order) != len(want) {
		t.Fatalf("CountPoolSandboxes = %v\nwant %v", order, want)
	}
	if !slices.IsSortedFunc(got, func(x, y store.PoolSandboxCount) int {
		return cmp.Or(cmp.Compare(x.Pool, y.Pool), cmp.Compare(x.Template, y.Template), cmp.Compare(x.State, y.State))
	}) {
		t.Fatalf("CountPoolSandboxes not ordered by pool, digest, state: %v", order)
	}
	// The same as counting ListPoolSandboxes.
	list, err := e.s.ListPoolSandboxes(e.ctx, "")
	must(t, err)
	listed := map[string]int{}
	for _, ps := range list {
		listed[key(ps.Pool, ps.Sandbox.Template, ps.Sandbox.State)]++
	}
	if fmt.Sprint(listed) != fmt.Sprint(want) {
		t.Fatalf("ListPoolSandboxes counts %v, CountPoolSandboxes %v", listed, counts)
	}
}
