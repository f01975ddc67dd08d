package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// consoleDir holds the browser test's pinned playwright-core
// (package.json, package-lock.json) and its script, console.mjs.
const consoleDir = "console"

// chromiumPath is Debian's chromium (scripts/install-deps.sh installs it);
// playwright-core drives it, and no browser is ever downloaded.
const chromiumPath = "/usr/bin/chromium"

// TestConsoleBrowser drives the web console (/ui/) in a real browser:
// Debian's chromium under npm's playwright-core (pinned by
// integration/console/package-lock.json, installed once per lock file into
// $AIRLOCK_TEST_CACHE/npm-console-<sha256>) runs console.mjs against a
// server on runc. The script signs in (a bad key is refused), creates a
// sandbox with the form and sees it run in the live list, types in its
// terminal, uploads and downloads a file, follows a process's output,
// watches it pause and resume live, sees a denied egress decision, visits
// every page, deletes the sandbox and signs out, and the page raised no
// uncaught error and no Content-Security-Policy violation meanwhile; each
// page's screenshot is written to $AIRLOCK_ARTIFACTS/console (default
// <repo>/artifacts/console). docs/console.md describes the steps.
//
// No traffic leaves the machine: the page talks to the server on
// loopback; the denied egress attempt is a DNS query of a sandbox whose
// policy denies everything, answered by Airlock's own resolver (whose
// upstream is, in the harness, a closed local port).
func TestConsoleBrowser(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runc")
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the console's browser test needs Debian's chromium at %s (scripts/install-deps.sh installs it): %v", chromiumPath, err)
		}
		t.Skipf("needs Debian's chromium at %s (scripts/install-deps.sh installs it)", chromiumPath)
	}
	node, npm := requireNode(t, "the console's browser test")
	cache, err := airtest.TestCache()
	if err != nil {
		t.Fatal(err)
	}
	artifacts := consoleArtifacts(t)
	ctx := ctxFor(t, 20*time.Minute)
	modules := npmInstall(ctx, t, npm, cache, consoleDir, "console")

	s := newServer(t, build(t), serverConfig{runtime: "runc"})
	s.start()
	buildID := consoleBuild(ctx, t, s)
	member := consoleMemberKey(ctx, t, s, "console-browser-test")
	revoked := consoleMemberKey(ctx, t, s, "console-revoked")
	if stdout, stderr, code := s.cli(ctx, "admin", "key", "revoke", revoked.ID); code != 0 {
		t.Fatalf("admin key revoke: exit %d\n%s\n%s", code, stdout, stderr)
	}

	work := stageScripts(t, consoleDir, modules)
	env := []string{}
	for _, kv := range os.Environ() {
		// CONSOLE_TIMEOUT_MS may come from outside (the longest wait).
		if (!strings.HasPrefix(kv, "CONSOLE_") || strings.HasPrefix(kv, "CONSOLE_TIMEOUT_MS=")) && !strings.HasPrefix(kv, "NODE_OPTIONS=") {
			env = append(env, kv)
		}
	}
	env = append(env,
		"CONSOLE_URL="+s.url,
		"CONSOLE_MEMBER_KEY="+member.Token,
		"CONSOLE_REVOKED_KEY="+revoked.Token,
		"CONSOLE_ADMIN_KEY="+s.key,
		"CONSOLE_BUILD_ID="+buildID,
		"CONSOLE_ARTIFACTS="+artifacts,
		"CONSOLE_CHROMIUM="+chromiumPath,
	)
	t.Logf("screenshots go to %s", artifacts)
	defer func() {
		shots, _ := filepath.Glob(filepath.Join(artifacts, "*.png"))
		t.Logf("screenshots in %s: %d files", artifacts, len(shots))
	}()
	runNode(ctx, t, node, work, env, "console.mjs")

	// The script deleted the sandbox it created through the console: the
	// server holds none that is not deleted (or on its way).
	c := s.client()
	list, err := c.ListAllSandboxes(ctx, client.ListSandboxesQuery{States: model.AllSandboxStates()})
	if err != nil {
		t.Fatal(err)
	}
	created := 0
	for _, sb := range list.Sandboxes {
		created++
		if sb.State != string(model.StateDeleting) && sb.State != string(model.StateDeleted) {
			t.Errorf("sandbox %s is %s after the console deleted it", sb.ID, sb.State)
		}
	}
	if created == 0 {
		t.Error("the server holds no sandbox: the console created none")
	}
}

// consoleArtifacts returns $AIRLOCK_ARTIFACTS/console (default
// <repo>/artifacts/console, which .gitignore ignores), emptied of the
// screenshots of an earlier run.
func consoleArtifacts(t *testing.T) string {
	t.Helper()
	root := os.Getenv("AIRLOCK_ARTIFACTS")
	if root == "" {
		root = filepath.Join("..", "artifacts")
	}
	dir, err := filepath.Abs(filepath.Join(root, "console"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	old, _ := filepath.Glob(filepath.Join(dir, "*.png"))
	for _, p := range old {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// consoleBuild imports a small local tree as a template, so the console
// has a build (and a build log) to show, and returns the build's ID.
func consoleBuild(ctx context.Context, t *testing.T, s *server) string {
	t.Helper()
	tree := filepath.Join(t.TempDir(), "rootfs")
	if err := os.MkdirAll(filepath.Join(tree, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "etc", "motd"), []byte("built for the console test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := s.cli(ctx, "-o", "json", "template", "import", tree, "--name", "console-import")
	var b apiv1.Build
	if code != 0 || json.Unmarshal([]byte(stdout), &b) != nil || b.State != string(model.BuildSucceeded) {
		t.Fatalf("template import: exit %d\n%s\n%s", code, stdout, stderr)
	}
	return b.ID
}

// consoleMemberKey mints a member key of the project named default (the
// admin key's, so the harness's cleanup sees its sandboxes).
func consoleMemberKey(ctx context.Context, t *testing.T, s *server, name string) apiv1.APIKey {
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
	s.cliJSON(ctx, &key, "admin", "key", "create", "--project", project, "--role", "member", "--name", name)
	if !strings.HasPrefix(key.Token, "alk_") {
		t.Fatalf("admin key create made %q, not alk_…", key.Token)
	}
	return key
}
