// Command testrun runs Airlock's test suite in steps that overlap, and ends
// with each step's time and the slowest tests, so the budget is watched.
// scripts/test.sh calls it after installing what the tests need; run it as
// `go run ./scripts/testrun [flags]` from the module root.
//
// Tiers:
//
//   - fast (-fast): gofmt, go vet, the architecture tests and every
//     package's unit tests with -short (no real runtime, VM, PostgreSQL,
//     browser or npm: the helpers that need one skip under -short), no race
//     detector. What a developer runs after each change.
//   - full (default): the static checks, then side by side: the unit
//     packages with -race; the integration package, built once and run as
//     -groups processes, each in a network namespace of its own
//     (netnstest.Main), its tests shared out by their last recorded time;
//     the Kubernetes manifests against a real kube-apiserver.
//
// -soak N runs the integration package N times in a row (its groups side
// by side) while the unit packages run over and over beside it, as load: a
// way to find the next test that fails only under load before CI does.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	var o options
	flag.BoolVar(&o.fast, "fast", false, "the fast tier: static checks and unit tests with -short, no race detector")
	flag.IntVar(&o.groups, "groups", 3, "integration groups run side by side, each in a network namespace of its own")
	flag.IntVar(&o.soak, "soak", 0, "run the integration package this many times in a row under the unit tests' load")
	flag.StringVar(&o.run, "run", "", "only tests matching this regular expression (go test -run)")
	flag.StringVar(&o.logDir, "log-dir", "", "where each step's log goes (default: a new temporary directory)")
	flag.BoolVar(&o.skipKube, "skip-kube", false, "leave out the Kubernetes manifests' test (full tier)")
	flag.Parse()
	if o.groups < 1 {
		fmt.Fprintln(os.Stderr, "testrun: -groups must be at least 1")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A run started under nohup inherits SIGHUP ignored, and so would
	// every process the tests start (execve keeps SIG_IGN): tests that
	// send HUP would wait for ever. A handler (which execve resets to the
	// default) keeps this run deaf to HUP as nohup meant, and its children
	// not.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	code, err := run(ctx, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testrun: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

type options struct {
	fast     bool
	groups   int
	soak     int
	run      string
	logDir   string
	skipKube bool
}

// runner holds what every step shares: where logs go, the results so far.
type runner struct {
	o      options
	root   string // module root
	cache  string // $AIRLOCK_TEST_CACHE
	logDir string

	integrationBuilt bool // only the integration step (one at a time) sets it

	mu      sync.Mutex
	steps   []*step
	results []result
}

// step is one timed part of the run.
type step struct {
	name       string
	start, end time.Time
	err        error
}

func run(ctx context.Context, o options) (int, error) {
	root, err := os.Getwd()
	if err != nil {
		return 0, err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return 0, errors.New("run from the module root (go run ./scripts/testrun)")
	}
	r := &runner{o: o, root: root, cache: testCache()}
	ownDir := false
	if r.logDir = o.logDir; r.logDir == "" {
		if r.logDir, err = os.MkdirTemp("", "airlock-testrun-"); err != nil {
			return 0, err
		}
		ownDir = true
	}
	if err := os.MkdirAll(r.logDir, 0o755); err != nil {
		return 0, err
	}
	fmt.Printf("testrun: logs in %s, test cache %s\n", r.logDir, r.cache)
	start := time.Now()
	switch {
	case o.soak > 0:
		err = r.soakRun(ctx)
	case o.fast:
		err = r.fastRun(ctx)
	default:
		err = r.fullRun(ctx)
	}
	r.report(os.Stdout, time.Since(start))
	// The integration test binary (~50 MB) is built per run: it goes
	// whatever the outcome. A run that passed leaves nothing of its
	// own in /tmp; a failed one keeps its logs (named above).
	_ = os.Remove(filepath.Join(r.logDir, "integration.test"))
	if err != nil {
		return 1, err
	}
	if ownDir {
		_ = os.RemoveAll(r.logDir)
		fmt.Printf("testrun: passed; its logs are removed (keep them with --log-dir DIR)\n")
	}
	return 0, nil
}

// testCache is the tests' cache of expensive inputs, as the tests find it.
func testCache() string {
	if d := os.Getenv("AIRLOCK_TEST_CACHE"); d != "" {
		return d
	}
	return "/var/cache/airlock-test"
}

// timed runs fn as the step name, recording its time and outcome.
func (r *runner) timed(name string, fn func() error) error {
	s := &step{name: name, start: time.Now()}
	r.mu.Lock()
	r.steps = append(r.steps, s)
	r.mu.Unlock()
	fmt.Printf("testrun: %s: started\n", name)
	err := fn()
	r.mu.Lock()
	s.end, s.err = time.Now(), err
	r.mu.Unlock()
	if err != nil {
		fmt.Printf("testrun: %s: FAILED after %v: %v\n", name, s.end.Sub(s.start).Round(time.Second), err)
	} else {
		fmt.Printf("testrun: %s: ok in %v\n", name, s.end.Sub(s.start).Round(time.Second))
	}
	return err
}

// together runs the functions side by side and joins their errors.
func together(fns ...func() error) error {
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Go(func() { errs[i] = fn() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// command is a command run in dir with the run's environment plus env.
func (r *runner) command(ctx context.Context, dir string, env []string, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	// Its own process group, so that an interrupt ends what it started too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 30 * time.Second
	return cmd
}

// logged runs cmd with its output into the step's log file and, when it
// fails, the log's last lines on stdout.
func (r *runner) logged(cmd *exec.Cmd, name string) error {
	path := filepath.Join(r.logDir, name+".log")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Run(); err != nil {
		b, _ := os.ReadFile(path)
		fmt.Printf("----- %s (last lines of %s)\n%s\n-----\n", name, path, lastLines(string(b), 60))
		return fmt.Errorf("%s: %w", strings.Join(cmd.Args, " "), err)
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("… (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
