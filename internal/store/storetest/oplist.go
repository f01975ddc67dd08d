package storetest

import (
	"slices"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func opListTests() []namedTest {
	return []namedTest{
		{"ListOperations", testListOperations},
		{"ListOperationsPaging", testListOperationsPaging},
	}
}

// opFixture: project a with o1 (create of s1, succeeded), o2 (create of
// s2, failed: the delete cancels it), tied creates t1 < t2 (same created_at, of s3 and s4) and
// d2 (delete of s2, newest); project b with ob (create).
type opFixture struct {
	a, b               model.Project
	s1, s2             model.Sandbox
	o1, o2, t1, t2, d2 model.Operation
	ob                 model.Operation
}

func (e *env) opFixture() opFixture {
	t := e.t
	var f opFixture
	f.a, f.b = e.project(), e.project()
	tpl := e.template()
	node := e.homeNode()
	f.s1, f.o1 = e.sandbox(f.a.ID, tpl.Digest, nil)
	f.s2, f.o2 = e.sandbox(f.a.ID, tpl.Digest, nil)
	same := e.now()
	var tied []model.Operation
	for i := 0; i < 2; i++ {
		sb, op := e.newSandbox(f.a.ID, tpl.Digest, nil)
		sb.CreatedAt, op.CreatedAt, op.UpdatedAt = same, same, same
		must(t, e.s.CreateSandbox(e.ctx, sb, policy.Spec{}, op, nil))
		tied = append(tied, op)
	}
	if tied[1].ID < tied[0].ID {
		tied[0], tied[1] = tied[1], tied[0]
	}
	f.t1, f.t2 = tied[0], tied[1]
	_, f.ob = e.sandbox(f.b.ID, tpl.Digest, nil)

	c := e.claim(node, e.now())
	if c.ID != f.o1.ID {
		t.Fatalf("claimed %s, want o1 %s", c.ID, f.o1.ID)
	}
	done := e.now()
	must(t, e.finish(store.Finish{OperationID: c.ID, Owner: node, State: model.OpSucceeded, Now: done}))
	f.o1 = e.getOp(f.o1)

	must(t, e.s.TransitionSandbox(e.ctx, f.s2.ID, model.StatePending, model.StateCreating, "", e.now()))
	f.d2 = e.deleteOp(f.s2)
	_, err := e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: f.a.ID, SandboxID: f.s2.ID, Operation: f.d2, Now: e.now()})
	must(t, err)
	f.d2, f.o2 = e.getOp(f.d2), e.getOp(f.o2)
	if f.o2.State != model.OpFailed {
		t.Fatalf("o2 after the delete = %+v, want failed (cancelled)", f.o2)
	}
	return f
}

func (e *env) listOps(q store.OperationQuery) []model.OperationID {
	e.t.Helper()
	if q.Limit == 0 {
		q.Limit = 1000
	}
	page, err := e.s.ListOperations(e.ctx, q)
	must(e.t, err)
	if page.Next != nil {
		e.t.Fatalf("ListOperations(%+v): a next cursor on the only page", q)
	}
	ids := make([]model.OperationID, 0, len(page.Operations))
	for _, op := range page.Operations {
		ids = append(ids, op.ID)
	}
	return ids
}

