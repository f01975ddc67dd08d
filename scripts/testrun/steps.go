package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

const (
	modulePath  = "github.com/airlockdev/airlock"
	integration = modulePath + "/integration"
	kubeDir     = "deploy/kubernetes/test"
)

// fullRun is the full tier: the shared recipe cache pruned
// (cachegc.go), static checks, then the unit packages, the integration
// groups and the Kubernetes test side by side.
func (r *runner) fullRun(ctx context.Context) error {
	r.pruneTestCache(ctx)
	if err := r.timed("static checks", func() error { return r.static(ctx) }); err != nil {
		return err
	}
	pkgs, err := r.unitPackages(ctx)
	if err != nil {
		return err
	}
	steps := []func() error{
		func() error {
			return r.timed("unit packages (-race)", func() error { return r.unit(ctx, "unit", pkgs, "-race") })
		},
		func() error { return r.timed("integration", func() error { return r.integration(ctx, "integration") }) },
	}
	if !r.o.skipKube {
		steps = append(steps, func() error { return r.timed("kubernetes manifests", func() error { return r.kube(ctx) }) })
	}
	return together(steps...)
}

// fastRun is the fast tier: static checks and the unit tests with -short.
func (r *runner) fastRun(ctx context.Context) error {
	if err := r.timed("static checks", func() error { return r.static(ctx) }); err != nil {
		return err
	}
	pkgs, err := r.unitPackages(ctx)
	if err != nil {
		return err
	}
	return r.timed("unit packages (-short)", func() error { return r.unit(ctx, "unit", pkgs, "-short") })
}

// soakRun runs the integration package o.soak times in a row while the
// unit packages run over and over beside it.
func (r *runner) soakRun(ctx context.Context) error {
	r.pruneTestCache(ctx)
	pkgs, err := r.unitPackages(ctx)
	if err != nil {
		return err
	}
	// The load's rounds are never killed half-way (a test killed by a
	// signal runs no cleanup and leaves its sandboxes, mounts and
	// cgroups behind): once the integration runs are over no new round
	// starts, and the one under way is waited for. Only an interrupt of
	// the whole run (ctx) stops it at once.
	stopLoad := make(chan struct{})
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		for i := 1; ; i++ {
			select {
			case <-stopLoad:
				return
			case <-ctx.Done():
				return
			default:
			}
			name := fmt.Sprintf("load-%d", i)
			if err := r.unit(ctx, name, pkgs, "-race"); err != nil && ctx.Err() == nil {
				fmt.Printf("testrun: the load (unit packages, round %d) failed: %v\n", i, err)
			}
		}
	}()
	var errs []error
	for i := 1; i <= r.o.soak; i++ {
		name := fmt.Sprintf("integration-%d", i)
		errs = append(errs, r.timed(fmt.Sprintf("integration, run %d of %d (under load)", i, r.o.soak), func() error {
			return r.integration(ctx, name)
		}))
	}
	close(stopLoad)
	fmt.Println("testrun: waiting for the load's round under way to finish")
	<-loadDone
	return errors.Join(errs...)
}

// static runs gofmt and go vet on the module and on the Kubernetes test's.
func (r *runner) static(ctx context.Context) error {
	out, err := r.command(ctx, r.root, nil, "git", "ls-files", "*.go").Output()
	if err != nil {
		return fmt.Errorf("git ls-files: %w", err)
	}
	files := strings.Fields(string(out))
	if len(files) == 0 {
		return errors.New("git ls-files names no Go file")
	}
	unformatted, err := r.command(ctx, r.root, nil, "gofmt", append([]string{"-l"}, files...)...).Output()
	if err != nil {
		return fmt.Errorf("gofmt: %w", err)
	}
	if s := strings.TrimSpace(string(unformatted)); s != "" {
		return fmt.Errorf("gofmt needed on:\n%s", s)
	}
	if err := r.logged(r.command(ctx, r.root, nil, "go", "vet", "./..."), "vet"); err != nil {
		return err
	}
	if r.o.fast || r.o.skipKube {
		return nil
	}
	// The Kubernetes manifests' test is a module of its own (client-go and
	// kustomize stay out of Airlock's go.mod).
	return r.logged(r.command(ctx, filepath.Join(r.root, kubeDir), []string{"GOWORK=off"}, "go", "vet", "./..."), "vet-kube")
}

// unitPackages lists every package of the module but the integration one.
func (r *runner) unitPackages(ctx context.Context) ([]string, error) {
	out, err := r.command(ctx, r.root, nil, "go", "list", "./...").Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	var pkgs []string
	for _, p := range strings.Fields(string(out)) {
		if p != integration {
			pkgs = append(pkgs, p)
		}
	}
	return pkgs, nil
}

// unit runs go test on pkgs with the extra flags (and -run, but for the
// soak's load, which is all of them whatever -run says).
//
// The packages are given slowest first by their last recorded times: go
// test starts them in that order (at most GOMAXPROCS at once), so the
// longest ones do not start last and make the tail.
func (r *runner) unit(ctx context.Context, name string, pkgs []string, flags ...string) error {
	args := append([]string{"test", "-json", "-count=1", "-timeout", "30m"}, flags...)
	if r.o.run != "" && r.o.soak == 0 {
		args = append(args, "-run", r.o.run)
	}
	args = append(args, slowestFirst(pkgs, loadTimes(r.timesPath()))...)
	err := r.jsonRun(r.command(ctx, r.root, nil, "go", args...), name)
	if r.o.run == "" && !r.o.fast && r.o.soak == 0 { // the full tier's times only
		r.saveTimes(func(res result) bool { return res.step == name && res.test == "" && res.pkg != integration })
	}
	return err
}

