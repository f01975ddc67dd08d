package storetest

import (
	"errors"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func templateTests() []namedTest {
	return []namedTest{
		{"TemplateDeleteTag", testTemplateDeleteTag},
		{"TemplateDelete", testTemplateDelete},
		{"TemplateGC", testTemplateGC},
		{"TemplateStates", testTemplateStates},
		{"TemplateGCRacesCreates", testTemplateGCRacesCreates},
		{"TemplateDeleteRacesCreates", testTemplateDeleteRacesCreates},
	}
}

// tn parses a tagged name or panics.
func tn(s string) model.TaggedName {
	n, err := model.ParseTaggedName(s)
	if err != nil {
		panic(err)
	}
	return n
}

func tns(ss ...string) []model.TaggedName {
	var out []model.TaggedName
	for _, s := range ss {
		out = append(out, tn(s))
	}
	return out
}

func (e *env) inUse(err error, digest model.TemplateDigest, n int, ids ...model.SandboxID) {
	e.t.Helper()
	var iu *store.TemplateInUseError
	if !errors.As(err, &iu) {
		e.t.Fatalf("error %v, want *store.TemplateInUseError", err)
	}
	if iu.Digest != digest || iu.Sandboxes != n || !reflect.DeepEqual(iu.Examples, ids) {
		e.t.Fatalf("in use error %+v, want %s used by %d %v", iu, digest, n, ids)
	}
}

func (e *env) deleteSandbox(sb model.Sandbox) {
	e.t.Helper()
	must(e.t, e.s.TransitionSandbox(e.ctx, sb.ID, sb.State, model.StateDeleting, "", e.now()))
	must(e.t, e.s.TransitionSandbox(e.ctx, sb.ID, model.StateDeleting, model.StateDeleted, "", e.now()))
}

func testTemplateDeleteTag(e *env) {
	t := e.t
	p := e.project()
	tpl := e.template()
	must(t, e.s.SetTemplateName(e.ctx, tn("py:3.12"), tpl.Digest, e.now()))
	must(t, e.s.SetTemplateName(e.ctx, tn("py"), tpl.Digest, e.now()))
	_, err := e.s.DeleteTemplateTag(e.ctx, tn("py:3.11"))
	mustIs(t, err, store.ErrNotFound)

	sb, _ := e.sandbox(p.ID, tpl.Digest, nil)
	_, err = e.s.DeleteTemplateTag(e.ctx, tn("py:3.12"))
	e.inUse(err, tpl.Digest, 1, sb.ID)
	other := e.template()
	e.sandbox(p.ID, other.Digest, nil)
	e.sandbox(p.ID, other.Digest, nil)
	all := store.AllProjects()
	if n, err := e.s.CountTemplateUsers(e.ctx, all, tpl.Digest); err != nil || !reflect.DeepEqual(n, map[model.TemplateDigest]int{tpl.Digest: 1}) {
		t.Fatalf("CountTemplateUsers = %v, %v; want 1", n, err)
	}
	if n, err := e.s.CountTemplateUsers(e.ctx, all); err != nil || !reflect.DeepEqual(n, map[model.TemplateDigest]int{tpl.Digest: 1, other.Digest: 2}) {
		t.Fatalf("CountTemplateUsers() = %v, %v", n, err)
	}
	// Scoped to a project: only its own sandboxes count.
	q := e.project()
	e.sandbox(q.ID, other.Digest, nil)
	if n, err := e.s.CountTemplateUsers(e.ctx, store.OnlyProject(q.ID)); err != nil || !reflect.DeepEqual(n, map[model.TemplateDigest]int{other.Digest: 1}) {
		t.Fatalf("CountTemplateUsers(project %s) = %v, %v; want only its own sandbox", q.ID, n, err)
	}
	if n, err := e.s.CountTemplateUsers(e.ctx, store.OnlyProject(p.ID), tpl.Digest, other.Digest); err != nil || !reflect.DeepEqual(n, map[model.TemplateDigest]int{tpl.Digest: 1, other.Digest: 2}) {
		t.Fatalf("CountTemplateUsers(project %s) = %v, %v", p.ID, n, err)
	}
	if _, err := e.s.CountTemplateUsers(e.ctx, store.Scope{}); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("CountTemplateUsers without a scope: %v, want ErrInvalid", err)
	}
	e.deleteSandbox(sb)
	if n, err := e.s.CountTemplateUsers(e.ctx, store.OnlyProject(p.ID), tpl.Digest, other.Digest); err != nil || !reflect.DeepEqual(n, map[model.TemplateDigest]int{other.Digest: 2}) {
		t.Fatalf("CountTemplateUsers = %v, %v; want none for %s", n, err, tpl.Digest)
	}
	d, err := e.s.DeleteTemplateTag(e.ctx, tn("py:3.12"))
	must(t, err)
	if d != tpl.Digest {
		t.Fatalf("DeleteTemplateTag = %s, want %s", d, tpl.Digest)
	}
	got, err := e.s.GetTemplate(e.ctx, tpl.Digest)
	must(t, err)
	if !reflect.DeepEqual(got.Names, tns("py:latest")) {
		t.Fatalf("tags after delete: %v", got.Names)
	}
	_, err = e.s.ResolveTemplate(e.ctx, model.RefByName(tn("py:3.12")))
	mustIs(t, err, store.ErrNotFound)
}

