package build

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/store/sqlite"
	"github.com/airlockdev/airlock/internal/template"
)

func newEnv(t *testing.T) (store.Store, *template.Store, string) {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "db.sqlite"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ts, err := template.Open(filepath.Join(dir, "templates"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return st, ts, dir
}

// startRunner runs a runner until the test ends.
func startRunner(t *testing.T, cfg Config) *Runner {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func waitBuild(t *testing.T, st store.Store, id model.BuildID) model.TemplateBuild {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		b, err := st.GetBuild(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if b.State.Done() {
			return b
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("build %s did not finish", id)
	return model.TemplateBuild{}
}

func rootfs(t *testing.T) string {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "etc", "hello"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestImportBuildNamesTemplate(t *testing.T) {
	st, ts, dir := newEnv(t)
	ctx := context.Background()
	startRunner(t, Config{Store: st, Templates: ts, LogDir: filepath.Join(dir, "builds"), Owner: "n1"})
	ok := model.TemplateBuild{ID: model.NewBuildID(), Kind: model.BuildImport, Source: rootfs(t), Name: model.TaggedName{Name: "hello", Tag: model.DefaultTemplateTag}, CreatedAt: time.Now()}
	bad := model.TemplateBuild{ID: model.NewBuildID(), Kind: model.BuildImport, Source: "/does/not/exist", CreatedAt: time.Now()}
	rec := model.TemplateBuild{ID: model.NewBuildID(), Kind: model.BuildRecipe, Source: "recipe", Recipe: "x", CreatedAt: time.Now()}
	for _, b := range []model.TemplateBuild{ok, bad, rec} {
		if err := st.CreateBuild(ctx, b, nil); err != nil {
			t.Fatal(err)
		}
	}
	got := waitBuild(t, st, ok.ID)
	if got.State != model.BuildSucceeded || got.Digest == "" || got.Attempts != 1 {
		t.Fatalf("build = %+v", got)
	}
	tpl, err := st.ResolveTemplate(ctx, model.RefByName(model.TaggedName{Name: "hello", Tag: model.DefaultTemplateTag}))
	if err != nil || tpl.Digest != got.Digest {
		t.Fatalf("name hello = %v, %v", tpl.Digest, err)
	}
	log, _ := os.ReadFile(LogPath(filepath.Join(dir, "builds"), ok.ID))
	if !strings.Contains(string(log), "succeeded: "+got.Digest.String()) {
		t.Fatalf("log:\n%s", log)
	}
	got = waitBuild(t, st, bad.ID)
	if got.State != model.BuildFailed || got.Error == nil || got.Error.Code != "invalid_request" || !strings.Contains(got.Error.Message, "does not exist") {
		t.Fatalf("bad build = %+v %+v", got, got.Error)
	}
	log, _ = os.ReadFile(LogPath(filepath.Join(dir, "builds"), bad.ID))
	if !strings.Contains(string(log), "failed (invalid_request)") {
		t.Fatalf("log:\n%s", log)
	}
	got = waitBuild(t, st, rec.ID)
	if got.State != model.BuildFailed || got.Error.Code != "not_supported" {
		t.Fatalf("recipe build without a builder = %+v %+v", got, got.Error)
	}
}

// A build left running by a dead process (same node, its lease still
// valid) runs again when the runner starts.
func TestCrashedBuildRunsAgain(t *testing.T) {
	st, ts, dir := newEnv(t)
	ctx := context.Background()
	b := model.TemplateBuild{ID: model.NewBuildID(), Kind: model.BuildImport, Source: rootfs(t), Name: model.TaggedName{Name: "again", Tag: model.DefaultTemplateTag}, CreatedAt: time.Now()}
	if err := st.CreateBuild(ctx, b, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ClaimBuild(ctx, store.Claim{Owner: "n1", Lease: time.Hour, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	startRunner(t, Config{Store: st, Templates: ts, LogDir: filepath.Join(dir, "builds"), Owner: "n1"})
	got := waitBuild(t, st, b.ID)
	if got.State != model.BuildSucceeded || got.Attempts != 2 {
		t.Fatalf("build = %+v", got)
	}
	log, _ := os.ReadFile(LogPath(filepath.Join(dir, "builds"), b.ID))
	if !strings.Contains(string(log), "runs again (attempt 2)") {
		t.Fatalf("log:\n%s", log)
	}
}

func TestLogBounded(t *testing.T) {
	dir := t.TempDir()
	id := model.NewBuildID()
	l, err := openLog(dir, id, 10)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := io.WriteString(l, "0123456789abcdef"); n != 16 || err != nil {
		t.Fatalf("write = %d, %v", n, err)
	}
	_, _ = io.WriteString(l, "gh")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(LogPath(dir, id))
	if !strings.HasPrefix(string(b), "0123456789\n[airlock: the build log reached its limit of 10 bytes; 8 more bytes were dropped]") {
		t.Fatalf("log = %q", b)
	}
}
