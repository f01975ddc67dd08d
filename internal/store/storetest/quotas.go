package storetest

import (
	"errors"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func quotaTests() []namedTest {
	return []namedTest{
		{"QuotaRoundTrip", testQuotaRoundTrip},
		{"QuotaRefusesAndFrees", testQuotaRefusesAndFrees},
		{"QuotaResourceSums", testQuotaResourceSums},
		{"QuotaRaceForLastSlot", testQuotaRaceForLastSlot},
		{"QuotaRaceForLastCPUs", testQuotaRaceForLastCPUs},
		{"QuotaRetryIsReplayNotRefusal", testQuotaRetryIsReplay},
	}
}

func i64(v int64) *int64 { return &v }

func (e *env) setQuota(p model.ProjectID, sandboxes, cpus, mem, disk *int64) model.Quota {
	e.t.Helper()
	q, err := model.ParseQuota(sandboxes, cpus, mem, disk)
	must(e.t, err)
	must(e.t, e.s.SetProjectQuota(e.ctx, p, q))
	return q
}

func (e *env) usage(p model.ProjectID) model.Usage {
	e.t.Helper()
	_, u, err := e.s.GetProjectQuota(e.ctx, p)
	must(e.t, err)
	return u
}

// quotaExceeded fails unless err is a *model.QuotaExceededError on limit.
func quotaExceeded(e *env, err error, limit string) {
	e.t.Helper()
	var qe *model.QuotaExceededError
	if !errors.As(err, &qe) || !errors.Is(err, model.ErrQuotaExceeded) || qe.Limit != limit {
		e.t.Fatalf("error = %v, want the %s quota exceeded", err, limit)
	}
}

// refusedLeavesNothing checks that a refused create wrote no sandbox, no
// operation and no idempotency record.
func refusedLeavesNothing(e *env, sb model.Sandbox, op model.Operation, rec *store.IdempotencyRecord) {
	e.t.Helper()
	_, err := e.s.GetSandboxByID(e.ctx, sb.ID)
	mustIs(e.t, err, store.ErrNotFound)
	_, err = e.s.GetOperation(e.ctx, op.ProjectID, op.ID)
	mustIs(e.t, err, store.ErrNotFound)
	if rec != nil {
		_, err = e.s.GetIdempotency(e.ctx, rec.ProjectID, rec.KeyHash)
		mustIs(e.t, err, store.ErrNotFound)
	}
}

func testQuotaRoundTrip(e *env) {
	t := e.t
	a := e.project()
	q, u, err := e.s.GetProjectQuota(e.ctx, a.ID)
	must(t, err)
	if !q.Unlimited() || u != (model.Usage{}) {
		t.Fatalf("new project: quota %+v, usage %+v; want unlimited and nothing used", q, u)
	}
	want := e.setQuota(a.ID, i64(0), nil, i64(4096), i64(model.MaxQuotaLimit))
	got, _, err := e.s.GetProjectQuota(e.ctx, a.ID)
	must(t, err)
	if got != want {
		t.Fatalf("quota %+v, want %+v", got, want)
	}
	e.setQuota(a.ID, nil, nil, nil, nil)
	if got, _, _ := e.s.GetProjectQuota(e.ctx, a.ID); !got.Unlimited() {
		t.Fatalf("cleared quota reads back as %+v", got)
	}
	unknown := model.NewProjectID()
	mustIs(t, e.s.SetProjectQuota(e.ctx, unknown, want), store.ErrNotFound)
	_, _, err = e.s.GetProjectQuota(e.ctx, unknown)
	mustIs(t, err, store.ErrNotFound)
}

func testQuotaRefusesAndFrees(e *env) {
	t := e.t
	a, b := e.project(), e.project()
	tpl := e.template()
	e.setQuota(a.ID, i64(2), nil, nil, nil)
	first, _ := e.sandbox(a.ID, tpl.Digest, nil)
	e.sandbox(a.ID, tpl.Digest, nil)
	e.sandbox(b.ID, tpl.Digest, nil) // another project's sandboxes do not count

	sb, op := e.newSandbox(a.ID, tpl.Digest, model.Metadata{"k": "v"})
	rec := e.idem(a.ID, "over-quota")
	quotaExceeded(e, e.s.CreateSandbox(e.ctx, sb, policy.Spec{}, op, rec), "sandboxes")
	refusedLeavesNothing(e, sb, op, rec)
	if u := e.usage(a.ID); u.Sandboxes != 2 {
		t.Fatalf("usage %+v after a refusal, want 2 sandboxes", u)
	}

	// A sandbox being deleted still holds its share; a deleted one does not.
	now := e.now()
	_, err := e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: a.ID, SandboxID: first.ID, Operation: e.deleteOp(first), Now: now})
	must(t, err)
	quotaExceeded(e, e.s.CreateSandbox(e.ctx, sb, policy.Spec{}, op, nil), "sandboxes")
	must(t, e.s.TransitionSandbox(e.ctx, first.ID, model.StateDeleting, model.StateDeleted, "", e.now()))
	must(t, e.s.CreateSandbox(e.ctx, sb, policy.Spec{}, op, rec))
	if u := e.usage(a.ID); u.Sandboxes != 2 {
		t.Fatalf("usage %+v, want 2 sandboxes", u)
	}

	// A quota below the usage is allowed and refuses every create.
	e.setQuota(a.ID, i64(0), nil, nil, nil)
	sb2, op2 := e.newSandbox(a.ID, tpl.Digest, nil)
	quotaExceeded(e, e.s.CreateSandbox(e.ctx, sb2, policy.Spec{}, op2, nil), "sandboxes")
	e.setQuota(a.ID, nil, nil, nil, nil)
	must(t, e.s.CreateSandbox(e.ctx, sb2, policy.Spec{}, op2, nil))
}