func testTemplateDelete(e *env) {
	t := e.t
	p := e.project()
	tpl, other := e.template(), e.template()
	must(t, e.s.SetTemplateName(e.ctx, tn("a:1"), tpl.Digest, e.now()))
	must(t, e.s.SetTemplateName(e.ctx, tn("a:2"), tpl.Digest, e.now()))
	must(t, e.s.SetTemplateName(e.ctx, tn("b"), other.Digest, e.now()))
	var sbs []model.Sandbox
	for i := 0; i < store.MaxInUseExamples+2; i++ {
		sb, _ := e.sandbox(p.ID, tpl.Digest, nil)
		sbs = append(sbs, sb)
	}
	_, err := e.s.DeleteTemplate(e.ctx, tpl.Digest, e.now())
	var iu *store.TemplateInUseError
	if !errors.As(err, &iu) || iu.Sandboxes != len(sbs) || len(iu.Examples) != store.MaxInUseExamples {
		t.Fatalf("DeleteTemplate while used: %v", err)
	}
	for _, sb := range sbs {
		e.deleteSandbox(sb)
	}
	removed, err := e.s.DeleteTemplate(e.ctx, tpl.Digest, e.now())
	must(t, err)
	if !reflect.DeepEqual(removed, tns("a:1", "a:2")) {
		t.Fatalf("DeleteTemplate removed tags %v", removed)
	}
	// Tombstoned: invisible, not usable, not deletable twice.
	_, err = e.s.GetTemplate(e.ctx, tpl.Digest)
	mustIs(t, err, store.ErrNotFound)
	_, err = e.s.ResolveTemplate(e.ctx, model.RefByName(tn("a:1")))
	mustIs(t, err, store.ErrNotFound)
	_, err = e.s.DeleteTemplate(e.ctx, tpl.Digest, e.now())
	mustIs(t, err, store.ErrNotFound)
	mustIs(t, e.s.SetTemplateName(e.ctx, tn("a:3"), tpl.Digest, e.now()), store.ErrNotFound)
	sb, op := e.newSandbox(p.ID, tpl.Digest, nil)
	mustIs(t, e.s.CreateSandbox(e.ctx, sb, policy.Spec{}, op, nil), store.ErrNotFound)
	list, err := e.s.ListTemplates(e.ctx)
	must(t, err)
	if len(list) != 1 || list[0].Digest != other.Digest {
		t.Fatalf("ListTemplates after delete = %+v", list)
	}
	if st, err := e.s.TemplateState(e.ctx, tpl.Digest); err != nil || st != store.TemplateTombstoned {
		t.Fatalf("TemplateState = %v, %v", st, err)
	}
	// The deleted sandboxes still read back with their template.
	if got := e.getSandbox(sbs[0].ID); got.Template != tpl.Digest {
		t.Fatalf("deleted sandbox's template = %s", got.Template)
	}
	// A new import of the same digest brings it back, with its new time.
	again := tpl
	again.CreatedAt = e.now()
	must(t, e.s.PutTemplate(e.ctx, again))
	got, err := e.s.GetTemplate(e.ctx, tpl.Digest)
	must(t, err)
	if !got.CreatedAt.Equal(us(again.CreatedAt)) || len(got.Names) != 0 {
		t.Fatalf("re-imported template = %+v", got)
	}
	e.sandbox(p.ID, tpl.Digest, nil)
	if st, err := e.s.TemplateState(e.ctx, model.DigestFromSHA256([32]byte{9})); err != nil || st != store.TemplateAbsent {
		t.Fatalf("TemplateState of an unknown digest = %v, %v", st, err)
	}
}

