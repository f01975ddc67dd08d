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
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/egress/netnstest"
)

// The Node.js tests (the E2B SDK test, the console's browser test) share
// these: a Node check, an npm install of a directory's lock file cached by
// its hash, the scripts staged beside the cached node_modules, and a run
// whose output streams into the test log.

// requireNode returns the node and npm commands, if node is one the E2B
// SDKs and playwright-core support (>= 20.18.1 on 20, else >= 22). Outside
// CI a missing or old Node skips the test (who names it); in CI (where
// .ci/run installs it) it fails.
func requireNode(t *testing.T, who string) (node, npm string) {
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
		missing("%s needs Node.js: %v", who, err)
	}
	npm, err = exec.LookPath("npm")
	if err != nil {
		missing("%s needs npm: %v", who, err)
	}
	// Node checks its own version: no parsing here.
	check := `const [a, b, c] = process.versions.node.split('.').map(Number);` +
		`process.exit((a === 20 && (b > 18 || (b === 18 && c >= 1))) || a >= 22 ? 0 : 1)`
	if out, err := exec.Command(node, "-e", check).CombinedOutput(); err != nil {
		v, _ := exec.Command(node, "--version").Output()
		missing("%s needs Node.js >= 20.18.1 (20.x) or >= 22; %s is %s (%v %s)", who, node, bytes.TrimSpace(v), err, out)
	}
	return node, npm
}

// npmInstall installs the locked packages of integration/<src> (its
// package.json and package-lock.json), once per lock file, into
// cache/npm-<name>-<sha256 of package-lock.json> and returns that
// directory (its node_modules holds the packages). npm runs no install
// scripts: nothing is downloaded but the locked packages.
func npmInstall(ctx context.Context, t *testing.T, npm, cache, src, name string) string {
	t.Helper()
	lock, err := os.ReadFile(filepath.Join(src, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := os.ReadFile(filepath.Join(src, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(lock)
	dir := filepath.Join(cache, "npm-"+name+"-"+hex.EncodeToString(sum[:]))
	// npm ci writes node_modules/.package-lock.json last; the directory
	// is renamed into place only after npm ci succeeded.
	if _, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); err == nil {
		t.Logf("npm packages of %s: cached in %s", src, dir)
		return dir
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(cache, "npm-"+name+"-partial-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp) // gone after the rename unless the install failed
	for file, b := range map[string][]byte{"package.json": manifest, "package-lock.json": lock} {
		if err := os.WriteFile(filepath.Join(tmp, file), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	cmd := exec.CommandContext(ctx, npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund")
	cmd.Dir = tmp
	cmd.WaitDelay = 10 * time.Second
	// The package's tests run in a network namespace of their own with no
	// route out (main_test.go); npm reaches the registry from the machine's.
	var out []byte
	err = netnstest.InHost(func() (err error) {
		out, err = cmd.CombinedOutput()
		return err
	})
	if err != nil {
		t.Fatalf("npm ci of %s/package-lock.json: %v\n%s", src, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Another run installed the same lock meanwhile: use that.
		if _, serr := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); serr != nil {
			t.Fatalf("move the npm install into %s: %v", dir, err)
		}
	}
	t.Logf("npm packages of %s: npm ci into %s took %v", src, dir, time.Since(start).Round(time.Millisecond))
	return dir
}

// stageScripts copies src's *.mjs into a fresh directory beside a link to
// the cached node_modules (in modules) and returns that directory: ES
// modules resolve packages from the importing file's directory up
// (NODE_PATH does not apply to them).
func stageScripts(t *testing.T, src, modules string) string {
	t.Helper()
	work := t.TempDir()
	scripts, err := filepath.Glob(filepath.Join(src, "*.mjs"))
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no scripts in %s (%v)", src, err)
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
	if err := os.Symlink(filepath.Join(modules, "node_modules"), filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	return work
}

// runNode runs `node SCRIPT` in dir, its output streamed into the test log
// line by line, and fails the test if it exits non-zero.
func runNode(ctx context.Context, t *testing.T, node, dir string, env []string, script string) {
	t.Helper()
	runNodeWith(ctx, t, exec.CommandContext, node, dir, env, script)
}

// runNodeWith is runNode with the command made by mk (a server's
// s.command, to run node in the server's network namespace).
func runNodeWith(ctx context.Context, t *testing.T, mk func(ctx context.Context, name string, args ...string) *exec.Cmd, node, dir string, env []string, script string) {
	t.Helper()
	lw := &lineLog{t: t, prefix: script + "| "}
	cmd := mk(ctx, node, script)
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
