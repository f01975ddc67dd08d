package server

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

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
	for range 2 {
		if err := ensureDebianDefault(ctx, st, b, log); err != nil {
			t.Fatal(err)
		}
	}
	page, err := st.ListBuilds(ctx, store.BuildQuery{Limit: 10})
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