func testQuotaResourceSums(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	// newSandbox: 2 CPUs, 256 MiB, 2048 MiB of disk each.
	e.sandbox(a.ID, tpl.Digest, nil)
	y, _ := e.sandbox(a.ID, tpl.Digest, nil)
	// A failed sandbox still counts: it keeps its writable layer until deleted.
	must(t, e.s.TransitionSandbox(e.ctx, y.ID, model.StatePending, model.StateFailed, "boom", e.now()))
	want := model.Usage{Sandboxes: 2, CPUs: 4, MemoryMiB: 512, DiskMiB: 4096}
	if u := e.usage(a.ID); u != want {
		t.Fatalf("usage %+v, want %+v", u, want)
	}
	for _, c := range []struct {
		limit                      string // "": admitted
		sandboxes, cpus, mem, disk *int64
	}{
		{limit: "cpus", cpus: i64(5)},
		{limit: "memory_mib", mem: i64(767)},
		{limit: "disk_mib", disk: i64(6143)},
		{limit: "", sandboxes: i64(3), cpus: i64(6), mem: i64(768), disk: i64(6144)}, // exactly full after
	} {
		e.setQuota(a.ID, c.sandboxes, c.cpus, c.mem, c.disk)
		sb, op := e.newSandbox(a.ID, tpl.Digest, nil)
		err := e.s.CreateSandbox(e.ctx, sb, policy.Spec{}, op, nil)
		if c.limit == "" {
			must(t, err)
			continue
		}
		quotaExceeded(e, err, c.limit)
		refusedLeavesNothing(e, sb, op, nil)
	}
	if u := e.usage(a.ID); u != (model.Usage{Sandboxes: 3, CPUs: 6, MemoryMiB: 768, DiskMiB: 6144}) {
		t.Fatalf("usage %+v", u)
	}
}

