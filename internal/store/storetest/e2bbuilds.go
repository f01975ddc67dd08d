package storetest

import (
	"reflect"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func e2bBuildTests() []namedTest {
	return []namedTest{
		{"E2BBuildLifecycle", testE2BBuildLifecycle},
		{"E2BBuildOtherProjectIsAbsent", testE2BBuildOtherProject},
		{"E2BBuildStartingFailedByReconciler", testE2BBuildStartingFailed},
	}
}

func (e *env) newE2BBuild(p model.ProjectID) model.E2BBuild {
	e.t.Helper()
	name, err := model.ParseTaggedName("my-tpl:v1")
	must(e.t, err)
	b := model.E2BBuild{
		ID: model.NewE2BBuildID(), ProjectID: p, TemplateID: "my-tpl", Name: name,
		Tags: []model.TemplateTag{"v2", "stable"}, Status: model.E2BBuildWaiting, CreatedAt: e.now(),
	}
	must(e.t, e.s.CreateE2BBuild(e.ctx, b))
	return b
}

func testE2BBuildLifecycle(e *env) {
	t := e.t
	p := e.project()
	b := e.newE2BBuild(p.ID)
	got, err := e.s.GetE2BBuild(e.ctx, p.ID, b.ID)
	must(t, err)
	want := b
	want.CreatedAt, want.UpdatedAt = us(b.CreatedAt), us(b.CreatedAt)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("GetE2BBuild = %+v, want %+v", got, want)
	}
	// An ID in use, an unknown project and a build that is not new are refused.
	mustIs(t, e.s.CreateE2BBuild(e.ctx, b), store.ErrAlreadyExists)
	orphan := b
	orphan.ID, orphan.ProjectID = model.NewE2BBuildID(), model.NewProjectID()
	mustIs(t, e.s.CreateE2BBuild(e.ctx, orphan), store.ErrNotFound)
	started := b
	started.ID, started.Status = model.NewE2BBuildID(), model.E2BBuildBuilding
	mustIs(t, e.s.CreateE2BBuild(e.ctx, started), model.ErrInvalid)

	// Native before starting: refused, nothing written.
	mustIs(t, e.s.SetE2BBuildNative(e.ctx, b.ID, model.NewBuildID(), e.now()), store.ErrStateChanged)
	node := e.node()
	files := []string{"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
	at := e.now()
	got, err = e.s.StartE2BBuild(e.ctx, p.ID, b.ID, node, files, at)
	must(t, err)
	if got.Status != model.E2BBuildStarting || got.Node != node || !reflect.DeepEqual(got.Files, files) || !got.UpdatedAt.Equal(us(at)) {
		t.Fatalf("started = %+v", got)
	}
	// A second start is refused: one native build per E2B build.
	_, err = e.s.StartE2BBuild(e.ctx, p.ID, b.ID, node, nil, e.now())
	mustIs(t, err, store.ErrStateChanged)
	native := model.NewBuildID()
	must(t, e.s.SetE2BBuildNative(e.ctx, b.ID, native, e.now()))
	mustIs(t, e.s.SetE2BBuildNative(e.ctx, b.ID, model.NewBuildID(), e.now()), store.ErrStateChanged)
	// A fromImage's pull, then its steps: the native build is replaced
	// once, from the one it is on.
	pull := native
	native = model.NewBuildID()
	mustIs(t, e.s.ReplaceE2BBuildNative(e.ctx, b.ID, model.NewBuildID(), native, e.now()), store.ErrStateChanged)
	must(t, e.s.ReplaceE2BBuildNative(e.ctx, b.ID, pull, native, e.now()))
	mustIs(t, e.s.ReplaceE2BBuildNative(e.ctx, b.ID, pull, model.NewBuildID(), e.now()), store.ErrStateChanged)
	mustIs(t, e.s.EndE2BBuild(e.ctx, b.ID, model.E2BBuildBuilding, "", e.now()), model.ErrInvalid)
	must(t, e.s.EndE2BBuild(e.ctx, b.ID, model.E2BBuildReady, "", e.now()))
	mustIs(t, e.s.EndE2BBuild(e.ctx, b.ID, model.E2BBuildError, "late", e.now()), store.ErrStateChanged)
	mustIs(t, e.s.ReplaceE2BBuildNative(e.ctx, b.ID, native, model.NewBuildID(), e.now()), store.ErrStateChanged) // ended
	got, err = e.s.GetE2BBuild(e.ctx, p.ID, b.ID)
	must(t, err)
	if got.Status != model.E2BBuildReady || got.Native != native || got.Reason != "" {
		t.Fatalf("ended = %+v", got)
	}
	mustIs(t, e.s.EndE2BBuild(e.ctx, model.NewE2BBuildID(), model.E2BBuildError, "x", e.now()), store.ErrNotFound)

	// Pruning removes what was last written before the cutoff only.
	fresh := e.newE2BBuild(p.ID)
	n, err := e.s.PruneE2BBuilds(e.ctx, fresh.CreatedAt)
	must(t, err)
	if n < 1 {
		t.Fatalf("PruneE2BBuilds removed %d", n)
	}
	_, err = e.s.GetE2BBuild(e.ctx, p.ID, b.ID)
	mustIs(t, err, store.ErrNotFound)
	_, err = e.s.GetE2BBuild(e.ctx, p.ID, fresh.ID)
	must(t, err)
}

// testE2BBuildOtherProject: another project's build is absent to every
// call that names a project.
func testE2BBuildOtherProject(e *env) {
	t := e.t
	a, b := e.project(), e.project()
	build := e.newE2BBuild(a.ID)
	_, err := e.s.GetE2BBuild(e.ctx, b.ID, build.ID)
	mustIs(t, err, store.ErrNotFound)
	_, err = e.s.StartE2BBuild(e.ctx, b.ID, build.ID, e.node(), nil, e.now())
	mustIs(t, err, store.ErrNotFound)
	got, err := e.s.GetE2BBuild(e.ctx, a.ID, build.ID)
	must(t, err)
	if got.Status != model.E2BBuildWaiting || got.Node != "" {
		t.Fatalf("another project's start changed the build: %+v", got)
	}
}

// testE2BBuildStartingFailed: a build left starting ends in error, by its
// node's restart at once or by anyone after the grace; a build that is
// building or waiting is left alone.
func testE2BBuildStartingFailed(e *env) {
	t := e.t
	p := e.project()
	mine, other := e.node(), model.NewNodeID()
	start := func() model.E2BBuild {
		b := e.newE2BBuild(p.ID)
		_, err := e.s.StartE2BBuild(e.ctx, p.ID, b.ID, mine, nil, e.now())
		must(t, err)
		return b
	}
	s1, s2 := start(), start()
	building := start()
	must(t, e.s.SetE2BBuildNative(e.ctx, building.ID, model.NewBuildID(), e.now()))
	waiting := e.newE2BBuild(p.ID)
	cutoff := e.now()
	// Another node's restart leaves ours alone.
	n, err := e.s.FailStartingE2BBuilds(e.ctx, other, cutoff, "restart", e.now())
	must(t, err)
	if n != 0 {
		t.Fatalf("another node's reconcile ended %d builds", n)
	}
	n, err = e.s.FailStartingE2BBuilds(e.ctx, "", s1.CreatedAt, "grace", e.now())
	must(t, err)
	if n != 0 {
		t.Fatalf("a cutoff before every start ended %d builds", n)
	}
	n, err = e.s.FailStartingE2BBuilds(e.ctx, mine, cutoff, "the server restarted", e.now())
	must(t, err)
	if n != 2 {
		t.Fatalf("FailStartingE2BBuilds = %d, want 2", n)
	}
	for _, b := range []model.E2BBuild{s1, s2} {
		got, err := e.s.GetE2BBuild(e.ctx, p.ID, b.ID)
		must(t, err)
		if got.Status != model.E2BBuildError || got.Reason != "the server restarted" {
			t.Fatalf("left starting: %+v", got)
		}
	}
	for _, b := range []struct {
		id   model.E2BBuildID
		want model.E2BBuildStatus
	}{{building.ID, model.E2BBuildBuilding}, {waiting.ID, model.E2BBuildWaiting}} {
		got, err := e.s.GetE2BBuild(e.ctx, p.ID, b.id)
		must(t, err)
		if got.Status != b.want {
			t.Fatalf("%s: %s, want %s", b.id, got.Status, b.want)
		}
	}
}
