package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/s3test"
)

// e2bDir holds the pinned E2B SDKs (package.json, package-lock.json) and the
// Node scripts that drive them.
const e2bDir = "e2b"

// e2bKeyPattern is the form of an API key E2B SDKs accept (the Python SDK
// and some JS versions check it before sending anything).
var e2bKeyPattern = regexp.MustCompile(`^e2b_[0-9a-f]+$`)

// TestE2BSDK is the proof that existing E2B clients run unchanged: the real
// npm SDKs (e2b 2.51.0 and @e2b/code-interpreter 2.8.0, plus e2b 2.50.0,
// the older generation that creates with POST /sandboxes), pinned by
// integration/e2b/package-lock.json, run the smoke plan of the E2B protocol
// specification against an Airlock server on gVisor (pause and resume keep
// processes alive only with runsc's memory checkpoints), configured only
// through E2B_API_KEY, E2B_API_URL and E2B_SANDBOX_URL (docs/e2b.md).
//
// The SDKs are installed once per lock file into
// $AIRLOCK_TEST_CACHE/npm-e2b-<sha256 of package-lock.json>; that install
// is the test's only traffic off the machine.
func TestE2BSDK(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runsc")
	if _, err := exec.LookPath("mmdebstrap"); err != nil && os.Getenv("CI") == "true" {
		t.Fatal("the Debian default template needs mmdebstrap (scripts/install-deps.sh installs it)")
	}
	airtest.RequireBinary(t, "mmdebstrap")
	node, npm := requireNode(t)
	recipe, err := filepath.Abs(filepath.Join("..", "templates", "code-interpreter", "recipe.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(recipe); err != nil {
		t.Fatalf("the code-interpreter template's recipe: %v", err)
	}
	cache, err := s3test.CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, 40*time.Minute)
	modules := npmInstall(ctx, t, npm, cache)

	s := newServer(t, build(t), serverConfig{runtime: "runsc", extraArgs: []string{
		"--default-template", "debian", "--build-cache-dir", filepath.Join(cache, "recipe-cache-v1")}})
	s.start()
	// The Debian default builds in the background at the first start; a
	// run waits for it (and shows it), so the SDK's create does not.
	start := time.Now()
	if stdout, stderr, code := s.cli(ctx, "run", "--", "true"); code != 0 {
		t.Fatalf("wait for the default template: exit %d\n%s\n%s", code, stdout, tail(stderr, 40))
	}
	t.Logf("the default template (Debian) is ready after %v", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	if stdout, stderr, code := s.cli(ctx, "template", "build", "-f", recipe, "--name", "code-interpreter"); code != 0 {
		t.Fatalf("build the code-interpreter template: exit %d\n%s\n%s", code, stdout, tail(stderr, 60))
	}
	t.Logf("the code-interpreter template is built in %v", time.Since(start).Round(time.Millisecond))
	key := e2bKey(ctx, t, s)

	work := t.TempDir()
	scripts, err := filepath.Glob(filepath.Join(e2bDir, "*.mjs"))
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no scripts in %s (%v)", e2bDir, err)
	}
	for _, p := range scripts {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, filepath.Base(p)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// ES modules resolve packages from the importing file's directory up
	// (NODE_PATH does not apply to them): the scripts sit beside a link
	// to the cached node_modules.
	if err := os.Symlink(filepath.Join(modules, "node_modules"), filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	env := e2bEnv(key, s.url)
	for _, script := range []string{"smoke.mjs", "smoke-old.mjs"} {
		runNode(ctx, t, node, work, env, script)
	}
}

// requireNode returns the node and npm commands, if node is one the SDK
// supports (>= 20.18.1 on 20, else >= 22). Outside CI a missing or old
// Node skips the test; in CI (where .ci/run installs it) it fails.
func requireNode(t *testing.T) (node, npm string) {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf(format+" (.ci/run installs it: scripts/install-node.sh)", args...)
		}
		t.Skipf(format+" (scripts/install-node.sh installs it)", args...)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("the E2B SDK test needs Node.js: %v", err)
	}
	npm, err = exec.LookPath("npm")
	if err != nil {
		missing("the E2B SDK test needs npm: %v", err)
	}
	// Node checks its own version: no parsing here.
	check := `const [a, b, c] = process.versions.node.split('.').map(Number);` +
		`process.exit((a === 20 && (b > 18 || (b === 18 && c >= 1))) || a >= 22 ? 0 : 1)`
	if out, err := exec.Command(node, "-e", check).CombinedOutput(); err != nil {
		v, _ := exec.Command(node, "--version").Output()
		missing("the E2B SDK needs Node.js >= 20.18.1 (20.x) or >= 22; %s is %s (%v %s)", node, bytes.TrimSpace(v), err, out)
	}
	return node, npm
}