// slowestFirst orders packages by their recorded times, longest first;
// those never timed keep their order after the timed ones.
func slowestFirst(pkgs []string, times testTimes) []string {
	out := slices.Clone(pkgs)
	known := func(p string) time.Duration {
		if _, ok := times[p+"."]; ok {
			return times.of(p, "")
		}
		return 0
	}
	slices.SortStableFunc(out, func(a, b string) int { return cmp.Compare(known(b), known(a)) })
	return out
}

// integration builds the integration package's test binary once and runs
// its tests in r.o.groups processes side by side (each in a network
// namespace of its own: integration/main_test.go), shared out by their last
// recorded times (testtimes.go).
func (r *runner) integration(ctx context.Context, name string) error {
	// Built once per run (a soak's runs share it), never taken from an
	// earlier run's log directory.
	bin := filepath.Join(r.logDir, "integration.test")
	if !r.integrationBuilt {
		if err := r.logged(r.command(ctx, r.root, nil, "go", "test", "-c", "-o", bin, "./integration"), "integration-build"); err != nil {
			return err
		}
		r.integrationBuilt = true
	}
	dir := filepath.Join(r.root, "integration")
	out, err := r.command(ctx, dir, nil, bin, "-test.list", ".").Output()
	if err != nil {
		return fmt.Errorf("list the integration tests: %w", err)
	}
	var tests []string
	for _, t := range strings.Fields(string(out)) {
		if strings.HasPrefix(t, "Test") {
			tests = append(tests, t)
		}
	}
	if r.o.run != "" {
		re, err := regexp.Compile(r.o.run)
		if err != nil {
			return fmt.Errorf("-run: %w", err)
		}
		tests = slices.DeleteFunc(tests, func(t string) bool { return !re.MatchString(t) })
	}
	if len(tests) == 0 {
		return nil
	}
	times := loadTimes(r.timesPath())
	groups := shareOut(tests, r.o.groups, func(t string) time.Duration { return times.of(integration, t) })
	fns := make([]func() error, len(groups))
	for i, g := range groups {
		gname := fmt.Sprintf("%s-g%d", name, i+1)
		pattern := "^(" + strings.Join(g.tests, "|") + ")$"
		fmt.Printf("testrun: %s: %d tests, about %v by their last times\n", gname, len(g.tests), g.total.Round(time.Second))
		fns[i] = func() error {
			// A failed test's whole server log is kept beside the run's.
			env := []string{"AIRLOCK_TEST_LOG_DIR=" + filepath.Join(r.logDir, "server-logs")}
			cmd := r.command(ctx, dir, env, "go", "tool", "test2json", "-t", "-p", integration,
				bin, "-test.v=test2json", "-test.count=1", "-test.timeout=45m", "-test.run", pattern,
				// Subtests that may run side by side (TestE2BSDK's scripts)
				// get 3 at once, not GOMAXPROCS (2 here): they mostly wait.
				"-test.parallel=3")
			return r.jsonRun(cmd, gname)
		}
	}
	err = together(fns...)
	r.saveTimes(func(res result) bool { return res.pkg == integration && res.test != "" })
	return err
}

// kube builds (or finds cached) etcd and kube-apiserver and runs the
// Kubernetes manifests' test against them.
func (r *runner) kube(ctx context.Context) error {
	cmd := r.command(ctx, r.root, nil, "./scripts/kube-binaries.sh")
	logPath := filepath.Join(r.logDir, "kube-binaries.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stderr = logf
	out, err := cmd.Output()
	if err != nil {
		b, _ := os.ReadFile(logPath)
		return fmt.Errorf("scripts/kube-binaries.sh: %w\n%s", err, lastLines(string(b), 40))
	}
	bin := strings.TrimSpace(string(out))
	test := r.command(ctx, filepath.Join(r.root, kubeDir), []string{"GOWORK=off", "KUBE_BIN_DIR=" + bin},
		"go", "test", "-json", "-race", "-count=1", "-timeout", "15m", "./...")
	return r.jsonRun(test, "kube")
}

// timesPath is where the integration tests' last times are kept.
func (r *runner) timesPath() string { return filepath.Join(r.cache, "test-times.json") }

// saveTimes records the times of the results that pass filter (passed or
// failed ones) in the times file, read again now: steps that end at
// different times each add theirs (integration tests, unit packages as
// "package.").
func (r *runner) saveTimes(filter func(result) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := loadTimes(r.timesPath())
	for _, res := range r.results {
		if (res.action == "pass" || res.action == "fail") && filter(res) {
			t.set(res.pkg, res.test, res.elapsed)
		}
	}
	if err := t.save(r.timesPath()); err != nil {
		fmt.Printf("testrun: keep the tests' times: %v\n", err)
	}
}
