package apiv1

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// codeConstants returns the value of every Code… constant of this package,
// read from its source, by constant name.
func codeConstants(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if !strings.HasPrefix(id.Name, "Code") || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("%s: %s is not a string literal", fset.Position(id.Pos()), id.Name)
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					consts[id.Name] = v
				}
			}
		}
	}
	if len(consts) < 50 {
		t.Fatalf("found only %d Code constants: %v", len(consts), consts)
	}
	return consts
}

// TestErrorSpecsCoverCodes: every code constant has exactly one entry in
// the vocabulary, and every entry is a constant's code.
func TestErrorSpecsCoverCodes(t *testing.T) {
	consts := codeConstants(t)
	byValue := map[string]string{}
	for name, v := range consts {
		if other, ok := byValue[v]; ok {
			t.Errorf("%s and %s are both %q", name, other, v)
		}
		byValue[v] = name
	}
	seen := map[string]bool{}
	for _, s := range ErrorSpecs() {
		if seen[s.Code] {
			t.Errorf("%q has two entries", s.Code)
		}
		seen[s.Code] = true
		if _, ok := byValue[s.Code]; !ok {
			t.Errorf("entry %q is no Code constant", s.Code)
		}
	}
	for v, name := range byValue {
		if !seen[v] {
			t.Errorf("%s (%q) has no entry in errorSpecs", name, v)
		}
	}
}

// connectCodes are the wire names of Connect's codes (connect.Code's
// String); internal/e2b/connecterr's test parses every entry's with
// Connect itself.
var connectCodes = []string{
	"canceled", "unknown", "invalid_argument", "deadline_exceeded", "not_found", "already_exists",
	"permission_denied", "resource_exhausted", "failed_precondition", "aborted", "out_of_range",
	"unimplemented", "internal", "unavailable", "data_loss", "unauthenticated",
}

// TestErrorSpecsConsistent: statuses are error statuses, the second one
// differs from the first, Connect codes exist, an E2B operation status is
// a server error, exit codes are failures a process can exit with.
func TestErrorSpecsConsistent(t *testing.T) {
	for _, s := range ErrorSpecs() {
		if s.Status < 400 || s.Status > 599 {
			t.Errorf("%s: status %d is no error status", s.Code, s.Status)
		}
		if s.AltStatus != 0 && (s.AltStatus < 400 || s.AltStatus > 599 || s.AltStatus == s.Status) {
			t.Errorf("%s: alternative status %d (status %d)", s.Code, s.AltStatus, s.Status)
		}
		if !slices.Contains(connectCodes, s.Connect) {
			t.Errorf("%s: Connect code %q is none of %v", s.Code, s.Connect, connectCodes)
		}
		if s.E2BOperationStatus != 0 && (s.E2BOperationStatus < 500 || s.E2BOperationStatus > 599) {
			t.Errorf("%s: E2B operation status %d is no server error", s.Code, s.E2BOperationStatus)
		}
		if s.Exit < 1 || s.Exit > 255 {
			t.Errorf("%s: exit code %d", s.Code, s.Exit)
		}
		if got, ok := LookupError(s.Code); !ok || got != s {
			t.Errorf("LookupError(%q) = %+v, %v", s.Code, got, ok)
		}
		if HTTPStatus(s.Code) != s.Status || ExitCode(s.Code) != s.Exit {
			t.Errorf("%s: HTTPStatus %d, ExitCode %d; entry %+v", s.Code, HTTPStatus(s.Code), ExitCode(s.Code), s)
		}
	}
	if _, ok := LookupError("no_such_code"); ok || HTTPStatus("no_such_code") != 500 || ExitCode("no_such_code") != 1 || ExitCode("") != 1 {
		t.Error("an unknown code is not internal (500) and exit 1")
	}
	// ErrorSpecs is a copy: a caller cannot change the vocabulary.
	specs := ErrorSpecs()
	specs[0].Status = 200
	if HTTPStatus(specs[0].Code) == 200 || ErrorSpecs()[0].Status == 200 {
		t.Error("ErrorSpecs hands out the vocabulary itself")
	}
}

// docsDir is the repository's docs directory.
const docsDir = "../../docs"

