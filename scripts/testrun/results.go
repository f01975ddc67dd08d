package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// event is one line of go test -json (test2json).
type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// result is a finished test (or package, Test empty).
type result struct {
	step    string
	pkg     string
	test    string
	action  string // pass, fail, skip
	elapsed time.Duration
}

// maxKeptLines bounds the output kept per running top-level test for the
// failure report; the whole output is in the step's log file.
const maxKeptLines = 600

// jsonRun runs cmd, which writes go test -json events, keeping them in the
// step's log, printing one line per finished package and the output of
// each failed test, and recording every result.
func (r *runner) jsonRun(cmd *exec.Cmd, name string) error {
	path := filepath.Join(r.logDir, name+".json")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	pr, pw := io.Pipe()
	cmd.Stdout = io.MultiWriter(f, pw)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	parsed := make(chan int)
	go func() {
		failed := r.consume(pr, name)
		_, _ = io.Copy(io.Discard, pr)
		parsed <- failed
	}()
	err = cmd.Wait()
	pw.Close()
	failed := <-parsed
	if s := strings.TrimSpace(stderr.String()); s != "" {
		fmt.Printf("----- %s: standard error\n%s\n-----\n", name, lastLines(s, 60))
	}
	switch {
	case err != nil && failed > 0:
		return fmt.Errorf("%d failed (events in %s)", failed, path)
	case err != nil:
		return fmt.Errorf("%s: %w (events in %s)", strings.Join(cmd.Args[:2], " "), err, path)
	case failed > 0:
		return fmt.Errorf("%d failed, yet the command succeeded (events in %s)", failed, path)
	}
	return nil
}

// consume reads events until the stream ends and returns how many tests
// and packages failed.
func (r *runner) consume(rd io.Reader, step string) int {
	type key struct{ pkg, test string }
	out := map[key][]string{}
	// When each top-level test started: go test's Elapsed of a test leaves
	// out the time its parallel subtests ran after it returned
	// (TestE2BSDK's lanes), which the groups are shared out by.
	started := map[key]time.Time{}
	failed := 0
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Println(sc.Text()) // not an event: the build's own output
			continue
		}
		// A subtest's output is kept with its top-level test's, which a
		// failure prints whole.
		top, _, _ := strings.Cut(e.Test, "/")
		k := key{e.Package, top}
		switch e.Action {
		case "run":
			if e.Test != "" && !strings.Contains(e.Test, "/") {
				started[k] = e.Time
			}
		case "output":
			lines := append(out[k], e.Output)
			if len(lines) > maxKeptLines {
				lines = lines[len(lines)-maxKeptLines:]
			}
			out[k] = lines
		case "pass", "fail", "skip":
			res := result{step: step, pkg: e.Package, test: e.Test, action: e.Action,
				elapsed: time.Duration(e.Elapsed * float64(time.Second))}
			if t0, ok := started[k]; ok && e.Test == top && !e.Time.IsZero() {
				res.elapsed = max(res.elapsed, e.Time.Sub(t0))
				delete(started, k)
			}
			r.mu.Lock()
			r.results = append(r.results, res)
			r.mu.Unlock()
			short := strings.TrimPrefix(strings.TrimPrefix(e.Package, modulePath), "/")
			if short == "" {
				short = "."
			}
			switch {
			case e.Action == "fail" && (e.Test == "" || !strings.Contains(e.Test, "/")):
				failed++
				what := short
				if e.Test != "" {
					what += " " + e.Test
				}
				fmt.Printf("=== FAIL %s [%s] (%.1fs)\n%s=== END %s\n", what, step, e.Elapsed, strings.Join(out[k], ""), what)
			case e.Test == "":
				fmt.Printf("%-4s %s [%s] (%.1fs)\n", strings.ToUpper(e.Action), short, step, e.Elapsed)
			case !strings.Contains(e.Test, "/") && e.Package == integration:
				fmt.Printf("%-4s %s %s [%s] (%.1fs)\n", strings.ToUpper(e.Action), short, e.Test, step, e.Elapsed)
			}
			if !strings.Contains(e.Test, "/") {
				delete(out, k)
			}
		}
	}
	return failed
}

// report prints each step's time, the slowest tests and the totals.
func (r *runner) report(w io.Writer, total time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(w, "\n===== steps\n")
	for _, s := range r.steps {
		state := "ok"
		switch {
		case s.end.IsZero():
			state = "not finished"
		case s.err != nil:
			state = "FAILED"
		}
		end := s.end
		if end.IsZero() {
			end = time.Now()
		}
		fmt.Fprintf(w, "%8s  %-45s %s\n", end.Sub(s.start).Round(time.Second), s.name, state)
	}
	var tests []result
	passed, failed, skipped := 0, 0, 0
	for _, res := range r.results {
		if res.test == "" || strings.Contains(res.test, "/") {
			continue
		}
		tests = append(tests, res)
		switch res.action {
		case "pass":
			passed++
		case "fail":
			failed++
		case "skip":
			skipped++
		}
	}
	slices.SortFunc(tests, func(a, b result) int { return int(b.elapsed - a.elapsed) })
	fmt.Fprintf(w, "===== the 15 slowest tests\n")
	for _, t := range tests[:min(15, len(tests))] {
		fmt.Fprintf(w, "%8s  %s %s [%s]\n", t.elapsed.Round(100*time.Millisecond),
			strings.TrimPrefix(strings.TrimPrefix(t.pkg, modulePath), "/"), t.test, t.step)
	}
	fmt.Fprintf(w, "===== %v in all; logs in %s\n", total.Round(time.Second), r.logDir)
	// The closing line CI reads: tests, not packages.
	fmt.Fprintf(w, "%d passed, %d failed, %d skipped\n", passed, failed, skipped)
}
