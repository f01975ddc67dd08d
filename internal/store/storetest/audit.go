package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"sync"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func auditTests() []namedTest {
	return []namedTest{
		{"Audit/AppendAndList", testAuditAppendList},
		{"Audit/Filters", testAuditFilters},
		{"Audit/Paging", testAuditPaging},
		{"Audit/ConcurrentIDs", testAuditConcurrentIDs},
		{"Audit/Purge", testAuditPurge},
		{"Audit/Invalid", testAuditInvalid},
	}
}

func (e *env) appendAudit(a store.AuditEntry) store.AuditEntry {
	e.t.Helper()
	if a.At.IsZero() {
		a.At = e.now()
	}
	if a.Method == "" {
		a.Method, a.Route = "POST", "/v1/sandboxes/{id}/pause"
	}
	a.Action = a.Method + " " + a.Route
	id, err := e.s.AppendAudit(e.ctx, a)
	if err != nil {
		e.t.Fatalf("AppendAudit: %v", err)
	}
	a.ID = id
	a.At = us(a.At)
	if a.PathValues == nil {
		a.PathValues = map[string]string{}
	}
	return a
}

func (e *env) listAudit(q store.AuditQuery) store.AuditPage {
	e.t.Helper()
	if q.Limit == 0 {
		q.Limit = 100
	}
	p, err := e.s.ListAudit(e.ctx, q)
	if err != nil {
		e.t.Fatalf("ListAudit(%+v): %v", q, err)
	}
	return p
}

func auditIDs(es []store.AuditEntry) []int64 {
	out := []int64{}
	for _, a := range es {
		out = append(out, a.ID)
	}
	return out
}

func testAuditAppendAndListOne(e *env) (store.AuditEntry, store.AuditEntry) {
	prj := e.project()
	sb := model.NewSandboxID()
	key := model.NewAPIKeyID()
	a := e.appendAudit(store.AuditEntry{
		RequestID: "req_1", KeyID: key, Project: prj.ID, Method: "POST", Route: "/v1/sandboxes/{id}/processes/{process_id}/signal",
		ResourceKind: "process", ResourceID: "proc_x", PathValues: map[string]string{"id": sb.String(), "process_id": "proc_x"},
		Sandbox: sb, Status: 404, ErrorCode: "not_found",
	})
	b := e.appendAudit(store.AuditEntry{
		RequestID: "req_2", Project: prj.ID, TokenSandbox: sb, Method: "POST", Route: "/v1/sandboxes",
		ResourceKind: "sandbox", CreatedID: "sbx_new", Status: 202,
	})
	return a, b
}

func testAuditAppendList(e *env) {
	a, b := testAuditAppendAndListOne(e)
	if b.ID <= a.ID {
		e.t.Fatalf("ids not ascending: %d then %d", a.ID, b.ID)
	}
	got := e.listAudit(store.AuditQuery{})
	want := []store.AuditEntry{b, a}
	if !reflect.DeepEqual(got.Entries, want) || got.Next != 0 {
		e.t.Fatalf("ListAudit = %+v\nwant %+v", got, want)
	}
	if got.Entries[0].At.Location().String() != "UTC" {
		e.t.Fatalf("time not in UTC: %v", got.Entries[0].At)
	}
}

