package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// This file reads the JSON report of a vitest run of E2B's SDK suite
// (TestE2BSuite) and makes the table docs/e2b.md shows: per test file, how
// many of its tests need a backend (they fail when nothing answers, see
// classify), and how many of those pass, fail or are skipped against
// Airlock, with the first line of each failure.

// vitestReport is the part of vitest's JSON reporter output (Jest's
// format) the table needs.
type vitestReport struct {
	TestResults []struct {
		Name             string `json:"name"` // the file's absolute path
		Status           string `json:"status"`
		Message          string `json:"message"` // a file that failed to load
		AssertionResults []struct {
			FullName        string   `json:"fullName"`
			Status          string   `json:"status"` // passed, failed, skipped, pending, todo
			FailureMessages []string `json:"failureMessages"`
		} `json:"assertionResults"`
	} `json:"testResults"`
}

// suiteTest is one test of one run.
type suiteTest struct {
	File    string // relative to packages/js-sdk/tests
	Name    string // vitest's full name (describe blocks and title)
	Status  string // pass, fail, skip
	Failure string // the first line of the first failure message
}

// key identifies a test across runs (a name may repeat in a file).
func (s suiteTest) key() string { return s.File + "\x00" + s.Name }

// parseVitest reads a vitest JSON report; file names are made relative to
// testsDir, or to the packages/js-sdk/tests they are under (a report of a
// checkout since removed). A file that failed to load counts as one failed
// test named "(file)".
func parseVitest(r io.Reader, testsDir string) ([]suiteTest, error) {
	var rep vitestReport
	if err := json.NewDecoder(r).Decode(&rep); err != nil {
		return nil, fmt.Errorf("vitest JSON report: %w", err)
	}
	var out []suiteTest
	for _, f := range rep.TestResults {
		file, err := filepath.Rel(testsDir, f.Name)
		if err != nil || strings.HasPrefix(file, "..") {
			file = f.Name
			if _, rel, ok := strings.Cut(f.Name, "/packages/js-sdk/tests/"); ok {
				file = rel
			}
		}
		seen := map[string]int{}
		if len(f.AssertionResults) == 0 && f.Status == "failed" {
			out = append(out, suiteTest{File: file, Name: "(file)", Status: "fail", Failure: firstLine(f.Message)})
			continue
		}
		for _, a := range f.AssertionResults {
			name := a.FullName
			if seen[name]++; seen[name] > 1 {
				name = fmt.Sprintf("%s #%d", name, seen[name])
			}
			st := suiteTest{File: file, Name: name}
			switch a.Status {
			case "passed":
				st.Status = "pass"
			case "failed":
				st.Status = "fail"
				if len(a.FailureMessages) > 0 {
					st.Failure = firstLine(a.FailureMessages[0])
				}
			default: // skipped, pending, todo
				st.Status = "skip"
			}
			out = append(out, st)
		}
	}
	return out, nil
}

// firstLine is the first non-empty line of a failure message, shortened.
func firstLine(msg string) string {
	for _, l := range strings.Split(msg, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			if len(l) > 240 {
				l = l[:240] + "…"
			}
			return l
		}
	}
	return ""
}

// classify says which tests need a backend: those that fail in a run with
// nothing behind the SDK's addresses (connections refused). A test that
// passes there is a unit test (mocked with msw, or pure); one skipped there
// is skipped whatever the backend (a platform condition).
func classify(noBackend []suiteTest) map[string]bool {
	backend := map[string]bool{}
	for _, t := range noBackend {
		backend[t.key()] = t.Status == "fail"
	}
	return backend
}

// fileRow is one line of the table.
type fileRow struct {
	File                string
	Tests, Backend      int
	Pass, Fail, Skip    int // backend tests only
	UnitFail            int // tests that pass without a backend and fail in this run
	Failures, UnitFails []suiteTest
}

// suiteTable groups a run's tests by file. Tests absent from the run
// without a backend count as backend tests.
func suiteTable(run []suiteTest, backend map[string]bool) (rows []fileRow, total fileRow) {
	byFile := map[string]*fileRow{}
	for _, t := range run {
		r := byFile[t.File]
		if r == nil {
			r = &fileRow{File: t.File}
			byFile[t.File] = r
		}
		r.Tests++
		isBackend, known := backend[t.key()]
		if known && !isBackend {
			if t.Status == "fail" {
				r.UnitFail++
				r.UnitFails = append(r.UnitFails, t)
			}
			continue
		}
		r.Backend++
		switch t.Status {
		case "pass":
			r.Pass++
		case "fail":
			r.Fail++
			r.Failures = append(r.Failures, t)
		default:
			r.Skip++
		}
	}
	total.File = "total"
	for _, r := range byFile {
		rows = append(rows, *r)
		total.Tests += r.Tests
		total.Backend += r.Backend
		total.Pass += r.Pass
		total.Fail += r.Fail
		total.Skip += r.Skip
		total.UnitFail += r.UnitFail
	}
	slices.SortFunc(rows, func(a, b fileRow) int { return strings.Compare(a.File, b.File) })
	return rows, total
}

