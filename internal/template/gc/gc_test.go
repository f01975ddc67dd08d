package gc

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/store/sqlite"
	"github.com/airlockdev/airlock/internal/template"
)

type fixture struct {
	t     *testing.T
	ctx   context.Context
	st    *sqlite.Store
	trees *template.Store
	now   time.Time
}

func newFixture(t *testing.T) *fixture {
	airtest.RequireRoot(t) // imports keep ownership
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "db.sqlite"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	trees, err := template.Open(filepath.Join(dir, "templates"), nil)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, ctx: ctx, st: st, trees: trees, now: time.Now()}
}

// tree imports a one-file tree; record also stores its row.
func (f *fixture) tree(content string, record bool) model.TemplateDigest {
	f.t.Helper()
	src := f.t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
	imp, err := f.trees.ImportDir(f.ctx, src, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	if record {
		if err := f.st.PutTemplate(f.ctx, model.Template{Digest: imp.Digest, SizeBytes: imp.SizeBytes, Manifest: imp.Manifest, CreatedAt: f.now}); err != nil {
			f.t.Fatal(err)
		}
	}
	return imp.Digest
}

func (f *fixture) collector(grace time.Duration, now time.Time, keep ...model.TemplateDigest) *Collector {
	c, err := New(Config{Store: f.st, Trees: f.trees, Grace: grace, Now: func() time.Time { return now },
		Keep: func(context.Context) (map[model.TemplateDigest]bool, error) {
			m := map[model.TemplateDigest]bool{}
			for _, d := range keep {
				m[d] = true
			}
			return m, nil
		}})
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

func TestCollect(t *testing.T) {
	f := newFixture(t)
	tagged, used, unused, kept, orphan := f.tree("tagged", true), f.tree("used", true), f.tree("unused", true), f.tree("kept", true), f.tree("orphan", false)
	if err := f.st.SetTemplateName(f.ctx, model.DefaultTemplate, tagged, f.now); err != nil {
		t.Fatal(err)
	}
	p := model.Project{ID: model.NewProjectID(), Name: "p", CreatedAt: f.now}
	if err := f.st.CreateProject(f.ctx, p); err != nil {
		t.Fatal(err)
	}
	sb := model.Sandbox{ID: model.NewSandboxID(), ProjectID: p.ID, Template: used, Resources: model.DefaultResources(),
		State: model.StatePending, CreatedAt: f.now, UpdatedAt: f.now}
	op := model.Operation{ID: model.NewOperationID(), ProjectID: p.ID, SandboxID: sb.ID, Kind: model.OpCreate,
		State: model.OpPending, CreatedAt: f.now, UpdatedAt: f.now}
	if err := f.st.CreateSandbox(f.ctx, sb, policy.Spec{}, op, nil); err != nil {
		t.Fatal(err)
	}

	// An import in progress holds the trees.
	release, err := f.trees.Guard(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.collector(time.Hour, f.now, kept).Collect(f.ctx)
	release()
	if err != nil || !reflect.DeepEqual(res.Collected, []model.TemplateDigest{unused}) || len(res.TreesRemoved) != 0 || !res.Busy {
		t.Fatalf("Collect under a guard = %+v, %v", res, err)
	}
	if !f.trees.Has(unused) {
		t.Fatal("tree removed under a guard")
	}
	// Then the tombstoned tree goes; the young orphan stays.
	res, err = f.collector(time.Hour, f.now, kept).Collect(f.ctx)
	if err != nil || len(res.Collected) != 0 || !reflect.DeepEqual(res.TreesRemoved, []model.TemplateDigest{unused}) || res.Busy {
		t.Fatalf("Collect = %+v, %v", res, err)
	}
	if f.trees.Has(unused) || !f.trees.Has(orphan) || !f.trees.Has(tagged) || !f.trees.Has(used) || !f.trees.Has(kept) {
		t.Fatal("wrong trees removed")
	}
	// An old orphan goes; kept stays while the hook holds it.
	res, err = f.collector(time.Hour, f.now.Add(2*time.Hour), kept).Collect(f.ctx)
	if err != nil || len(res.Collected) != 0 || !reflect.DeepEqual(res.TreesRemoved, []model.TemplateDigest{orphan}) {
		t.Fatalf("Collect later = %+v, %v", res, err)
	}
	res, err = f.collector(time.Hour, f.now).Collect(f.ctx)
	if err != nil || !reflect.DeepEqual(res.Collected, []model.TemplateDigest{kept}) || !reflect.DeepEqual(res.TreesRemoved, []model.TemplateDigest{kept}) {
		t.Fatalf("Collect without the hook = %+v, %v", res, err)
	}

	// Deleting a template after its sandbox is gone: RemoveDeleted takes the tree.
	if _, err := f.st.DeleteTemplate(f.ctx, used, f.now); err == nil {
		t.Fatal("DeleteTemplate of a used template succeeded")
	}
	for _, step := range [][2]model.SandboxState{{model.StatePending, model.StateDeleting}, {model.StateDeleting, model.StateDeleted}} {
		if err := f.st.TransitionSandbox(f.ctx, sb.ID, step[0], step[1], "", f.now); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.st.DeleteTemplate(f.ctx, used, f.now); err != nil {
		t.Fatal(err)
	}
	if err := f.collector(time.Hour, f.now).RemoveDeleted(f.ctx, used); err != nil || f.trees.Has(used) {
		t.Fatalf("RemoveDeleted: %v (tree there: %v)", err, f.trees.Has(used))
	}
	// Re-importing brings it back as a live template with its tree.
	again := f.tree("used", true)
	if st, err := f.st.TemplateState(f.ctx, again); again != used || err != nil || st != store.TemplateLive || !f.trees.Has(used) {
		t.Fatalf("re-import: %s %v %v", again, st, err)
	}
	trees, err := f.trees.Trees()
	if err != nil || len(trees) != 2 {
		t.Fatalf("trees left: %+v, %v", trees, err)
	}
}

// Periodic runs leave templates younger than MinAge; Run stops with its
// context.
func TestRunMinAge(t *testing.T) {
	f := newFixture(t)
	young := f.tree("young", true)
	now := f.now
	c, err := New(Config{Store: f.st, Trees: f.trees, MinAge: time.Hour, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx, 5*time.Millisecond)
	}()
	time.Sleep(50 * time.Millisecond)
	if !f.trees.Has(young) {
		t.Fatal("a periodic run collected a template younger than MinAge")
	}
	cancel()
	<-done
	now = f.now.Add(2 * time.Hour)
	ctx, cancel = context.WithCancel(f.ctx)
	defer cancel()
	done = make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx, 5*time.Millisecond)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for f.trees.Has(young) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if f.trees.Has(young) {
		t.Fatal("a periodic run left an old unused template")
	}
}

// TestRunTombstonesOnlyWhereAsked: a periodic run on a node that does not
// hold the cluster's tombstoning (Config.Tombstones) tombstones nothing but
// still removes its own trees of tombstoned templates; once it holds it,
// unused templates are collected too.
func TestRunTombstonesOnlyWhereAsked(t *testing.T) {
	f := newFixture(t)
	unused, deleted := f.tree("unused", true), f.tree("deleted", true)
	if _, err := f.st.DeleteTemplate(f.ctx, deleted, f.now); err != nil { // elsewhere, its tree left here
		t.Fatal(err)
	}
	var lead atomic.Bool
	c, err := New(Config{Store: f.st, Trees: f.trees, MinAge: time.Hour, Tombstones: lead.Load,
		Now: func() time.Time { return f.now.Add(2 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	run := func(what string, done func() bool) {
		t.Helper()
		ctx, cancel := context.WithCancel(f.ctx)
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			c.Run(ctx, 5*time.Millisecond)
		}()
		deadline := time.Now().Add(10 * time.Second)
		for !done() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // a few more runs
		cancel()
		<-stopped
		if !done() {
			t.Fatalf("%s: not done", what)
		}
	}
	run("without the lease", func() bool { return !f.trees.Has(deleted) })
	if st, err := f.st.TemplateState(f.ctx, unused); err != nil || st != store.TemplateLive || !f.trees.Has(unused) {
		t.Fatalf("a run without the lease collected an unused template: %v, %v, tree %v", st, err, f.trees.Has(unused))
	}
	lead.Store(true)
	run("with the lease", func() bool { return !f.trees.Has(unused) })
	if st, err := f.st.TemplateState(f.ctx, unused); err != nil || st != store.TemplateTombstoned {
		t.Fatalf("after a run with the lease: %v, %v", st, err)
	}
}