func testAuditFilters(e *env) {
	p1, p2 := e.project(), e.project()
	k1, k2 := model.NewAPIKeyID(), model.NewAPIKeyID()
	sb1, sb2 := model.NewSandboxID(), model.NewSandboxID()
	t0 := e.now()
	a := e.appendAudit(store.AuditEntry{KeyID: k1, Project: p1.ID, Method: "POST", Route: "/v1/sandboxes/{id}/pause",
		ResourceKind: "sandbox", ResourceID: sb1.String(), Sandbox: sb1, Status: 202})
	b := e.appendAudit(store.AuditEntry{KeyID: k2, Project: p2.ID, Method: "DELETE", Route: "/v1/sandboxes/{id}",
		ResourceKind: "sandbox", ResourceID: sb2.String(), Sandbox: sb2, Status: 409, ErrorCode: "invalid_state"})
	t1 := e.now()
	c := e.appendAudit(store.AuditEntry{Project: p1.ID, TokenSandbox: sb2, Method: "POST", Route: "/v1/sandboxes/{id}/process_x",
		ResourceKind: "sandbox", ResourceID: sb2.String(), Sandbox: sb2, Status: 201})
	d := e.appendAudit(store.AuditEntry{KeyID: k1, Project: p1.ID, Method: "POST", Route: "/v1/sandboxes",
		ResourceKind: "sandbox", CreatedID: sb1.String(), Sandbox: sb1, Status: 202})
	for _, tc := range []struct {
		name string
		q    store.AuditQuery
		want []store.AuditEntry
	}{
		{"project", store.AuditQuery{Project: p1.ID}, []store.AuditEntry{d, c, a}},
		{"key", store.AuditQuery{Key: k2}, []store.AuditEntry{b}},
		{"action exact", store.AuditQuery{ActionPrefix: "POST /v1/sandboxes/{id}/pause"}, []store.AuditEntry{a}},
		{"action method", store.AuditQuery{ActionPrefix: "DELETE"}, []store.AuditEntry{b}},
		{"action prefix", store.AuditQuery{ActionPrefix: "POST /v1/sandboxes/"}, []store.AuditEntry{c, a}},
		// '_' and '%' are not wildcards.
		{"action literal", store.AuditQuery{ActionPrefix: "POST /v1/sandboxes/{id}/process%"}, []store.AuditEntry{}},
		{"action underscore", store.AuditQuery{ActionPrefix: "POST /v1/sandboxes/{id}/process_"}, []store.AuditEntry{c}},
		{"resource id", store.AuditQuery{Resource: sb2.String()}, []store.AuditEntry{c, b}},
		{"resource created", store.AuditQuery{Resource: sb1.String()}, []store.AuditEntry{d, a}},
		{"sandbox and token", store.AuditQuery{Sandbox: sb2}, []store.AuditEntry{c, b}},
		{"ok", store.AuditQuery{Result: store.AuditResult{OK: true}}, []store.AuditEntry{d, c, a}},
		{"error", store.AuditQuery{Result: store.AuditResult{Error: true}}, []store.AuditEntry{b}},
		{"status", store.AuditQuery{Result: store.AuditResult{Status: 201}}, []store.AuditEntry{c}},
		{"since", store.AuditQuery{Since: t1}, []store.AuditEntry{d, c}},
		{"until", store.AuditQuery{Since: t0, Until: t1}, []store.AuditEntry{b, a}},
		{"since exact", store.AuditQuery{Since: a.At, Until: b.At}, []store.AuditEntry{a}},
		{"combined", store.AuditQuery{Project: p1.ID, Key: k1, ActionPrefix: "POST", Result: store.AuditResult{OK: true}}, []store.AuditEntry{d, a}},
		{"none", store.AuditQuery{Project: p2.ID, Result: store.AuditResult{OK: true}}, []store.AuditEntry{}},
	} {
		got := e.listAudit(tc.q)
		if !reflect.DeepEqual(auditIDs(got.Entries), auditIDs(tc.want)) {
			e.t.Errorf("%s: ListAudit = %v, want %v", tc.name, auditIDs(got.Entries), auditIDs(tc.want))
		}
	}
}

