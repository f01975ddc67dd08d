package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/template/recipe"
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
// is the test's only traffic off the machine. The server runs in the egress
// tests' fake internet, so the scripts' internet steps (network settings,
// network.rules and secrets: parity-network.mjs) run here too.
func TestE2BSDK(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runsc")
	if _, err := exec.LookPath("mmdebstrap"); err != nil && os.Getenv("CI") == "true" {
		t.Fatal("the Debian default template needs mmdebstrap (scripts/install-deps.sh installs it)")
	}
	airtest.RequireBinary(t, "mmdebstrap")
	node, npm := requireNode(t, "the E2B SDK test")
	recipePath, err := filepath.Abs(filepath.Join("..", "templates", "code-interpreter", "recipe.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(recipePath); err != nil {
		t.Fatalf("the code-interpreter template's recipe: %v", err)
	}
	cache, err := airtest.TestCache()
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, 40*time.Minute)
	modules := npmInstall(ctx, t, npm, cache, e2bDir, "e2b")
	debian := fillRecipeCache(t, cache, recipe.Default(), t.TempDir())
	recipeYAML, err := os.ReadFile(recipePath)
	if err != nil {
		t.Fatal(err)
	}
	ci, err := recipe.Parse(recipeYAML)
	if err != nil {
		t.Fatalf("the code-interpreter template's recipe: %v", err)
	}
	codeInterp := fillRecipeCache(t, cache, ci, filepath.Dir(recipePath))

	// The server runs inside the egress tests' fake internet
	// (internal/egress/fakenet): its public addresses and names serve HTTP
	// and HTTPS, so the scripts' steps that need an internet run too
	// (SMOKE_FAKE_INTERNET, e2bFakeInternetEnv).
	// A registry there too, for parity-registry.mjs (e2b_fromimage_test.go).
	regOpt, regEnv := sdkRegistry(t)
	n := newFakenet(t, regOpt)
	// The server's store gets both templates from the shared store by
	// hard link (TestDefaultDebianTemplate covers a server importing the
	// default from the build cache itself).
	s := newEgressServerWith(t, build(t), "runsc", n, func(s *server) { seedTemplates(t, cache, s, debian, codeInterp) },
		"--egress-default", "public", "--default-template", "debian", "--build-cache-dir", filepath.Join(cache, "recipe-cache-v1"))
	// The Debian default is ready at start (its recipe's result is in the
	// server's store); a run would wait for its build otherwise.
	start := time.Now()
	if stdout, stderr, code := s.cli(ctx, "run", "--", "true"); code != 0 {
		t.Fatalf("wait for the default template: exit %d\n%s\n%s", code, stdout, tail(stderr, 40))
	}
	t.Logf("the default template (Debian) is ready after %v", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	if stdout, stderr, code := s.cli(ctx, "template", "build", "-f", recipePath, "--name", "code-interpreter"); code != 0 {
		t.Fatalf("build the code-interpreter template: exit %d\n%s\n%s", code, stdout, tail(stderr, 60))
	}
	t.Logf("the code-interpreter template is built in %v", time.Since(start).Round(time.Millisecond))
	key := e2bKey(ctx, t, s, "member")
	// Template builds (parity-templates.mjs) take an admin key, as
	// Airlock's own builds do.
	adminKey := e2bKey(ctx, t, s, "admin")

	work := stageScripts(t, e2bDir, modules)
	env := append(append(e2bEnv(key, s.url), "PARITY_ADMIN_API_KEY="+adminKey), e2bFakeInternetEnv()...)
	env = append(env, regEnv...)
	// Another project's key, for the scripts' attacker-side checks (its
	// project never holds a sandbox: it only tries the first one's).
	env = append(env, "AIRLOCK_TEST_OTHER_E2B_KEY="+otherE2BKey(ctx, t, s))
	scripts := []string{"smoke.mjs", "smoke-old.mjs"}
	// parity-*.mjs: one script per E2B feature beyond the smoke plan
	// (fork, snapshots, volumes, templates as code, metrics, …), each on
	// its own so a failure names the feature.
	parity, err := filepath.Glob(filepath.Join(e2bDir, "parity-*.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parity {
		scripts = append(scripts, filepath.Base(p))
	}
	// The scripts are independent (each makes, names and kills its own
	// sandboxes, templates, volumes, secrets and snapshots under random
	// tags, and lists only by them), so they run side by side: in
	// e2bScriptsAtOnce lanes (parallel subtests: as many at once as
	// -test.parallel allows, scripts/testrun passes 3), each taking the
	// next script from one queue, slowest first, so the longest does not
	// start last. The lanes end before the server's cleanup.
	slices.SortStableFunc(scripts, func(a, b string) int { return e2bScriptRank(a) - e2bScriptRank(b) })
	queue := make(chan string, len(scripts))
	for _, script := range scripts {
		queue <- script
	}
	close(queue)
	for lane := 1; lane <= e2bScriptsAtOnce; lane++ {
		t.Run(fmt.Sprintf("lane%d", lane), func(t *testing.T) {
			t.Parallel()
			for script := range queue {
				t.Run(strings.TrimSuffix(script, ".mjs"), func(t *testing.T) {
					// node runs in the server's namespace, where its listener is.
					runNodeWith(ctx, t, s.command, node, work, env, script)
				})
			}
		})
	}
}

// e2bScriptsAtOnce bounds the SDK scripts TestE2BSDK runs side by side.
const e2bScriptsAtOnce = 3

// e2bScriptRank orders the scripts slowest first (by their times in CI:
// templates 48 s, network 23 s, control 21 s, smoke 12 s, the rest ≤ 12 s),
// so that the longest does not start last.
func e2bScriptRank(script string) int {
	if i := slices.Index([]string{"parity-templates.mjs", "parity-network.mjs", "parity-control.mjs", "smoke.mjs"}, script); i >= 0 {
		return i
	}
	return 4
}

// e2bFakeInternetEnv tells the scripts that an internet is there (the
// fake one, newFakenet) and its addresses and names:
//
//	SMOKE_NET_A, SMOKE_NET_B   two public addresses serving HTTP and HTTPS
//	SMOKE_NET_C, SMOKE_NET_D   two served addresses of one /24, SMOKE_NET_CIDR
//	SMOKE_NET_NAME             a name (resolves to SMOKE_NET_A)
//	SMOKE_NET_NAME2            another name (resolves to SMOKE_NET_C)
//
// Its servers answer "fakenet proto=…" on every path, and /headers with
// the request's headers as JSON (values of X-Digest-* headers as their
// SHA-256 only).
func e2bFakeInternetEnv() []string {
	return []string{
		"SMOKE_FAKE_INTERNET=1",
		"SMOKE_NET_A=" + allowedAddr.String(), // allowed.example
		"SMOKE_NET_B=" + sharedAddr.String(),
		"SMOKE_NET_C=" + echoAddr.String(), // echo.example
		"SMOKE_NET_D=" + blockedAddr.String(),
		"SMOKE_NET_CIDR=203.0.113.0/24",
		"SMOKE_NET_NAME=" + allowedName,
		"SMOKE_NET_NAME2=echo.example",
	}
}

// otherE2BKey mints an E2B-form API key of a project of its own.
func otherE2BKey(ctx context.Context, t *testing.T, s *server) string {
	t.Helper()
	var prj apiv1.Project
	s.cliJSON(ctx, &prj, "admin", "project", "create", "e2b-other")
	var key apiv1.APIKey
	s.cliJSON(ctx, &key, "admin", "key", "create", "--format", "e2b", "--project", prj.ID, "--role", "member", "--name", "e2b-other")
	if !e2bKeyPattern.MatchString(key.Token) {
		t.Fatalf("admin key create --format e2b made %q, not e2b_<hex>", key.Token)
	}
	return key.Token
}

// e2bKey mints an E2B-form API key of role (in the admin's own project, so
// the harness's cleanup sees its sandboxes) with the CLI.
func e2bKey(ctx context.Context, t *testing.T, s *server, role string) string {
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
	s.cliJSON(ctx, &key, "admin", "key", "create", "--format", "e2b", "--project", project, "--role", role, "--name", "e2b-sdk-test-"+role)
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