// npmInstall installs integration/e2b's locked packages, once per lock
// file, into cache/npm-e2b-<sha256 of package-lock.json> and returns that
// directory (its node_modules holds the SDKs).
func npmInstall(ctx context.Context, t *testing.T, npm, cache string) string {
	t.Helper()
	lock, err := os.ReadFile(filepath.Join(e2bDir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := os.ReadFile(filepath.Join(e2bDir, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(lock)
	dir := filepath.Join(cache, "npm-e2b-"+hex.EncodeToString(sum[:]))
	// npm ci writes node_modules/.package-lock.json last; the directory
	// is renamed into place only after npm ci succeeded.
	if _, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); err == nil {
		t.Logf("E2B SDKs: cached in %s", dir)
		return dir
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(cache, "npm-e2b-partial-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp) // gone after the rename unless the install failed
	for name, b := range map[string][]byte{"package.json": manifest, "package-lock.json": lock} {
		if err := os.WriteFile(filepath.Join(tmp, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	cmd := exec.CommandContext(ctx, npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund")
	cmd.Dir = tmp
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("npm ci of %s/package-lock.json: %v\n%s", e2bDir, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Another run installed the same lock meanwhile: use that.
		if _, serr := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); serr != nil {
			t.Fatalf("move the npm install into %s: %v", dir, err)
		}
	}
	t.Logf("E2B SDKs: npm ci into %s took %v", dir, time.Since(start).Round(time.Millisecond))
	return dir
}

// e2bKey mints an E2B-form API key (member of the admin's own project, so
// the harness's cleanup sees its sandboxes) with the CLI.
func e2bKey(ctx context.Context, t *testing.T, s *server) string {
	t.Helper()
	var projects apiv1.ProjectList
	s.cliJSON(ctx, &projects, "admin", "project", "list")
	project := ""
	for _, p := range projects.Projects {
		if p.Name == "default" {
			project = p.ID
		}
	}
	if project == "" {
		t.Fatalf("no project named default: %+v", projects)
	}
	var key apiv1.APIKey
	s.cliJSON(ctx, &key, "admin", "key", "create", "--format", "e2b", "--project", project, "--role", "member", "--name", "e2b-sdk-test")
	if !e2bKeyPattern.MatchString(key.Token) {
		t.Fatalf("admin key create --format e2b made %q, not e2b_<hex>", key.Token)
	}
	return key.Token
}

// e2bDomain is the E2B_DOMAIN the test sets (optional for users): the
// domain of sandbox hosts, <port>-<id>.<domain>, when the server names none.
const e2bDomain = "sandbox.airlock.test"

// e2bEnv is this process's environment without any E2B_ variable of its
// own, plus those a user sets to point an E2B client at Airlock.
func e2bEnv(key, url string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "E2B_") && !strings.HasPrefix(kv, "SMOKE_") && !strings.HasPrefix(kv, "NODE_OPTIONS=") {
			env = append(env, kv)
		}
	}
	return append(env, "E2B_API_KEY="+key, "E2B_API_URL="+url, "E2B_SANDBOX_URL="+url, "E2B_DOMAIN="+e2bDomain)
}

// runNode runs `node SCRIPT` in dir, its output streamed into the test log
// line by line, and fails the test if it exits non-zero.
func runNode(ctx context.Context, t *testing.T, node, dir string, env []string, script string) {
	t.Helper()
	lw := &lineLog{t: t, prefix: script + "| "}
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout = lw
	cmd.Stderr = lw
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	err := cmd.Run()
	lw.flush()
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		t.Fatalf("node %s failed after %v: %v (its output is above)", script, time.Since(start).Round(time.Millisecond), err)
	case err != nil:
		t.Fatalf("run node %s: %v", script, err)
	}
	t.Logf("node %s passed in %v", script, time.Since(start).Round(time.Millisecond))
}

// lineLog is an io.Writer that logs each complete line to the test as it
// arrives (stdout and stderr write from two goroutines of exec).
type lineLog struct {
	t      *testing.T
	prefix string
	mu     sync.Mutex
	buf    []byte
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		l.t.Log(l.prefix + string(l.buf[:i]))
		l.buf = l.buf[i+1:]
	}
}

// flush logs a last line without a newline.
func (l *lineLog) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.t.Log(l.prefix + string(l.buf))
		l.buf = nil
	}
}