func testAuditPaging(e *env) {
	prj := e.project()
	var all []store.AuditEntry
	for i := range 7 {
		all = append(all, e.appendAudit(store.AuditEntry{Project: prj.ID, RequestID: fmt.Sprint(i), Status: 200}))
	}
	var got []store.AuditEntry
	q := store.AuditQuery{Limit: 3}
	pages := 0
	for {
		p := e.listAudit(q)
		pages++
		got = append(got, p.Entries...)
		if p.Next == 0 {
			break
		}
		if len(p.Entries) != 3 {
			e.t.Fatalf("a page before the last has %d entries", len(p.Entries))
		}
		q.Before = p.Next
	}
	if pages != 3 || len(got) != 7 {
		e.t.Fatalf("%d pages, %d entries; want 3 and 7", pages, len(got))
	}
	for i := range got {
		if got[i].ID != all[len(all)-1-i].ID {
			e.t.Fatalf("page order %v, want newest first of %v", auditIDs(got), auditIDs(all))
		}
	}
	// An exact multiple of the limit has no empty last page.
	if p := e.listAudit(store.AuditQuery{Limit: 7}); p.Next != 0 || len(p.Entries) != 7 {
		e.t.Fatalf("limit 7 of 7: next %d, %d entries", p.Next, len(p.Entries))
	}
}

func testAuditConcurrentIDs(e *env) {
	prj := e.project()
	const n = 20
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ids  = map[int64]bool{}
		errs []error
	)
	at := e.now()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := e.s.AppendAudit(e.ctx, store.AuditEntry{At: at, Project: prj.ID, Method: "POST", Route: "/x", Action: "POST /x", Status: 200})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			ids[id] = true
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		e.t.Fatal(err)
	}
	if len(ids) != n || len(e.listAudit(store.AuditQuery{}).Entries) != n {
		e.t.Fatalf("%d distinct ids of %d appends", len(ids), n)
	}
}

func testAuditPurge(e *env) {
	prj := e.project()
	old1 := e.appendAudit(store.AuditEntry{Project: prj.ID, Status: 200})
	old2 := e.appendAudit(store.AuditEntry{Project: prj.ID, Status: 200})
	old3 := e.appendAudit(store.AuditEntry{Project: prj.ID, Status: 200})
	bound := e.now()
	keep := e.appendAudit(store.AuditEntry{Project: prj.ID, Status: 200})
	n, err := e.s.PurgeAudit(e.ctx, bound, 2)
	if err != nil || n != 2 {
		e.t.Fatalf("PurgeAudit(limit 2) = %d, %v; want 2", n, err)
	}
	if got := auditIDs(e.listAudit(store.AuditQuery{}).Entries); !reflect.DeepEqual(got, []int64{keep.ID, old3.ID}) {
		e.t.Fatalf("after the first purge: %v, want the newest old entry and the kept one (purged %d, %d oldest first)", got, old1.ID, old2.ID)
	}
	if n, err := e.s.PurgeAudit(e.ctx, bound, 2); err != nil || n != 1 {
		e.t.Fatalf("second PurgeAudit = %d, %v; want 1", n, err)
	}
	if n, err := e.s.PurgeAudit(e.ctx, bound, 2); err != nil || n != 0 {
		e.t.Fatalf("third PurgeAudit = %d, %v; want 0", n, err)
	}
	// Ids are never reused after a purge.
	next := e.appendAudit(store.AuditEntry{Project: prj.ID, Status: 200})
	if next.ID <= keep.ID {
		e.t.Fatalf("id %d after purge is not above %d", next.ID, keep.ID)
	}
	if got := auditIDs(e.listAudit(store.AuditQuery{}).Entries); !reflect.DeepEqual(got, []int64{next.ID, keep.ID}) {
		e.t.Fatalf("after purges: %v", got)
	}
}

func testAuditInvalid(e *env) {
	for _, l := range []int{0, -1, 1001} {
		if _, err := e.s.ListAudit(e.ctx, store.AuditQuery{Limit: l}); !errors.Is(err, model.ErrInvalid) {
			e.t.Errorf("ListAudit(limit %d) = %v, want ErrInvalid", l, err)
		}
	}
	for _, l := range []int{0, 10001} {
		if _, err := e.s.PurgeAudit(e.ctx, e.now(), l); !errors.Is(err, model.ErrInvalid) {
			e.t.Errorf("PurgeAudit(limit %d) = %v, want ErrInvalid", l, err)
		}
	}
}