func testTemplateGC(e *env) {
	t := e.t
	p := e.project()
	tagged, used, unused, wasUsed := e.template(), e.template(), e.template(), e.template()
	must(t, e.s.SetTemplateName(e.ctx, tn("keep"), tagged.Digest, e.now()))
	e.sandbox(p.ID, used.Digest, nil)
	gone, _ := e.sandbox(p.ID, wasUsed.Digest, nil)
	e.deleteSandbox(gone)

	got, err := e.s.TemplateGCCandidates(e.ctx, time.Time{})
	must(t, err)
	want := []model.TemplateDigest{unused.Digest, wasUsed.Digest}
	if want[0] > want[1] {
		want[0], want[1] = want[1], want[0]
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("TemplateGCCandidates = %v, want %v", got, want)
	}
	// Only the older one, created before wasUsed.
	got, err = e.s.TemplateGCCandidates(e.ctx, wasUsed.CreatedAt)
	must(t, err)
	if !reflect.DeepEqual(got, []model.TemplateDigest{unused.Digest}) {
		t.Fatalf("TemplateGCCandidates(created before %s) = %v, want [%s]", wasUsed.CreatedAt, got, unused.Digest)
	}
	for _, d := range []model.TemplateDigest{tagged.Digest, used.Digest} {
		if ok, err := e.s.TombstoneTemplate(e.ctx, d, e.now()); err != nil || ok {
			t.Fatalf("TombstoneTemplate of a used template = %v, %v", ok, err)
		}
	}
	for _, d := range want {
		if ok, err := e.s.TombstoneTemplate(e.ctx, d, e.now()); err != nil || !ok {
			t.Fatalf("TombstoneTemplate(%s) = %v, %v", d, ok, err)
		}
		if ok, err := e.s.TombstoneTemplate(e.ctx, d, e.now()); err != nil || ok {
			t.Fatalf("TombstoneTemplate twice = %v, %v", ok, err)
		}
	}
	if got, err := e.s.TemplateGCCandidates(e.ctx, time.Time{}); err != nil || len(got) != 0 {
		t.Fatalf("TemplateGCCandidates after GC = %v, %v", got, err)
	}
	if ok, err := e.s.TombstoneTemplate(e.ctx, model.DigestFromSHA256([32]byte{7}), e.now()); err != nil || ok {
		t.Fatalf("TombstoneTemplate of an unknown digest = %v, %v", ok, err)
	}
}

// testTemplateGCRacesCreates: goroutines create sandboxes from (and tag)
// templates that are unused when the run starts while the collector runs
// over and over. No sandbox or tag may ever reference a tombstoned
// template, and every create either succeeds on a live template or is
// refused with ErrNotFound.
func testTemplateGCRacesCreates(e *env) {
	t := e.t
	p := e.project()
	const templates, creators, rounds = 4, 6, 8
	var tpls []model.Template
	for i := 0; i < templates; i++ {
		tpls = append(tpls, e.template())
	}
	// Build every sandbox and op up front: env's clock is not safe for
	// concurrent use.
	type create struct {
		sb model.Sandbox
		op model.Operation
	}
	plan := make([][]create, creators)
	for i := range plan {
		for r := 0; r < rounds; r++ {
			sb, op := e.newSandbox(p.ID, tpls[(i+r)%templates].Digest, nil)
			plan[i] = append(plan[i], create{sb, op})
		}
	}
	now := e.now()
	var (
		created    sync.Map // sandbox ID → template digest
		refused    atomic.Int64
		tombstoned atomic.Int64
		stop       = make(chan struct{})
		gcDone     = make(chan struct{})
	)
	go func() {
		defer close(gcDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			cands, err := e.s.TemplateGCCandidates(e.ctx, time.Time{})
			if err != nil {
				t.Errorf("TemplateGCCandidates: %v", err)
				return
			}
			for _, d := range cands {
				ok, err := e.s.TombstoneTemplate(e.ctx, d, now)
				if err != nil {
					t.Errorf("TombstoneTemplate: %v", err)
					return
				}
				if ok {
					tombstoned.Add(1)
					// Before it comes back: no live sandbox may use it.
					if users, err := e.s.CountTemplateUsers(e.ctx, store.AllProjects(), d); err != nil {
						t.Errorf("CountTemplateUsers: %v", err)
						return
					} else if users[d] > 0 {
						t.Errorf("template %s was tombstoned while %d live sandboxes use it", d, users[d])
					}
					// Bring it back, as a new import would, so the race goes on.
					if err := e.s.PutTemplate(e.ctx, model.Template{Digest: d, SizeBytes: 1, Manifest: []byte("m"), CreatedAt: now}); err != nil {
						t.Errorf("PutTemplate: %v", err)
						return
					}
				}
			}
		}
	}()
	parallel(creators, func(i int) {
		for _, c := range plan[i] {
			err := e.s.CreateSandbox(e.ctx, c.sb, policy.Spec{}, c.op, nil)
			switch {
			case err == nil:
				created.Store(c.sb.ID, c.sb.Template)
				if st, err := e.s.TemplateState(e.ctx, c.sb.Template); err != nil || st != store.TemplateLive {
					t.Errorf("template %s of new sandbox %s is %v, %v", c.sb.Template, c.sb.ID, st, err)
				}
				// Let the template go again so the collector keeps racing.
				if err := e.s.TransitionSandbox(e.ctx, c.sb.ID, model.StatePending, model.StateDeleting, "", now); err != nil {
					t.Errorf("delete %s: %v", c.sb.ID, err)
				}
				if err := e.s.TransitionSandbox(e.ctx, c.sb.ID, model.StateDeleting, model.StateDeleted, "", now); err != nil {
					t.Errorf("delete %s: %v", c.sb.ID, err)
				}
			case errors.Is(err, store.ErrNotFound):
				refused.Add(1)
			default:
				t.Errorf("CreateSandbox: %v", err)
			}
		}
	})
	close(stop)
	<-gcDone
	n := 0
	created.Range(func(_, _ any) bool { n++; return true })
	if n+int(refused.Load()) != creators*rounds {
		t.Fatalf("%d created + %d refused, want %d", n, refused.Load(), creators*rounds)
	}
	t.Logf("%d creates succeeded, %d refused on a tombstoned template, %d tombstones", n, refused.Load(), tombstoned.Load())
}