// writeSuiteTable writes the table of one mode as Markdown: files with
// backend tests, a total line, then every failure.
func writeSuiteTable(w io.Writer, mode string, rows []fileRow, total fileRow) {
	fmt.Fprintf(w, "### %s mode\n\n", mode)
	pct := 0.0
	if ran := total.Backend - total.Skip; ran > 0 {
		pct = 100 * float64(total.Pass) / float64(ran)
	}
	fmt.Fprintf(w, "%d of %d backend tests pass (%.1f %% of those not skipped), %d fail, %d skipped; %d unit tests fail in this mode.\n\n",
		total.Pass, total.Backend, pct, total.Fail, total.Skip, total.UnitFail)
	fmt.Fprintln(w, "| file | tests | backend | pass | fail | skip |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		if r.Backend == 0 && r.UnitFail == 0 {
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %d |\n", r.File, r.Tests, r.Backend, r.Pass, r.Fail, r.Skip)
	}
	fmt.Fprintf(w, "| **total** | %d | %d | %d | %d | %d |\n\n", total.Tests, total.Backend, total.Pass, total.Fail, total.Skip)
	var fails []suiteTest
	for _, r := range rows {
		fails = append(fails, r.Failures...)
	}
	if len(fails) > 0 {
		fmt.Fprintln(w, "Failures (first line of the first message):")
		fmt.Fprintln(w)
		for _, f := range fails {
			fmt.Fprintf(w, "- `%s` › %s: %s\n", f.File, f.Name, f.Failure)
		}
		fmt.Fprintln(w)
	}
	var unit []suiteTest
	for _, r := range rows {
		unit = append(unit, r.UnitFails...)
	}
	if len(unit) > 0 {
		fmt.Fprintln(w, "Unit tests (pass with no backend) failing in this mode:")
		fmt.Fprintln(w)
		for _, f := range unit {
			fmt.Fprintf(w, "- `%s` › %s: %s\n", f.File, f.Name, f.Failure)
		}
		fmt.Fprintln(w)
	}
}

// readVitest parses the report at path.
func readVitest(path, testsDir string) ([]suiteTest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseVitest(f, testsDir)
}

func TestSuiteTable(t *testing.T) {
	const report = `{"testResults":[
	 {"name":"/e/tests/a.test.ts","status":"failed","assertionResults":[
	   {"fullName":"a ok","status":"passed","failureMessages":[]},
	   {"fullName":"a bad","status":"failed","failureMessages":["\nError: boom\n  at x"]},
	   {"fullName":"a bad","status":"failed","failureMessages":["second"]},
	   {"fullName":"a skip","status":"skipped","failureMessages":[]},
	   {"fullName":"a unit","status":"failed","failureMessages":["mocked"]}]},
	 {"name":"/e/tests/b/c.test.ts","status":"failed","message":"SyntaxError: x\nmore","assertionResults":[]},
	 {"name":"/gone/packages/js-sdk/tests/u.test.ts","status":"passed","assertionResults":[{"fullName":"u","status":"passed"}]}]}`
	run, err := parseVitest(strings.NewReader(report), "/e/tests")
	if err != nil {
		t.Fatal(err)
	}
	want := []suiteTest{
		{File: "a.test.ts", Name: "a ok", Status: "pass"},
		{File: "a.test.ts", Name: "a bad", Status: "fail", Failure: "Error: boom"},
		{File: "a.test.ts", Name: "a bad #2", Status: "fail", Failure: "second"},
		{File: "a.test.ts", Name: "a skip", Status: "skip"},
		{File: "a.test.ts", Name: "a unit", Status: "fail", Failure: "mocked"},
		{File: "b/c.test.ts", Name: "(file)", Status: "fail", Failure: "SyntaxError: x"},
		{File: "u.test.ts", Name: "u", Status: "pass"},
	}
	if !slices.Equal(run, want) {
		t.Fatalf("parsed\n%+v\nwant\n%+v", run, want)
	}
	// Without a backend: the unit tests pass, the rest fail.
	noBackend := slices.Clone(run)
	for i := range noBackend {
		noBackend[i].Status = "fail"
		if noBackend[i].Name == "a unit" || noBackend[i].Name == "u" {
			noBackend[i].Status = "pass"
		}
	}
	noBackend = append(noBackend, suiteTest{File: "u.test.ts", Name: "always skipped", Status: "skip"})
	run = append(run, suiteTest{File: "u.test.ts", Name: "always skipped", Status: "skip"})
	rows, total := suiteTable(run, classify(noBackend))
	got := fmt.Sprint(total.Tests, total.Backend, total.Pass, total.Fail, total.Skip, total.UnitFail)
	if got != "8 5 1 3 1 1" {
		t.Errorf("total tests backend pass fail skip unitfail = %s, want 8 5 1 3 1 1", got)
	}
	if len(rows) != 3 || rows[0].File != "a.test.ts" || rows[0].UnitFails[0].Name != "a unit" || rows[1].Fail != 1 || rows[2].Backend != 0 {
		t.Errorf("rows %+v", rows)
	}
	var b strings.Builder
	writeSuiteTable(&b, "url", rows, total)
	for _, s := range []string{"1 of 5 backend tests pass (25.0 % of those not skipped)", "| a.test.ts | 5 | 4 | 1 | 2 | 1 |", "- `b/c.test.ts` › (file): SyntaxError: x", "- `a.test.ts` › a unit: mocked"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, b.String())
		}
	}
	if strings.Contains(b.String(), "| u.test.ts") {
		t.Errorf("a file of unit tests only is in the table:\n%s", b.String())
	}
}