// TestErrorsDocumented: docs/errors.md's table has one row per code, with
// the vocabulary's HTTP status (and alternative), Connect code, E2B
// operation status and exit code.
func TestErrorsDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(docsDir, "errors.md"))
	if err != nil {
		t.Fatal(err)
	}
	const header = "| code | HTTP | Connect (E2B envd) | E2B REST, failed operation | CLI exit | meaning |"
	text := string(b)
	i := strings.Index(text, header+"\n")
	if i < 0 {
		t.Fatalf("docs/errors.md has no table headed %q", header)
	}
	lines := strings.Split(text[i:], "\n")[2:] // past the header and its separator
	row := regexp.MustCompile("^\\| `([a-z_]+)` \\| (\\d{3})(?: \\((\\d{3})\\))? \\| `([a-z_]+)` \\| (\\d{3}) \\| (\\d+)[^|]* \\| [^|]+ \\|$")
	rows := map[string]ErrorSpec{}
	for _, l := range lines {
		if !strings.HasPrefix(l, "|") {
			break
		}
		m := row.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("docs/errors.md: row %q is not `code` | status [(alt)] | `connect` | status | exit | meaning", l)
			continue
		}
		if _, dup := rows[m[1]]; dup {
			t.Errorf("docs/errors.md: %s has two rows", m[1])
		}
		atoi := func(s string) int {
			if s == "" {
				return 0
			}
			n, _ := strconv.Atoi(s)
			return n
		}
		rows[m[1]] = ErrorSpec{Code: m[1], Status: atoi(m[2]), AltStatus: atoi(m[3]), Connect: m[4],
			E2BOperationStatus: atoi(m[5]), Exit: atoi(m[6])}
	}
	for _, s := range ErrorSpecs() {
		want := s
		if want.E2BOperationStatus == 0 {
			want.E2BOperationStatus = 500 // the table shows the status answered
		}
		got, ok := rows[s.Code]
		switch {
		case !ok:
			t.Errorf("docs/errors.md has no row for %s; want | `%s` | %s |", s.Code, s.Code, docRow(want))
		case got != want:
			t.Errorf("docs/errors.md: %s documented as %+v, the vocabulary has %+v", s.Code, got, want)
		}
		delete(rows, s.Code)
	}
	for code := range rows {
		t.Errorf("docs/errors.md documents %s, which the vocabulary does not have", code)
	}
}

// docRow is the middle of the row docs/errors.md should have for s.
func docRow(s ErrorSpec) string {
	status := strconv.Itoa(s.Status)
	if s.AltStatus != 0 {
		status += " (" + strconv.Itoa(s.AltStatus) + ")"
	}
	return status + " | `" + s.Connect + "` | " + strconv.Itoa(s.E2BOperationStatus) + " | " + strconv.Itoa(s.Exit)
}

// TestDocsStatusesAgree: wherever the docs pair a status with a code, as
// prose ("409 invalid_transition", "`409 invalid_transition`") or as a
// table row ("| `invalid_transition` | 409 |"), the status is the code's.
func TestDocsStatusesAgree(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(docsDir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md")
	prose := regexp.MustCompile("\\b([1-5][0-9]{2})[ `]+([a-z][a-z_]*[a-z])\\b")
	row := regexp.MustCompile("(?m)^\\| `([a-z][a-z_]*[a-z])` \\| ([1-5][0-9]{2})\\b")
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		check := func(at int, status, code string) {
			s, ok := LookupError(code)
			if !ok {
				return // a word, not a code
			}
			n++
			st, _ := strconv.Atoi(status)
			if st != s.Status && st != s.AltStatus {
				line := strings.Count(string(b[:at]), "\n") + 1
				t.Errorf("%s:%d: %d %s; the code's status is %d", filepath.Base(f), line, st, code, s.Status)
			}
		}
		for _, m := range prose.FindAllSubmatchIndex(b, -1) {
			check(m[0], string(b[m[2]:m[3]]), string(b[m[4]:m[5]]))
		}
		for _, m := range row.FindAllSubmatchIndex(b, -1) {
			check(m[0], string(b[m[4]:m[5]]), string(b[m[2]:m[3]]))
		}
	}
	if n < 100 {
		t.Fatalf("found only %d statuses of codes in the docs; is the pattern still right?", n)
	}
}