// testTemplateDeleteRacesCreates: DeleteTemplate and creates race on one
// template; either the delete is refused as in use, or every create that
// succeeded came before it and was deleted first — never a live sandbox on
// a tombstoned template.
func testTemplateDeleteRacesCreates(e *env) {
	t := e.t
	p := e.project()
	for round := 0; round < 5; round++ {
		tpl := e.template()
		const n = 6
		var sbs []model.Sandbox
		var ops []model.Operation
		for i := 0; i < n; i++ {
			sb, op := e.newSandbox(p.ID, tpl.Digest, nil)
			sbs, ops = append(sbs, sb), append(ops, op)
		}
		now := e.now()
		var deleted atomic.Bool
		ok := make([]bool, n)
		parallel(n+1, func(i int) {
			if i == n {
				_, err := e.s.DeleteTemplate(e.ctx, tpl.Digest, now)
				var iu *store.TemplateInUseError
				switch {
				case err == nil:
					deleted.Store(true)
				case errors.As(err, &iu):
				default:
					t.Errorf("DeleteTemplate: %v", err)
				}
				return
			}
			err := e.s.CreateSandbox(e.ctx, sbs[i], policy.Spec{}, ops[i], nil)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				t.Errorf("CreateSandbox: %v", err)
			}
			ok[i] = err == nil
		})
		live := 0
		for i, sb := range sbs {
			if ok[i] {
				live++
				e.deleteSandbox(e.getSandbox(sb.ID))
			}
		}
		if deleted.Load() && live > 0 {
			t.Fatalf("round %d: the template was deleted while %d sandboxes were created from it", round, live)
		}
	}
}

// testTemplateStates: one call answers for many digests, past a query's
// batch, as TemplateState would for each.
func testTemplateStates(e *env) {
	t := e.t
	got, err := e.s.TemplateStates(e.ctx, nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("TemplateStates(nil) = %v, %v", got, err)
	}
	live, gone := e.template(), e.template()
	_, err = e.s.DeleteTemplate(e.ctx, gone.Digest, e.now())
	must(t, err)
	want := map[model.TemplateDigest]store.TemplateRowState{live.Digest: store.TemplateLive, gone.Digest: store.TemplateTombstoned}
	digests := []model.TemplateDigest{live.Digest}
	for i := range 1100 {
		d := model.DigestFromSHA256([32]byte{0xfe, byte(i >> 8), byte(i)})
		want[d] = store.TemplateAbsent
		digests = append(digests, d)
	}
	digests = append(digests, gone.Digest, live.Digest) // last batch; a repeat
	got, err = e.s.TemplateStates(e.ctx, digests)
	must(t, err)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("TemplateStates: %d entries, want %d; live %v, tombstoned %v", len(got), len(want), got[live.Digest], got[gone.Digest])
	}
	for _, d := range []model.TemplateDigest{live.Digest, gone.Digest, digests[1]} {
		if one, err := e.s.TemplateState(e.ctx, d); err != nil || one != got[d] {
			t.Fatalf("TemplateState(%s) = %v, %v; TemplateStates said %v", d, one, err, got[d])
		}
	}
}
