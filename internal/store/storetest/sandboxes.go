package storetest

import (
	"fmt"
	"sort"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func sandboxTests() []namedTest {
	return []namedTest{
		{"CreateSandbox", testCreateSandbox},
		{"CreateSandboxErrors", testCreateSandboxErrors},
		{"CreateSandboxIdempotency", testCreateSandboxIdempotency},
		{"ListSandboxesPagination", testListPagination},
		{"ListSandboxesFilters", testListFilters},
		{"ListSandboxesLimit", testListLimit},
		{"ListOnNode", testListOnNode},
	}
}

func testCreateSandbox(e *env) {
	t := e.t
	a, b := e.project(), e.project()
	tpl := e.template()
	sb, op := e.newSandbox(a.ID, tpl.Digest, model.Metadata{"team": "ml", "env": "dev"})
	sb.PublicPorts = true
	must(t, e.s.CreateSandbox(e.ctx, sb, policy.Spec{}, op, nil))

	got, err := e.s.GetSandbox(e.ctx, a.ID, sb.ID)
	must(t, err)
	checkSandbox(t, got, sb)
	if got.CreatedAt.Location().String() != "UTC" {
		t.Fatalf("CreatedAt location = %v, want UTC", got.CreatedAt.Location())
	}
	got, err = e.s.GetSandboxByID(e.ctx, sb.ID)
	must(t, err)
	checkSandbox(t, got, sb)
	checkOperation(t, e.getOp(op), op)

	// Another project sees neither the sandbox nor its operation.
	_, err = e.s.GetSandbox(e.ctx, b.ID, sb.ID)
	mustIs(t, err, store.ErrNotFound)
	_, err = e.s.GetOperation(e.ctx, b.ID, op.ID)
	mustIs(t, err, store.ErrNotFound)
	_, err = e.s.GetSandbox(e.ctx, a.ID, model.NewSandboxID())
	mustIs(t, err, store.ErrNotFound)
	_, err = e.s.GetSandboxByID(e.ctx, model.NewSandboxID())
	mustIs(t, err, store.ErrNotFound)
	_, err = e.s.GetOperation(e.ctx, a.ID, model.NewOperationID())
	mustIs(t, err, store.ErrNotFound)

	// A sandbox without env and metadata reads back with empty maps (and
	// without public ports).
	bare, bareOp := e.newSandbox(b.ID, tpl.Digest, nil)
	bare.Env = nil
	must(t, e.s.CreateSandbox(e.ctx, bare, policy.Spec{}, bareOp, nil))
	checkSandbox(t, e.getSandbox(bare.ID), bare)
}

func testCreateSandboxErrors(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	existing, _ := e.sandbox(a.ID, tpl.Digest, nil)
	for _, tc := range []struct {
		name   string
		mutate func(sb *model.Sandbox, op *model.Operation)
		want   error
	}{
		{"duplicate sandbox ID", func(sb *model.Sandbox, op *model.Operation) { sb.ID, op.SandboxID = existing.ID, existing.ID }, store.ErrAlreadyExists},
		{"unknown project", func(sb *model.Sandbox, op *model.Operation) {
			sb.ProjectID = model.NewProjectID()
			op.ProjectID = sb.ProjectID
		}, store.ErrNotFound},
		{"unknown template", func(sb *model.Sandbox, _ *model.Operation) { sb.Template = model.DigestFromSHA256([32]byte{9}) }, store.ErrNotFound},
		{"not pending", func(sb *model.Sandbox, _ *model.Operation) { sb.State = model.StateRunning }, model.ErrInvalid},
		{"delete operation", func(_ *model.Sandbox, op *model.Operation) { op.Kind = model.OpDelete }, model.ErrInvalid},
		{"running operation", func(_ *model.Sandbox, op *model.Operation) { op.State = model.OpRunning }, model.ErrInvalid},
		{"operation of another sandbox", func(_ *model.Sandbox, op *model.Operation) { op.SandboxID = existing.ID }, model.ErrInvalid},
	} {
		sb, op := e.newSandbox(a.ID, tpl.Digest, model.Metadata{"k": "v"})
		tc.mutate(&sb, &op)
		err := e.s.CreateSandbox(e.ctx, sb, policy.Spec{}, op, e.idem(a.ID, tc.name))
		if err == nil {
			t.Fatalf("%s: CreateSandbox succeeded", tc.name)
		}
		mustIs(t, err, tc.want)
		// Nothing of the refused create is visible.
		_, err = e.s.GetOperation(e.ctx, op.ProjectID, op.ID)
		mustIs(t, err, store.ErrNotFound)
		_, err = e.s.GetIdempotency(e.ctx, a.ID, sha(tc.name))
		mustIs(t, err, store.ErrNotFound)
	}
	page, err := e.s.ListSandboxes(e.ctx, store.SandboxQuery{ProjectID: a.ID, Limit: 100, Metadata: map[string]string{"k": "v"}})
	must(t, err)
	if len(page.Sandboxes) != 0 {
		t.Fatalf("refused creates left sandboxes or metadata rows: %+v", page.Sandboxes)
	}
	checkSandbox(t, e.getSandbox(existing.ID), existing)
}

func testCreateSandboxIdempotency(e *env) {
	t := e.t
	a, b := e.project(), e.project()
	tpl := e.template()
	rec := e.idem(a.ID, "create-1")
	sb, op := e.newSandbox(a.ID, tpl.Digest, nil)
	must(t, e.s.CreateSandbox(e.ctx, sb, policy.Spec{}, op, rec))
	stored, err := e.s.GetIdempotency(e.ctx, a.ID, rec.KeyHash)
	must(t, err)
	checkIdem(t, stored, rec) // the replay data: status, sealed body, request hash

	// The same key again: conflict carrying the first record; nothing written.
	sb2, op2 := e.newSandbox(a.ID, tpl.Digest, nil)
	conflict(t, e.s.CreateSandbox(e.ctx, sb2, policy.Spec{}, op2, e.idem(a.ID, "create-1")), rec)
	_, err = e.s.GetSandboxByID(e.ctx, sb2.ID)
	mustIs(t, err, store.ErrNotFound)
	_, err = e.s.GetOperation(e.ctx, a.ID, op2.ID)
	mustIs(t, err, store.ErrNotFound)

	// The same key in another project is another key.
	sb3, op3 := e.newSandbox(b.ID, tpl.Digest, nil)
	must(t, e.s.CreateSandbox(e.ctx, sb3, policy.Spec{}, op3, e.idem(b.ID, "create-1")))
}

// listAll pages through q with q.Limit and returns the IDs in order.
func (e *env) listAll(q store.SandboxQuery) []model.SandboxID {
	e.t.Helper()
	var ids []model.SandboxID
	seen := map[model.SandboxID]bool{}
	for pages := 0; ; pages++ {
		if pages > 1000 {
			e.t.Fatal("pagination does not end")
		}
		page, err := e.s.ListSandboxes(e.ctx, q)
		must(e.t, err)
		if len(page.Sandboxes) > q.Limit {
			e.t.Fatalf("page of %d sandboxes exceeds limit %d", len(page.Sandboxes), q.Limit)
		}
		for _, sb := range page.Sandboxes {
			if seen[sb.ID] {
				e.t.Fatalf("sandbox %s listed twice", sb.ID)
			}
			seen[sb.ID] = true
			ids = append(ids, sb.ID)
		}
		if page.Next == nil {
			return ids
		}
		if len(page.Sandboxes) != q.Limit {
			e.t.Fatalf("short page (%d of %d) with a Next cursor", len(page.Sandboxes), q.Limit)
		}
		last := page.Sandboxes[len(page.Sandboxes)-1]
		if page.Next.ID != last.ID || !page.Next.CreatedAt.Equal(last.CreatedAt) {
			e.t.Fatalf("Next = %+v, want the last sandbox's position (%s, %s)", *page.Next, last.CreatedAt, last.ID)
		}
		q.After = page.Next
	}
}

func testListPagination(e *env) {
	t := e.t
	a, b := e.project(), e.project()
	tpl := e.template()
	var want []model.Sandbox
	for i := 0; i < 7; i++ {
		sb, _ := e.sandbox(a.ID, tpl.Digest, nil)
		want = append(want, sb)
		e.sandbox(b.ID, tpl.Digest, nil) // interleaved noise from another project
	}
	// Two sandboxes created in the same microsecond are ordered by ID.
	same := e.now()
	for i := 0; i < 2; i++ {
		sb, op := e.newSandbox(a.ID, tpl.Digest, nil)
		sb.CreatedAt, op.CreatedAt = same, same
		must(t, e.s.CreateSandbox(e.ctx, sb, policy.Spec{}, op, nil))
		want = append(want, sb)
	}
	sort.SliceStable(want, func(i, j int) bool {
		ci, cj := us(want[i].CreatedAt), us(want[j].CreatedAt)
		if !ci.Equal(cj) {
			return ci.Before(cj)
		}
		return want[i].ID < want[j].ID
	})
	for _, limit := range []int{1, 2, 3, 9, 10, 1000} {
		ids := e.listAll(store.SandboxQuery{ProjectID: a.ID, Limit: limit})
		if len(ids) != len(want) {
			t.Fatalf("limit %d: listed %d sandboxes, want %d", limit, len(ids), len(want))
		}
		for i := range want {
			if ids[i] != want[i].ID {
				t.Fatalf("limit %d: position %d is %s, want %s", limit, i, ids[i], want[i].ID)
			}
		}
	}
	// A full page that happens to end the listing has no Next.
	page, err := e.s.ListSandboxes(e.ctx, store.SandboxQuery{ProjectID: a.ID, Limit: len(want)})
	must(t, err)
	if page.Next != nil || len(page.Sandboxes) != len(want) {
		t.Fatalf("exact-size page: %d sandboxes, Next %+v", len(page.Sandboxes), page.Next)
	}
	checkSandbox(t, page.Sandboxes[0], want[0])
	// A project with nothing.
	page, err = e.s.ListSandboxes(e.ctx, store.SandboxQuery{ProjectID: model.NewProjectID(), Limit: 10})
	must(t, err)
	if len(page.Sandboxes) != 0 || page.Next != nil {
		t.Fatalf("unknown project lists %+v", page)
	}
}

func testListFilters(e *env) {
	t := e.t
	a, b := e.project(), e.project()
	tpl := e.template()
	type row struct {
		md    model.Metadata
		state model.SandboxState
	}
	rows := []row{
		{model.Metadata{"team": "ml", "env": "dev"}, model.StatePending},
		{model.Metadata{"team": "ml", "env": "prod"}, model.StateCreating},
		{model.Metadata{"team": "web", "env": "dev"}, model.StateCreating},
		{model.Metadata{"team": "ml"}, model.StateFailed},
		{nil, model.StatePending},
		{model.Metadata{"team": "ml", "env": "dev"}, model.StateCreating},
	}
	var ids []model.SandboxID
	for _, r := range rows {
		sb, _ := e.sandbox(a.ID, tpl.Digest, r.md)
		if r.state != model.StatePending {
			must(t, e.s.TransitionSandbox(e.ctx, sb.ID, model.StatePending, model.StateCreating, "", e.now()))
		}
		if r.state == model.StateFailed {
			must(t, e.s.TransitionSandbox(e.ctx, sb.ID, model.StateCreating, model.StateFailed, "boom", e.now()))
		}
		ids = append(ids, sb.ID)
	}
	e.sandbox(b.ID, tpl.Digest, model.Metadata{"team": "ml", "env": "dev"}) // never matches project a
	pick := func(idx ...int) []model.SandboxID {
		var out []model.SandboxID
		for _, i := range idx {
			out = append(out, ids[i])
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		states []model.SandboxState
		md     map[string]string
		want   []model.SandboxID
	}{
		{"all", nil, nil, pick(0, 1, 2, 3, 4, 5)},
		{"state pending", []model.SandboxState{model.StatePending}, nil, pick(0, 4)},
		{"states creating+failed", []model.SandboxState{model.StateCreating, model.StateFailed}, nil, pick(1, 2, 3, 5)},
		{"state running", []model.SandboxState{model.StateRunning}, nil, nil},
		{"team=ml", nil, map[string]string{"team": "ml"}, pick(0, 1, 3, 5)},
		{"team=ml env=dev", nil, map[string]string{"team": "ml", "env": "dev"}, pick(0, 5)},
		{"env=dev creating", []model.SandboxState{model.StateCreating}, map[string]string{"env": "dev"}, pick(2, 5)},
		{"value must match exactly", nil, map[string]string{"team": "m"}, nil},
		{"unknown key", nil, map[string]string{"owner": "x"}, nil},
	} {
		for _, limit := range []int{1, 2, 100} {
			got := e.listAll(store.SandboxQuery{ProjectID: a.ID, States: tc.states, Metadata: tc.md, Limit: limit})
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("%s (limit %d): got %v, want %v", tc.name, limit, got, tc.want)
			}
		}
	}
}

func testListLimit(e *env) {
	t := e.t
	a := e.project()
	for _, limit := range []int{-1, 0, 1001} {
		_, err := e.s.ListSandboxes(e.ctx, store.SandboxQuery{ProjectID: a.ID, Limit: limit})
		mustIs(t, err, model.ErrInvalid)
	}
	for _, limit := range []int{1, 1000} {
		_, err := e.s.ListSandboxes(e.ctx, store.SandboxQuery{ProjectID: a.ID, Limit: limit})
		must(t, err)
	}
}

func testListOnNode(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	n1, n2 := e.node(), e.node()
	on := func(node model.NodeID) model.Sandbox {
		sb, op := e.newSandbox(a.ID, tpl.Digest, nil)
		sb.NodeID = node
		must(t, e.s.CreateSandbox(e.ctx, sb, policy.Spec{}, op, nil))
		return sb
	}
	s1, s2, s3 := on(n1), on(n1), on(n2)
	unplaced := on("") // never placed
	checkSandbox(t, e.getSandbox(s1.ID), s1)
	checkSandbox(t, e.getSandbox(s3.ID), s3)
	checkSandbox(t, e.getSandbox(unplaced.ID), unplaced)

	// s2 goes all the way to deleted and drops out of the node's list.
	must(t, e.s.TransitionSandbox(e.ctx, s2.ID, model.StatePending, model.StateDeleting, "", e.now()))
	list, err := e.s.ListSandboxesOnNode(e.ctx, n1)
	must(t, err)
	if len(list) != 2 || list[0].ID != s1.ID || list[1].ID != s2.ID {
		t.Fatalf("ListSandboxesOnNode(n1) = %v, want [s1 s2]", list)
	}
	must(t, e.s.TransitionSandbox(e.ctx, s2.ID, model.StateDeleting, model.StateDeleted, "", e.now()))
	list, err = e.s.ListSandboxesOnNode(e.ctx, n1)
	must(t, err)
	if len(list) != 1 || list[0].ID != s1.ID {
		t.Fatalf("ListSandboxesOnNode(n1) = %v, want [s1]: deleted sandboxes are not listed", list)
	}
	list, err = e.s.ListSandboxesOnNode(e.ctx, e.node())
	must(t, err)
	if len(list) != 0 {
		t.Fatalf("unknown node lists %v", list)
	}
}