func testListOperations(e *env) {
	t := e.t
	f := e.opFixture()
	ids := func(ops ...model.Operation) []model.OperationID {
		out := make([]model.OperationID, 0, len(ops))
		for _, op := range ops {
			out = append(out, op.ID)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		q    store.OperationQuery
		want []model.OperationID
	}{
		{"project a, newest first", store.OperationQuery{ProjectID: f.a.ID}, ids(f.d2, f.t2, f.t1, f.o2, f.o1)},
		{"project b", store.OperationQuery{ProjectID: f.b.ID}, ids(f.ob)},
		{"unknown project", store.OperationQuery{ProjectID: model.NewProjectID()}, ids()},
		{"sandbox", store.OperationQuery{ProjectID: f.a.ID, SandboxID: f.s2.ID}, ids(f.d2, f.o2)},
		{"sandbox of another project", store.OperationQuery{ProjectID: f.b.ID, SandboxID: f.s1.ID}, ids()},
		{"succeeded", store.OperationQuery{ProjectID: f.a.ID, States: []model.OperationState{model.OpSucceeded}}, ids(f.o1)},
		{"pending or running", store.OperationQuery{ProjectID: f.a.ID, States: []model.OperationState{model.OpPending, model.OpRunning}}, ids(f.d2, f.t2, f.t1)},
		{"failed", store.OperationQuery{ProjectID: f.a.ID, States: []model.OperationState{model.OpFailed}}, ids(f.o2)},
		{"deletes", store.OperationQuery{ProjectID: f.a.ID, Kinds: []model.OperationKind{model.OpDelete}}, ids(f.d2)},
		{"pending creates", store.OperationQuery{ProjectID: f.a.ID, Kinds: []model.OperationKind{model.OpCreate}, States: []model.OperationState{model.OpPending}}, ids(f.t2, f.t1)},
		{"sandbox and kind", store.OperationQuery{ProjectID: f.a.ID, SandboxID: f.s1.ID, Kinds: []model.OperationKind{model.OpDelete}}, ids()},
	} {
		if got := e.listOps(tc.q); !slices.Equal(got, tc.want) {
			t.Errorf("%s: ListOperations = %v, want %v", tc.name, got, tc.want)
		}
	}
	// The rows are whole operations, as GetOperation reads them.
	page, err := e.s.ListOperations(e.ctx, store.OperationQuery{ProjectID: f.a.ID, SandboxID: f.s1.ID, Limit: 10})
	must(t, err)
	if len(page.Operations) != 1 {
		t.Fatalf("operations of s1 = %+v, want o1", page.Operations)
	}
	checkOperation(t, page.Operations[0], f.o1)
	for _, bad := range []store.OperationQuery{
		{ProjectID: f.a.ID, Limit: 0},
		{ProjectID: f.a.ID, Limit: 1001},
		{Limit: 10},
	} {
		_, err := e.s.ListOperations(e.ctx, bad)
		mustIs(t, err, model.ErrInvalid)
	}
}

func testListOperationsPaging(e *env) {
	t := e.t
	f := e.opFixture()
	want := []model.OperationID{f.d2.ID, f.t2.ID, f.t1.ID, f.o2.ID, f.o1.ID}
	for limit := 1; limit <= 6; limit++ {
		var got []model.OperationID
		q := store.OperationQuery{ProjectID: f.a.ID, Limit: limit}
		for pages := 0; ; pages++ {
			if pages > len(want) {
				t.Fatalf("limit %d: more pages than operations", limit)
			}
			page, err := e.s.ListOperations(e.ctx, q)
			must(t, err)
			if len(page.Operations) > limit {
				t.Fatalf("limit %d: page of %d", limit, len(page.Operations))
			}
			for _, op := range page.Operations {
				got = append(got, op.ID)
			}
			if page.Next == nil {
				break
			}
			if len(page.Operations) != limit {
				t.Fatalf("limit %d: a short page (%d) with a next cursor", limit, len(page.Operations))
			}
			q.After = page.Next
		}
		if !slices.Equal(got, want) {
			t.Errorf("limit %d: pages = %v, want %v", limit, got, want)
		}
	}
	// A filtered listing pages the same way: the tie (t2, t1) splits
	// across pages without losing or repeating either.
	q := store.OperationQuery{ProjectID: f.a.ID, Kinds: []model.OperationKind{model.OpCreate}, Limit: 2}
	p1, err := e.s.ListOperations(e.ctx, q)
	must(t, err)
	if p1.Next == nil || len(p1.Operations) != 2 || p1.Operations[0].ID != f.t2.ID || p1.Operations[1].ID != f.t1.ID {
		t.Fatalf("creates page 1 = %+v", p1)
	}
	q.After = p1.Next
	p2, err := e.s.ListOperations(e.ctx, q)
	must(t, err)
	if p2.Next != nil || len(p2.Operations) != 2 || p2.Operations[0].ID != f.o2.ID || p2.Operations[1].ID != f.o1.ID {
		t.Fatalf("creates page 2 = %+v", p2)
	}
}
