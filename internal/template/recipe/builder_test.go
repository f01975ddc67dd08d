package recipe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/template"
)

// newBuilder returns a builder on a fresh store in a temporary directory,
// with cacheDir as its cache (a fresh one when "").
func newBuilder(t *testing.T, cacheDir string) *Builder {
	t.Helper()
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "unshare")
	tmp := t.TempDir()
	s, err := template.Open(filepath.Join(tmp, "store"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cacheDir == "" {
		cacheDir = filepath.Join(tmp, "cache")
	}
	t.Cleanup(func() { checkClean(t, s) })
	return &Builder{Store: s, CacheDir: cacheDir}
}

// buildOpts are the options of the tests' builds: run steps on the busybox
// base run in chrootSandbox (the test's own base: trusted).
func buildOpts(b *Builder, log io.Writer) BuildOptions {
	return BuildOptions{Log: log, Sandbox: chrootSandbox{b: b}}
}

// checkClean fails if the store has staging leftovers or mounts.
func checkClean(t *testing.T, s *template.Store) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(s.Dir(), "staging"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) > 0 {
		t.Errorf("staging leftovers: %v", ents)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mi), s.Dir()) {
		t.Errorf("mounts left under %s", s.Dir())
	}
}

// busybox imports the busybox tree into b's store.
func busybox(t *testing.T, b *Builder) model.TemplateDigest {
	t.Helper()
	imp, err := b.Store.EnsureDefault(context.Background(), airtest.BusyboxPath(t))
	if err != nil {
		t.Fatal(err)
	}
	return imp.Digest
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func mustParse(t *testing.T, src string) Recipe {
	t.Helper()
	r, err := Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func build(t *testing.T, b *Builder, r Recipe, ctxDir string) (Result, string) {
	t.Helper()
	var log bytes.Buffer
	res, err := b.BuildWith(context.Background(), r, ctxDir, buildOpts(b, &log))
	if err != nil {
		t.Fatalf("build: %v\n%s", err, log.String())
	}
	return res, log.String()
}

func cachedSteps(res Result) []bool {
	var out []bool
	for _, s := range res.Steps {
		out = append(out, s.Cached)
	}
	return out
}

func readTree(t *testing.T, b *Builder, d model.TemplateDigest, p string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(b.Store.RootfsDir(d), p))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func chainRecipe(base model.TemplateDigest) string {
	return fmt.Sprintf(`
from: {template: %q}
steps:
  - copy: {src: a.txt, dst: /opt/app/a.txt}
  - run: "cp /opt/app/a.txt /opt/app/b.txt && echo ran-b && hostname > /opt/app/host && ls /dev > /opt/app/dev"
  - copy: {src: dir, dst: /opt/app/dir, mode: 0600}
  - run: ["/bin/sh", "-c", "cat /opt/app/dir/c.txt > /opt/app/d.txt"]
env: {FOO: bar, PATH: /opt/app:/bin}
workdir: /opt/app
user: "1000:1000"
`, base)
}

func TestBuildCacheChain(t *testing.T) {
	b := newBuilder(t, "")
	base := busybox(t, b)
	ctxDir := t.TempDir()
	writeFiles(t, ctxDir, map[string]string{"a.txt": "alpha\n", "dir/c.txt": "gamma\n", "dir/sub/e.txt": "e"})
	r := mustParse(t, chainRecipe(base))

	res, log := build(t, b, r, ctxDir)
	if got, want := cachedSteps(res), []bool{true, false, false, false, false, false}; !slices.Equal(got, want) {
		t.Fatalf("first build cached = %v, want %v\n%s", got, want, log)
	}
	if !strings.Contains(log, "step 2/6 copy ") || !strings.Contains(log, "built in") || !strings.Contains(log, "ran-b") {
		t.Errorf("log:\n%s", log)
	}
	final := res.Imported.Digest
	if final != res.Steps[5].Digest {
		t.Errorf("final %s, last step %s", final, res.Steps[5].Digest)
	}
	for p, want := range map[string]string{"opt/app/b.txt": "alpha\n", "opt/app/d.txt": "gamma\n", "opt/app/dir/sub/e.txt": "e", "opt/app/host": "airlock-build\n"} {
		if got := readTree(t, b, final, p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	if dev := readTree(t, b, final, "opt/app/dev"); !strings.Contains(dev, "null") {
		t.Errorf("/dev in the run step: %q", dev)
	}
	fi, err := os.Stat(filepath.Join(b.Store.RootfsDir(final), "opt/app/dir/c.txt"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("copied mode: %v %v", fi, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(b.Store.RootfsDir(final), "dev")); len(ents) != 0 {
		t.Errorf("/dev of the tree is not empty: %v", ents)
	}
	def, err := b.Store.Defaults(final)
	if err != nil {
		t.Fatal(err)
	}
	if c := def.Config; !slices.Equal(c.Env, []string{"PATH=/opt/app:/bin", "FOO=bar"}) || c.WorkingDir != "/opt/app" || c.User != "1000:1000" {
		t.Errorf("config = %+v", c)
	}
	if imp, ok, err := b.Cached(r, ctxDir); err != nil || !ok || imp.Digest != final {
		t.Errorf("Cached = %v %v %v", imp.Digest, ok, err)
	}

	// Again: everything from the cache.
	hourAgo := time.Now().Add(-time.Hour)
	if err := os.Chtimes(b.entryPath(res.Steps[1].Key), hourAgo, hourAgo); err != nil {
		t.Fatal(err)
	}
	res2, log2 := build(t, b, r, ctxDir)
	if got := cachedSteps(res2); slices.Contains(got, false) || res2.Imported.Digest != final {
		t.Fatalf("second build cached = %v, digest %s\n%s", got, res2.Imported.Digest, log2)
	}
	if fi, err := os.Stat(b.entryPath(res.Steps[1].Key)); err != nil || time.Since(fi.ModTime()) > time.Minute {
		t.Errorf("a hit does not touch its entry: %v %v", fi, err)
	}

	// Unused entries and stray files go.
	old := time.Now().Add(-maxUnused - time.Hour)
	writeFiles(t, b.CacheDir, map[string]string{"stale.json": "{}", "stale.tar": "x", "orphan.tar": "x", "x.tar.tmp-1": "x"})
	for _, n := range []string{"stale.json", "stale.tar", "orphan.tar", "x.tar.tmp-1"} {
		if err := os.Chtimes(filepath.Join(b.CacheDir, n), old, old); err != nil {
			t.Fatal(err)
		}
	}
	b.tidy()
	for _, n := range []string{"stale.json", "stale.tar", "orphan.tar", "x.tar.tmp-1"} {
		if _, err := os.Stat(filepath.Join(b.CacheDir, n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s not removed: %v", n, err)
		}
	}
	if n := strings.Count(log2, ": CACHED"); n != 6 || strings.Contains(log2, "ran-b") {
		t.Errorf("second build log:\n%s", log2)
	}

	// A copied file changes: that step and the later ones are rebuilt.
	writeFiles(t, ctxDir, map[string]string{"dir/c.txt": "GAMMA\n"})
	res3, log3 := build(t, b, r, ctxDir)
	if got, want := cachedSteps(res3), []bool{true, true, true, false, false, false}; !slices.Equal(got, want) {
		t.Fatalf("after a change cached = %v, want %v\n%s", got, want, log3)
	}
	if got := readTree(t, b, res3.Imported.Digest, "opt/app/d.txt"); got != "GAMMA\n" {
		t.Errorf("d.txt = %q", got)
	}
	writeFiles(t, ctxDir, map[string]string{"dir/c.txt": "gamma\n"})

	// A fresh store sharing the cache: every step from the cache, and only
	// the last step's tar imported (keys chain on keys: the steps before
	// it need no tree).
	b2 := newBuilder(t, b.CacheDir)
	if _, ok, err := b2.Cached(r, ctxDir); ok || err != nil {
		t.Errorf("Cached on a fresh store = %v %v", ok, err)
	}
	busybox(t, b2)
	res4, log4 := build(t, b2, r, ctxDir)
	if got := cachedSteps(res4); slices.Contains(got, false) || res4.Imported.Digest != final {
		t.Fatalf("fresh store: cached = %v, digest %s, want %s\n%s", got, res4.Imported.Digest, final, log4)
	}
	if err := b2.Store.Verify(context.Background(), final); err != nil {
		t.Fatal(err)
	}
	if res4.Steps[0].Digest != base {
		t.Errorf("fresh store: the base step's digest %s, want %s", res4.Steps[0].Digest, base)
	}
	for i, st := range res.Steps[1:5] {
		if b2.Store.Has(st.Digest) {
			t.Errorf("fresh store: step %d's tree %s was imported too", i+2, st.Digest)
		}
		if res4.Steps[i+1].Digest != st.Digest {
			t.Errorf("fresh store: step %d digest %s, want %s (from its cache entry)", i+2, res4.Steps[i+1].Digest, st.Digest)
		}
	}
	if n := strings.Count(log4, ": CACHED"); n != 6 {
		t.Errorf("fresh store log:\n%s", log4)
	}

	// A corrupt tar is detected and the step rebuilt from the step before
	// it, the last one the cache answers.
	b3 := newBuilder(t, b.CacheDir)
	busybox(t, b3)
	tarPath := b.tarPath(res.Steps[5].Key)
	data, err := os.ReadFile(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(data, []byte("gamma\n"))
	if i < 0 {
		t.Fatal("gamma not in the tar")
	}
	copy(data[i:], "GAMMA\n")
	if err := os.WriteFile(tarPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	res5, log5 := build(t, b3, r, ctxDir)
	if got, want := cachedSteps(res5), []bool{true, true, true, true, true, false}; !slices.Equal(got, want) {
		t.Fatalf("corrupt entry: cached = %v, want %v\n%s", got, want, log5)
	}
	if res5.Imported.Digest != final || !strings.Contains(log5, "corrupt") {
		t.Errorf("corrupt entry: digest %s, want %s\n%s", res5.Imported.Digest, final, log5)
	}
}

func TestBuildCopyIntoTreeResolvesInRoot(t *testing.T) {
	b := newBuilder(t, "")
	base := busybox(t, b)
	ctxDir := t.TempDir()
	writeFiles(t, ctxDir, map[string]string{"x": "x\n"})
	r := mustParse(t, fmt.Sprintf(`
from: {template: %q}
steps:
  - run: "mkdir -p /opt && ln -s /etc /opt/link && ln -s ../../.. /opt/up"
  - copy: {src: x, dst: /opt/link/x}
  - copy: {src: x, dst: /opt/up/y}
`, base))
	res, _ := build(t, b, r, ctxDir)
	if got := readTree(t, b, res.Imported.Digest, "etc/x"); got != "x\n" {
		t.Errorf("etc/x = %q", got)
	}
	if got := readTree(t, b, res.Imported.Digest, "y"); got != "x\n" {
		t.Errorf("y = %q", got)
	}
}

// Copying a directory onto a symlink of the tree resolves the symlink in
// the tree: one to a directory of the tree is copied into, one whose target
// exists only on the host is replaced by a directory of the tree, and
// whether that target exists on the host changes nothing.
func TestBuildCopyDirOntoTreeSymlink(t *testing.T) {
	ctxDir := t.TempDir()
	writeFiles(t, ctxDir, map[string]string{"dir/c.txt": "gamma\n", "dir/sub/e.txt": "e"})
	hostDir := filepath.Join(t.TempDir(), "host-only")
	if err := os.Mkdir(hostDir, 0o755); err != nil {
		t.Fatal(err)
	}
	const inTree = "/srv/airlock-recipe-test-app" // not on the host
	if _, err := os.Lstat(inTree); !errors.Is(err, fs.ErrNotExist) {
		t.Skipf("%s exists on the host: %v", inTree, err)
	}
	text := func(base model.TemplateDigest) string {
		return fmt.Sprintf(`
from: {template: %q}
steps:
  - run: "mkdir -p %[2]s && echo old > %[2]s/old && ln -s %[2]s /app && ln -s ../srv/airlock-recipe-test-app /rel && ln -s %[3]s /hostonly"
  - copy: {src: dir, dst: /app}
  - copy: {src: dir, dst: /rel/again}
  - copy: {src: dir, dst: /hostonly}
`, base, inTree, hostDir)
	}
	var digests []model.TemplateDigest
	for _, hostExists := range []bool{true, false} {
		if !hostExists {
			if err := os.Remove(hostDir); err != nil {
				t.Fatal(err)
			}
		}
		b := newBuilder(t, "")
		res, log := build(t, b, mustParse(t, text(busybox(t, b))), ctxDir)
		d := res.Imported.Digest
		digests = append(digests, d)
		root := b.Store.RootfsDir(d)
		for p, want := range map[string]string{
			"srv/airlock-recipe-test-app/old": "old\n", "srv/airlock-recipe-test-app/c.txt": "gamma\n",
			"srv/airlock-recipe-test-app/sub/e.txt": "e", "srv/airlock-recipe-test-app/again/c.txt": "gamma\n",
			"hostonly/c.txt": "gamma\n", "hostonly/sub/e.txt": "e",
		} {
			if got := readTree(t, b, d, p); got != want {
				t.Errorf("host target exists %v: %s = %q, want %q\n%s", hostExists, p, got, want, log)
			}
		}
		if fi, err := os.Lstat(filepath.Join(root, "app")); err != nil || fi.Mode().Type() != fs.ModeSymlink {
			t.Errorf("/app is no longer a symlink: %v %v", fi, err)
		}
		if fi, err := os.Lstat(filepath.Join(root, "hostonly")); err != nil || !fi.IsDir() {
			t.Errorf("/hostonly is not a directory of the tree: %v %v", fi, err)
		}
		if hostExists {
			if ents, err := os.ReadDir(hostDir); err != nil || len(ents) != 0 {
				t.Errorf("the host directory was touched: %v %v", ents, err)
			}
		} else if _, err := os.Lstat(hostDir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the host directory was created: %v", err)
		}
	}
	if digests[0] != digests[1] {
		t.Errorf("the tree depends on the host: %s with the host's directory, %s without", digests[0], digests[1])
	}
}

func TestBuildCopyEscapes(t *testing.T) {
	b := newBuilder(t, "")
	base := busybox(t, b)
	outer := t.TempDir()
	ctxDir := filepath.Join(outer, "ctx")
	// The files the links point at exist: a refusal is the escape's, not a
	// missing file's.
	writeFiles(t, outer, map[string]string{"ctx/ok/f": "f", "secret": "s"})
	for name, target := range map[string]string{"abs": "/etc", "up": "..", "upfile": "../secret"} {
		if err := os.Symlink(target, filepath.Join(ctxDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, src := range []string{"abs/passwd", "abs", "up", "upfile", "missing"} {
		r := mustParse(t, fmt.Sprintf("from: {template: %q}\nsteps: [{copy: {src: %s, dst: /x}}]\n", base, src))
		_, err := b.Build(context.Background(), r, ctxDir, nil)
		if !errors.Is(err, model.ErrInvalid) {
			t.Errorf("copy %s: %v, want ErrInvalid", src, err)
		}
		if src != "missing" && errors.Is(err, fs.ErrNotExist) {
			t.Errorf("copy %s: refused as missing, not as an escape: %v", src, err)
		}
	}
	// The context itself through a link into it still works.
	r := mustParse(t, fmt.Sprintf("from: {template: %q}\nsteps: [{copy: {src: ok/f, dst: /x}}]\n", base))
	if _, err := b.Build(context.Background(), r, ctxDir, nil); err != nil {
		t.Errorf("copy ok/f: %v", err)
	}
}

func TestBuildRunFails(t *testing.T) {
	b := newBuilder(t, "")
	base := busybox(t, b)
	r := mustParse(t, fmt.Sprintf("from: {template: %q}\nsteps: [{run: 'echo partial > /p; sleep 100 & echo failing; exit 3'}]\n", base))
	var log bytes.Buffer
	_, err := b.BuildWith(context.Background(), r, t.TempDir(), buildOpts(b, &log))
	var se *StepError
	if !errors.As(err, &se) || se.ExitCode != 3 || se.Step != 2 {
		t.Fatalf("err = %v, want exit status 3 of step 2", err)
	}
	if !strings.Contains(log.String(), "failing") || !strings.Contains(log.String(), "status 3") {
		t.Errorf("log:\n%s", log.String())
	}
	ents, _ := os.ReadDir(b.CacheDir)
	if len(ents) != 0 {
		t.Errorf("cache entries after a failed build: %v", ents)
	}
}

func TestBuildCancel(t *testing.T) {
	b := newBuilder(t, "")
	base := busybox(t, b)
	r := mustParse(t, fmt.Sprintf("from: {template: %q}\nsteps: [{run: 'echo started; sleep 100'}]\n", base))
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		// Cancel once the command runs (its first line is in the log).
		var seen []byte
		buf := make([]byte, 4096)
		for {
			n, err := pr.Read(buf)
			if seen = append(seen, buf[:n]...); strings.Contains(string(seen), "started") {
				cancel()
			}
			if err != nil {
				return
			}
		}
	}()
	_, err = b.BuildWith(ctx, r, t.TempDir(), buildOpts(b, pw))
	pw.Close()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestKeys(t *testing.T) {
	airtest.RequireBinary(t, "mmdebstrap")
	b := &Builder{}
	ctx := context.Background()
	ctxDir := t.TempDir()
	writeFiles(t, ctxDir, map[string]string{"a": "a"})
	keys := func(src string) []string {
		t.Helper()
		steps, err := b.plan(ctx, mustParse(t, src), ctxDir)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range steps {
			out = append(out, s.key)
		}
		return out
	}
	const tail = "steps: [{copy: {src: a, dst: /a}}, {run: ls}]\nuser: '1'\n"
	k1 := keys("from: {debian: {suite: bookworm}}\npackages: [git, curl]\n" + tail)
	if k := keys("from: {debian: {suite: bookworm, variant: minbase}}\npackages: [curl, git, curl]\n" + tail); !slices.Equal(k, k1) {
		t.Errorf("same recipe, other keys")
	}
	k2 := keys("from: {debian: {suite: bookworm}}\npackages: [git, curl, procps]\n" + tail)
	for i := range k1 {
		if k1[i] == k2[i] {
			t.Errorf("step %d: a package list change kept its key", i+1)
		}
	}
	k3 := keys("from: {debian: {suite: bookworm}}\npackages: [git, curl]\n" + strings.Replace(tail, "'1'", "'2'", 1))
	if !slices.Equal(k1[:3], k3[:3]) || k1[3] == k3[3] {
		t.Errorf("a config change: %v vs %v", k1, k3)
	}
	// The host's apt sources are part of the base key.
	dir := t.TempDir()
	old := aptSourcesDir
	aptSourcesDir = dir
	defer func() { aptSourcesDir = old }()
	writeFiles(t, dir, map[string]string{"x.list": "deb http://example.invalid/debian bookworm main\n"})
	if k := keys("from: {debian: {suite: bookworm}}\npackages: [git, curl]\n" + tail); k[0] == k1[0] {
		t.Errorf("apt sources change kept the base key")
	}
}

func TestBuildConcurrent(t *testing.T) {
	b := newBuilder(t, "")
	base := busybox(t, b)
	ctxDir := t.TempDir()
	writeFiles(t, ctxDir, map[string]string{"a.txt": "alpha\n", "dir/c.txt": "gamma\n"})
	r := mustParse(t, chainRecipe(base))
	const n = 3
	errs := make(chan error, n)
	digests := make(chan model.TemplateDigest, n)
	for range n {
		go func() {
			res, err := b.BuildWith(context.Background(), r, ctxDir, buildOpts(b, nil))
			errs <- err
			digests <- res.Imported.Digest
		}()
	}
	var first model.TemplateDigest
	for i := range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		d := <-digests
		if i == 0 {
			first = d
		} else if d != first {
			t.Errorf("concurrent builds gave %s and %s", first, d)
		}
	}
}

// Without a build sandbox, run and packages steps on a template base are
// refused before anything is built (they would run the template's own
// programs); copy and config steps are built.
func TestTemplateBaseRunsNeedASandbox(t *testing.T) {
	b := newBuilder(t, "")
	base := busybox(t, b)
	for _, text := range []string{
		fmt.Sprintf("from: {template: %q}\nsteps:\n  - run: \"touch /ran\"\n", base),
		fmt.Sprintf("from: {template: %q}\npackages: [curl]\n", base),
	} {
		_, err := b.Build(context.Background(), mustParse(t, text), "", nil)
		if !errors.Is(err, ErrNoSandbox) {
			t.Errorf("build(%q) = %v, want ErrNoSandbox", text, err)
		}
	}
	if ents, _ := os.ReadDir(b.CacheDir); len(ents) != 0 {
		t.Errorf("a refused build left cache entries: %v", ents)
	}
	res, _ := build(t, b, mustParse(t, fmt.Sprintf("from: {template: %q}\nenv: {A: b}\n", base)), "")
	if res.Imported.Digest == base {
		t.Errorf("a config-only recipe on a template base made nothing new")
	}
}