// raceForQuota has n goroutines create one sandbox each at once in a
// project whose quota admits exactly one more, and checks that exactly one
// wins and the others are refused with nothing written.
func raceForQuota(e *env, limit string, setQuota func(p model.ProjectID)) {
	t := e.t
	const n = 16
	a := e.project()
	tpl := e.template()
	e.sandbox(a.ID, tpl.Digest, nil)
	e.sandbox(a.ID, tpl.Digest, nil)
	setQuota(a.ID)
	type attempt struct {
		sb  model.Sandbox
		op  model.Operation
		rec *store.IdempotencyRecord
		err error
	}
	attempts := make([]attempt, n)
	for i := range attempts {
		at := &attempts[i]
		at.sb, at.op = e.newSandbox(a.ID, tpl.Digest, model.Metadata{"i": string(rune('a' + i))})
		at.rec = e.idem(a.ID, "race-"+string(rune('a'+i))) // distinct keys: distinct requests
	}
	parallel(n, func(i int) {
		at := &attempts[i]
		at.err = e.s.CreateSandbox(e.ctx, at.sb, policy.Spec{}, at.op, at.rec)
	})
	winners := 0
	for _, at := range attempts {
		if at.err == nil {
			winners++
			continue
		}
		quotaExceeded(e, at.err, limit)
		refusedLeavesNothing(e, at.sb, at.op, at.rec)
	}
	if winners != 1 {
		t.Fatalf("%d of %d racing creates took the last slot, want exactly 1", winners, n)
	}
	if u := e.usage(a.ID); u.Sandboxes != 3 {
		t.Fatalf("usage %+v, want 3 sandboxes", u)
	}
	ops, err := e.s.ListUnfinishedOperations(e.ctx)
	must(t, err)
	if len(ops) != 3 {
		t.Fatalf("%d unfinished operations, want the 3 creates", len(ops))
	}
}

func testQuotaRaceForLastSlot(e *env) {
	raceForQuota(e, "sandboxes", func(p model.ProjectID) { e.setQuota(p, i64(3), nil, nil, nil) })
}

func testQuotaRaceForLastCPUs(e *env) {
	// 2 CPUs each: 4 in use, 7 allowed; one more fits, two do not.
	raceForQuota(e, "cpus", func(p model.ProjectID) { e.setQuota(p, nil, i64(7), nil, nil) })
}

// testQuotaRetryIsReplay: concurrent retries of one create (one
// Idempotency-Key) for the last slot: one is applied, the others see the
// idempotency conflict (answered as a replay), not the quota.
func testQuotaRetryIsReplay(e *env) {
	t := e.t
	const n = 8
	a := e.project()
	tpl := e.template()
	e.setQuota(a.ID, i64(1), nil, nil, nil)
	sbs := make([]model.Sandbox, n)
	ops := make([]model.Operation, n)
	recs := make([]*store.IdempotencyRecord, n)
	errs := make([]error, n)
	for i := range sbs {
		sbs[i], ops[i] = e.newSandbox(a.ID, tpl.Digest, nil)
		recs[i] = e.idem(a.ID, "one-key")
	}
	parallel(n, func(i int) { errs[i] = e.s.CreateSandbox(e.ctx, sbs[i], policy.Spec{}, ops[i], recs[i]) })
	winner := -1
	for i, err := range errs {
		if err == nil {
			if winner >= 0 {
				t.Fatalf("attempts %d and %d both succeeded", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatalf("no attempt succeeded: %v", errs[0])
	}
	for i, err := range errs {
		if i != winner {
			conflict(t, err, recs[winner])
		}
	}
	// A later retry, with the project full, is still a replay.
	sb, op := e.newSandbox(a.ID, tpl.Digest, nil)
	conflict(t, e.s.CreateSandbox(e.ctx, sb, policy.Spec{}, op, e.idem(a.ID, "one-key")), recs[winner])
	if u := e.usage(a.ID); u.Sandboxes != 1 {
		t.Fatalf("usage %+v, want 1 sandbox", u)
	}
}
