package build

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
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

// claimCounter counts the runner's claims (write transactions); with deaf
// set its WatchBuilds never fires, as if every notification were lost.
type claimCounter struct {
	store.Store
	deaf   bool
	claims atomic.Int64
}

func (c *claimCounter) ClaimBuild(ctx context.Context, cl store.Claim) (model.TemplateBuild, error) {
	c.claims.Add(1)
	return c.Store.ClaimBuild(ctx, cl)
}

func (c *claimCounter) WatchBuilds(ctx context.Context) <-chan struct{} {
	if c.deaf {
		return make(chan struct{})
	}
	return c.Store.WatchBuilds(ctx)
}

// TestRunnerClaimsOnlyABuild: store changes that are not builds' do not
// make an idle runner claim (a write transaction), nor do build changes
// that leave nothing to claim; a queued build is claimed at once.
func TestRunnerClaimsOnlyABuild(t *testing.T) {
	st, ts, dir := newEnv(t)
	ctx := context.Background()
	cs := &claimCounter{Store: st}
	startRunner(t, Config{Store: cs, Templates: ts, LogDir: filepath.Join(dir, "builds"), Owner: "n1", Workers: 2})
	// Changes of every kind: nodes (their watchers), pools (every
	// watcher's), and a build's own progress.
	for i := range 20 {
		if _, err := st.RegisterNode(ctx, model.Node{ID: model.NewNodeID(), Incarnation: model.NewIncarnation(), Role: model.RoleAll,
			AdvertiseURL: "http://127.0.0.1:1"}); err != nil {
			t.Fatal(err)
		}
		if i%5 == 0 {
			if _, err := st.PutPool(ctx, model.Pool{ID: model.NewPoolID(), Key: model.PoolKey{Template: model.RefByName(model.TaggedName{Name: model.TemplateName("t" + string(rune('a'+i))), Tag: "latest"}),
				CPUs: 1, MemoryMiB: 256}, Size: 1, CreatedAt: time.Now()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(300 * time.Millisecond)
	if n := cs.claims.Load(); n != 0 {
		t.Fatalf("%d claims with no build queued, want 0", n)
	}
	b := model.TemplateBuild{ID: model.NewBuildID(), Kind: model.BuildImport, Source: rootfs(t), CreatedAt: time.Now()}
	start := time.Now()
	if err := st.CreateBuild(ctx, b, nil); err != nil {
		t.Fatal(err)
	}
	if got := waitBuild(t, st, b.ID); got.State != model.BuildSucceeded {
		t.Fatalf("build = %+v", got)
	}
	if took := time.Since(start); took > DefaultPoll {
		t.Errorf("the queued build took %s: the runner waited for its poll", took)
	}
	// Its own changes (claim, finish) wake the workers; none finds another
	// build to claim.
	time.Sleep(300 * time.Millisecond)
	if n := cs.claims.Load(); n != 1 {
		t.Fatalf("%d claims for one build, want 1", n)
	}
}

// TestRunnerPollsForLostWakeUps: a runner that hears of no change still
// claims a queued build, at its poll.
func TestRunnerPollsForLostWakeUps(t *testing.T) {
	st, ts, dir := newEnv(t)
	cs := &claimCounter{Store: st, deaf: true}
	startRunner(t, Config{Store: cs, Templates: ts, LogDir: filepath.Join(dir, "builds"), Owner: "n1", Poll: 100 * time.Millisecond})
	time.Sleep(50 * time.Millisecond) // idle, waiting
	b := model.TemplateBuild{ID: model.NewBuildID(), Kind: model.BuildImport, Source: rootfs(t), CreatedAt: time.Now()}
	if err := st.CreateBuild(context.Background(), b, nil); err != nil {
		t.Fatal(err)
	}
	if got := waitBuild(t, st, b.ID); got.State != model.BuildSucceeded {
		t.Fatalf("build = %+v", got)
	}
}
