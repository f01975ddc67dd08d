package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/egress/netnstest"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/template"
	"github.com/airlockdev/airlock/internal/template/recipe"
)

// TestTemplateImportBuilds: `airlock template import` starts a build (202)
// and follows it to success; a bad import fails with its error in the
// build and in its log.
func TestTemplateImportBuilds(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runc")
	s := newServer(t, build(t), serverConfig{runtime: "runc"})
	s.start()
	ctx := ctxFor(t, 3*time.Minute)

	dir := t.TempDir()
	tree := filepath.Join(dir, "rootfs")
	if err := os.MkdirAll(filepath.Join(tree, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "etc", "motd"), []byte("built\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := s.cli(ctx, "-o", "json", "template", "import", tree, "--name", "dirtpl")
	if code != 0 {
		t.Fatalf("template import: exit %d\n%s\n%s", code, stdout, stderr)
	}
	var b apiv1.Build
	if err := json.Unmarshal([]byte(stdout), &b); err != nil || b.State != "succeeded" || b.Name != "dirtpl:latest" || b.Digest == "" || b.Kind != "import" {
		t.Fatalf("template import printed %q (%v)", stdout, err)
	}
	// --detach: the build's ID at once; build log follows it to the end.
	stdout, stderr, code = s.cli(ctx, "template", "import", tree, "--name", "dirtpl2", "--detach")
	id := strings.TrimSpace(stdout)
	if _, err := model.ParseBuildID(id); code != 0 || err != nil {
		t.Fatalf("template import --detach: exit %d, %q %s", code, stdout, stderr)
	}
	stdout, stderr, code = s.cli(ctx, "build", "log", id)
	if code != 0 || !strings.Contains(stdout, "airlock: succeeded: "+b.Digest) {
		t.Fatalf("build log %s: exit %d\n%s\n%s", id, code, stdout, stderr)
	}

	// A file that is neither a tree nor a tar archive: the build fails.
	bad := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(bad, []byte("not a tree\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = s.cli(ctx, "template", "import", bad, "--name", "broken")
	if code == 0 || !strings.Contains(stderr, "invalid_request") || !strings.Contains(stderr, "build bld_") {
		t.Fatalf("import of a bad source: exit %d, stderr %q", code, stderr)
	}
	c := s.client()
	l, err := c.ListBuilds(ctx, client.BuildFilter{Name: "broken"})
	if err != nil || len(l.Builds) != 1 {
		t.Fatalf("builds of broken: %+v, %v", l, err)
	}
	fb := l.Builds[0]
	if fb.State != "failed" || fb.Error == nil || fb.Error.Code != "invalid_request" || !strings.Contains(fb.Error.Message, bad) {
		t.Fatalf("failed build: %+v %+v", fb, fb.Error)
	}
	stdout, _, code = s.cli(ctx, "build", "log", fb.ID, "--follow=false")
	if code == 0 || !strings.Contains(stdout, "airlock: failed (invalid_request)") {
		t.Fatalf("log of the failed build: exit %d\n%s", code, stdout)
	}
	// A create naming the template its failed build was to provide is
	// refused, naming the build.
	_, stderr, code = s.cli(ctx, "sandbox", "create", "--template", "broken")
	if code == 0 || !strings.Contains(stderr, "build_failed") || !strings.Contains(stderr, fb.ID) {
		t.Fatalf("create from the failed build's template: exit %d, stderr %q", code, stderr)
	}
}

// gatedRegistry is a loopback registry holding one small image whose blobs
// are not served until open is called.
func gatedRegistry(t *testing.T) (ref string, open func()) {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, tarLayer(t, [2]string{"etc/", ""}, [2]string{"etc/greeting", "slow\n"}))
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	var once sync.Once
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { once.Do(func() { close(gate) }) })
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ref = u.Host + "/airlock/slow:v1"
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	return ref, func() { once.Do(func() { close(gate) }) }
}

// waitBuildState polls build id until pred holds.
func waitBuildState(ctx context.Context, t *testing.T, c *client.Client, id model.BuildID, pred func(apiv1.Build) bool) apiv1.Build {
	t.Helper()
	for {
		b, err := c.GetBuild(ctx, id)
		if err != nil {
			t.Fatalf("get build %s: %v", id, err)
		}
		if pred(b) {
			return b
		}
		select {
		case <-ctx.Done():
			t.Fatalf("build %s: %v; last %+v", id, ctx.Err(), b)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestBuildLogLiveAndRestart: a build's log streams while the build runs;
// a server killed mid-build runs the build again when it starts.
func TestBuildLogLiveAndRestart(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runc")
	ref, open := gatedRegistry(t)
	s := newServer(t, build(t), serverConfig{runtime: "runc"})
	s.start()
	ctx := ctxFor(t, 3*time.Minute)
	c := s.client()
	b, err := c.ImportTemplate(ctx, apiv1.ImportTemplateRequest{Source: ref, Name: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	if b.State != "pending" {
		t.Fatalf("new build %+v", b)
	}
	id := model.BuildID(b.ID)
	waitBuildState(ctx, t, c, id, func(b apiv1.Build) bool { return b.State == "running" })

	// The log streams while the build runs (blocked on the registry).
	fctx, stopFollow := context.WithCancel(ctx)
	events := make(chan client.BuildEvent, 64)
	followed := make(chan error, 1)
	go func() {
		_, err := c.FollowBuild(fctx, id, true, func(ev client.BuildEvent) error {
			events <- ev
			return nil
		})
		followed <- err
	}()
	var sawLog, sawProgress bool
	for !sawLog || !sawProgress {
		select {
		case ev := <-events:
			sawLog = sawLog || strings.Contains(ev.Log, "airlock: import "+ref)
			sawProgress = sawProgress || (ev.Progress != nil && ev.Progress.State == "running")
		case err := <-followed:
			t.Fatalf("the log stream ended while the build runs: %v", err)
		case <-time.After(20 * time.Second):
			t.Fatalf("no live log line and progress event (log %v, progress %v)", sawLog, sawProgress)
		}
	}
	stopFollow()
	if err := <-followed; !errors.Is(err, context.Canceled) {
		t.Fatalf("follow ended with %v", err)
	}

	// Killed mid-build, the server runs the build again at its next start.
	s.kill()
	s.start()
	c = s.client()
	waitBuildState(ctx, t, c, id, func(b apiv1.Build) bool { return b.State == "running" && b.Attempts == 2 })
	open()
	var text strings.Builder
	done, err := c.FollowBuild(ctx, id, true, func(ev client.BuildEvent) error {
		text.WriteString(ev.Log)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if done.State != "succeeded" || done.Attempts != 2 || done.Digest == "" {
		t.Fatalf("build after the restart: %+v %+v", done, done.Error)
	}
	if log := text.String(); !strings.Contains(log, "runs again (attempt 2)") || !strings.Contains(log, "airlock: succeeded: "+done.Digest) {
		t.Fatalf("log after the restart:\n%s", log)
	}
	tl, err := c.ListTemplates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	named := false
	for _, tpl := range tl.Templates {
		named = named || (tpl.Digest == done.Digest && strings.Contains(strings.Join(tpl.Names, ","), "slow"))
	}
	if !named {
		t.Fatalf("template %s is not named slow: %+v", done.Digest, tl)
	}
}

// TestDefaultDebianTemplate is the templates issue's headline: with the
// Debian default (built in the background at start; the recipe cache is
// shared by every test run on the machine), `airlock run` waits for the
// build, showing it, and runs python3.
func TestDefaultDebianTemplate(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runc")
	if _, err := exec.LookPath("mmdebstrap"); err != nil && os.Getenv("CI") == "true" {
		t.Fatal("the Debian default template needs mmdebstrap (scripts/install-deps.sh installs it)")
	}
	airtest.RequireBinary(t, "mmdebstrap")
	cache, err := airtest.TestCache()
	if err != nil {
		t.Fatal(err)
	}
	fillRecipeCache(t, cache, recipe.Default(), t.TempDir())
	s := newServer(t, build(t), serverConfig{runtime: "runc", extraArgs: []string{
		"--default-template", "debian", "--build-cache-dir", filepath.Join(cache, "recipe-cache-v1")}})
	s.start()
	ctx := ctxFor(t, 25*time.Minute)
	stdout, stderr, code := s.cli(ctx, "run", "--", "python3", "-c", "print(6*7)")
	if code != 0 || stdout != "42\n" {
		t.Fatalf("airlock run -- python3: exit %d, stdout %q\nstderr:\n%s", code, stdout, tail(stderr, 40))
	}
	// E2B's base: python is python3, and user (1000) may sudo without a
	// password, to the sandbox's root (runc: of its user namespace).
	stdout, stderr, code = s.cli(ctx, "run", "--", "python", "-c", "import sys; print(sys.version_info[0])")
	if code != 0 || stdout != "3\n" {
		t.Errorf("airlock run -- python: exit %d, stdout %q\nstderr:\n%s", code, stdout, tail(stderr, 40))
	}
	stdout, stderr, code = s.cli(ctx, "run", "--user", "1000:1000", "--", "sh", "-c", "id -u; sudo -n id -u; sudo -n -u user id -un")
	if code != 0 || stdout != "1000\n0\nuser\n" {
		t.Errorf("airlock run --user 1000 -- sudo: exit %d, stdout %q\nstderr:\n%s", code, stdout, tail(stderr, 40))
	}
	// minimal stays the busybox template.
	stdout, stderr, code = s.cli(ctx, "run", "--template", "minimal", "--", "/bin/busybox", "true")
	if code != 0 {
		t.Fatalf("run on minimal: exit %d %s %s", code, stdout, stderr)
	}
}

// TestTemplateBuildRecipe: `airlock template build -f` sends the recipe's
// text, copies from its directory (the default context), follows the build
// and names the template; run steps on a template base run in a build
// sandbox (never on the host), which is gone afterwards; a failing run step
// fails the build, visibly.
func TestTemplateBuildRecipe(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runc")
	airtest.RequireBinary(t, "unshare")
	bins := build(t)
	ctx := ctxFor(t, 3*time.Minute)

	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("hello.txt", "copied from the context\n")
	// The run step also tries the host: the build helper's chroot ran
	// steps with the host's root as /proc/1/root (its PID 1 was the
	// helper), so this wrote the host's marker and listed the server's
	// data dir. In a build sandbox /proc/1 is the sandbox's own init.
	hostMarker := filepath.Join(t.TempDir(), "written-by-a-run-step")
	s := newServer(t, bins, serverConfig{runtime: "runc"})
	good := write("good.yaml", "from: {template: minimal}\n"+
		"steps:\n"+
		"  - copy: {src: hello.txt, dst: /etc/hello}\n"+
		"  - run: [/bin/sh, -c, \"echo built by a run step > /etc/built\"]\n"+
		fmt.Sprintf("  - run: [/bin/sh, -c, \"echo escaped > /proc/1/root%s; ls /proc/1/root%s > /etc/saw 2>&1; true\"]\n", hostMarker, s.dataDir)+
		"env: {GREETING: hi}\n")
	s.start()
	stdout, stderr, code := s.cli(ctx, "-o", "json", "template", "build", "-f", good, "--name", "rtest")
	if code != 0 {
		t.Fatalf("template build: exit %d\n%s\n%s", code, stdout, stderr)
	}
	var b apiv1.Build
	if err := json.Unmarshal([]byte(stdout), &b); err != nil || b.State != "succeeded" || b.Kind != "recipe" || b.Name != "rtest:latest" || b.StepsTotal == 0 {
		t.Fatalf("template build printed %q (%v)", stdout, err)
	}
	if _, err := os.Stat(hostMarker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a run step wrote the host's %s: %v", hostMarker, err)
	}
	stdout, stderr, code = s.cli(ctx, "run", "--template", "rtest", "--", "/bin/cat", "/etc/saw")
	if code != 0 || strings.Contains(stdout, "templates") || strings.Contains(stdout, "admin.key") || !strings.HasPrefix(stdout, "ls: ") {
		t.Errorf("what a run step saw of the server's data dir %s: exit %d, %q %q", s.dataDir, code, stdout, stderr)
	}
	log, _, _ := s.cli(ctx, "build", "log", b.ID, "--follow=false")
	if !strings.Contains(log, "airlock: build sandbox sbx_") {
		t.Errorf("the build log names no build sandbox:\n%s", log)
	}
	c := s.client()
	// The build sandboxes are gone.
	all, err := c.ListAllSandboxes(ctx, client.ListSandboxesQuery{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range all.Sandboxes {
		if _, ok := sb.Metadata["airlock/build"]; ok && sb.State != "deleted" {
			t.Errorf("a build sandbox is left: %s %s", sb.ID, sb.State)
		}
	}
	stdout, stderr, code = s.cli(ctx, "run", "--template", "rtest", "--", "/bin/sh", "-c", "cat /etc/hello /etc/built; echo $GREETING")
	if code != 0 || stdout != "copied from the context\nbuilt by a run step\nhi\n" {
		t.Fatalf("run on the built template: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}

	bad := write("bad.yaml", "from: {template: minimal}\nsteps:\n  - run: \"echo about to fail; exit 3\"\n")
	_, stderr, code = s.cli(ctx, "template", "build", "-f", bad, "--name", "rbad")
	if code == 0 || !strings.Contains(stderr, "build bld_") {
		t.Fatalf("a failing recipe: exit %d, stderr %q", code, stderr)
	}
	l, err := c.ListBuilds(ctx, client.BuildFilter{Name: "rbad"})
	if err != nil || len(l.Builds) != 1 || l.Builds[0].State != "failed" || l.Builds[0].Error == nil {
		t.Fatalf("builds of rbad: %+v, %v", l, err)
	}
	stdout, _, _ = s.cli(ctx, "build", "log", l.Builds[0].ID, "--follow=false")
	if !strings.Contains(stdout, "about to fail") || !strings.Contains(stdout, "airlock: failed") {
		t.Fatalf("log of the failed recipe build:\n%s", stdout)
	}
	// A malformed recipe is refused before any build (the API refuses it
	// too: internal/api's TestBuildRoutes).
	malformed := write("malformed.yaml", "from: {template: minimal}\nstepz: []\n")
	_, stderr, code = s.cli(ctx, "template", "build", "-f", malformed)
	if code != 2 || !strings.Contains(stderr, "stepz") {
		t.Fatalf("a malformed recipe (refused by the CLI, before any request): exit %d, stderr %q", code, stderr)
	}
}

// fillRecipeCache builds r (copies from contextDir) into the machine's
// shared recipe build cache (<cache>/recipe-cache-v1, with the template
// store recipe-store-v1 beside it, as internal/template/recipe's tests use
// them) in the machine's network namespace, where mmdebstrap and apt reach
// Debian's archive: a server under test runs in this package's namespace,
// which has no route out, and finds every step of r cached. The first run
// on a machine bootstraps Debian (40 s to 2 minutes); later ones hash keys.
// It returns the template r makes, which the shared store holds.
func fillRecipeCache(t *testing.T, cache string, r recipe.Recipe, contextDir string) model.TemplateDigest {
	t.Helper()
	ctx := ctxFor(t, 15*time.Minute)
	store, unlock := lockSharedStore(t, cache)
	defer unlock()
	b := &recipe.Builder{Store: store, CacheDir: filepath.Join(cache, "recipe-cache-v1")}
	var log strings.Builder
	start := time.Now()
	var res recipe.Result
	err := netnstest.InHost(func() error {
		var err error
		res, err = b.Build(ctx, r, contextDir, &log)
		return err
	})
	if err != nil {
		t.Fatalf("build a recipe into the recipe cache: %v\n%s", err, tail(log.String(), 40))
	}
	t.Logf("recipe in the build cache (%v):\n%s", time.Since(start).Round(time.Millisecond), tail(log.String(), 10))
	return res.Imported.Digest
}

// lockSharedStore opens the shared recipe store (recipe-store-v1) and
// holds its lock until unlock: internal/template/recipe's tests check the
// store at rest while they hold it, and scripts/testrun prunes it.
func lockSharedStore(t *testing.T, cache string) (_ *template.Store, unlock func()) {
	t.Helper()
	storeDir := filepath.Join(cache, "recipe-store-v1")
	unlock = airtest.LockShared(t, storeDir)
	store, err := template.Open(storeDir, nil)
	if err != nil {
		unlock()
		t.Fatal(err)
	}
	return store, unlock
}

// seedTemplates gives server s, before its first start, templates ds of
// the shared recipe store (fillRecipeCache's results) as clones by hard
// link (template.Store.Clone: nothing copied, the digest checked), so that
// a server sharing the recipe build cache finds those recipes' results in
// its own store and imports nothing: its Debian default is ready at start,
// and a build of the same recipe is answered from the cache at once. A test
// of the server's own import from the cache (TestDefaultDebianTemplate)
// does not seed.
func seedTemplates(t *testing.T, cache string, s *server, ds ...model.TemplateDigest) {
	t.Helper()
	ctx := ctxFor(t, 5*time.Minute)
	shared, unlock := lockSharedStore(t, cache)
	defer unlock()
	own, err := template.Open(filepath.Join(s.dataDir, "templates"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if !shared.Has(d) {
			// Pruned since fillRecipeCache (scripts/testrun prunes the
			// shared store at the start of a run of its own).
			t.Logf("template %s is not in the shared store: the server imports it from the build cache", d)
			continue
		}
		start := time.Now()
		if _, err := own.Clone(ctx, shared, d); err != nil {
			t.Fatalf("seed the server's store with %s: %v", d, err)
		}
		t.Logf("template %s cloned into the server's store in %v", d, time.Since(start).Round(time.Millisecond))
	}
}
