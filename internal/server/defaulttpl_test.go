package server

import (
	"context"
	"crypto/sha256"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/store/sqlite"
	"github.com/airlockdev/airlock/internal/template"
	"github.com/airlockdev/airlock/internal/template/recipe"
)

// Without a cached build, the Debian default is queued once: a second start
// (a restart while it is pending or running) queues no other.
func TestDebianDefaultQueuedOnce(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := sqlite.Open(ctx, filepath.Join(dir, "db"), log)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ts, err := template.Open(filepath.Join(dir, "templates"), log)
	if err != nil {
		t.Fatal(err)
	}
	b := &recipe.Builder{Store: ts, CacheDir: filepath.Join(dir, "cache"), Logger: log}
	def := &defaultTag{st: st, file: filepath.Join(dir, defaultTagFile), log: log}
	for range 2 {
		if err := ensureDebianDefault(ctx, st, b, def, log); err != nil {
			t.Fatal(err)
		}
	}
	page, err := st.ListBuilds(ctx, store.BuildQuery{Scope: store.AllProjects(), Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Builds) != 1 {
		t.Fatalf("builds %+v, want one", page.Builds)
	}
	got := page.Builds[0]
	if got.Kind != model.BuildRecipe || got.Source != DefaultBuildSource || got.Name != model.DefaultTemplate || got.Recipe != "" || got.State != model.BuildPending {
		t.Fatalf("default build %+v", got)
	}
	if _, err := st.ResolveTemplate(ctx, model.RefByName(model.DefaultTemplate)); err == nil {
		t.Fatal("default is named before its build")
	}
}

// The server points "default" where --default-template says at every
// start, but not once an operator has moved the tag.
func TestDefaultTagLeftWhenMoved(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := sqlite.Open(ctx, filepath.Join(dir, "db"), log)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	put := func(m string) model.TemplateDigest {
		t.Helper()
		tpl := model.Template{Digest: model.DigestFromSHA256(sha256.Sum256([]byte(m))), SizeBytes: 1, Manifest: []byte(m), CreatedAt: now}
		if err := st.PutTemplate(ctx, tpl); err != nil {
			t.Fatal(err)
		}
		return tpl.Digest
	}
	ours, theirs := put("ours"), put("theirs")
	def := &defaultTag{st: st, file: filepath.Join(dir, defaultTagFile), log: log}
	moved := func() bool {
		t.Helper()
		m, err := def.moved(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if moved() {
		t.Fatal("an unset default counts as moved")
	}
	if err := def.set(ctx, ours, now); err != nil {
		t.Fatal(err)
	}
	if moved() {
		t.Fatal("the server's own default counts as moved")
	}
	if err := st.SetTemplateName(ctx, model.DefaultTemplate, theirs, now); err != nil {
		t.Fatal(err)
	}
	if !moved() {
		t.Fatal("an operator's default does not count as moved")
	}

	// A default build's result, named by the build (which writes no
	// file): the server's own when it holds the template (its build, or a
	// data dir from before the file existed), another node's otherwise.
	built := put("built")
	bld := model.TemplateBuild{ID: model.NewBuildID(), Kind: model.BuildRecipe, Source: DefaultBuildSource,
		Name: model.DefaultTemplate, CreatedAt: now}
	if err := st.CreateBuild(ctx, bld, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ClaimBuild(ctx, store.Claim{Owner: "n", Lease: time.Minute, Now: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.FinishBuild(ctx, store.BuildFinish{ID: bld.ID, Owner: "n", State: model.BuildSucceeded, Digest: built, Now: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetTemplateName(ctx, model.DefaultTemplate, built, now); err != nil {
		t.Fatal(err)
	}
	if moved() {
		t.Fatal("the server's own default build counts as moved")
	}
	local := false
	fresh := &defaultTag{st: st, file: filepath.Join(dir, "other-"+defaultTagFile), has: func(model.TemplateDigest) bool { return local }, log: log}
	if m, err := fresh.moved(ctx); err != nil || !m {
		t.Fatalf("another node's default build, on a node that never named default: moved %v, %v; want moved", m, err)
	}
	local = true
	if m, err := fresh.moved(ctx); err != nil || m {
		t.Fatalf("a default build this node holds, no file (an older data dir): moved %v, %v; want not moved", m, err)
	}
}
