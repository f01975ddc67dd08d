package codeinterp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// interp is one code-interpreter server run on the host's python3.
type interp struct {
	url    string
	python string
}

// startServer runs the server on a free loopback port and stops it (and
// its workers) when the test ends.
func startServer(t testing.TB) *interp {
	t.Helper()
	python, lookErr := exec.LookPath("python3")
	if lookErr != nil {
		t.Skip("python3 is not installed on this host: the code-interpreter server needs it")
	}
	// go test runs a package's tests in its directory, three below the
	// repository's root.
	script, err := filepath.Abs(filepath.Join("..", "..", "..", ScriptPath))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, script, "--host", "127.0.0.1", "--port", "0")
	cmd.Dir = t.TempDir()
	// Its own process group; and it stops when the test process ends
	// without its cleanup (a fuzzing worker stopped by the coordinator).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", script, err)
	}
	var logBuf bytes.Buffer
	var logMu sync.Mutex
	addr := make(chan string, 1)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		re := regexp.MustCompile(`listening on (127\.0\.0\.1:\d+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logMu.Lock()
			logBuf.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			t.Errorf("the server did not stop on SIGTERM")
		}
		<-copied
		if t.Failed() {
			logMu.Lock()
			t.Logf("server log:\n%s", logBuf.String())
			logMu.Unlock()
		}
		// Its workers end with it (their request pipes close).
		out, _ := exec.Command("pgrep", "-g", fmt.Sprint(cmd.Process.Pid)).Output()
		if pids := strings.Fields(string(out)); len(pids) > 0 {
			ps, _ := exec.Command("ps", "-o", "pid,ppid,stat,args", "-p", strings.Join(pids, ",")).CombinedOutput()
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Errorf("processes left after the server stopped:\n%s", ps)
		}
	})
	select {
	case a := <-addr:
		return &interp{url: "http://" + a, python: python}
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not start listening")
	}
	return nil
}

// msg is one NDJSON line of an execution.
type msg map[string]any

func (m msg) typ() string { s, _ := m["type"].(string); return s }

func (m msg) str(k string) string { s, _ := m[k].(string); return s }

// execution is the whole answer to one POST /execute.
type execution struct {
	msgs []msg
}

func (e execution) of(typ string) []msg {
	var out []msg
	for _, m := range e.msgs {
		if m.typ() == typ {
			out = append(out, m)
		}
	}
	return out
}

func (e execution) texts(typ string) []string {
	var out []string
	for _, m := range e.of(typ) {
		out = append(out, m.str("text"))
	}
	return out
}

func (e execution) main() msg {
	for _, m := range e.of("result") {
		if m["is_main_result"] == true {
			return m
		}
	}
	return nil
}

func (e execution) err() msg {
	if m := e.of("error"); len(m) > 0 {
		return m[0]
	}
	return nil
}

// stream starts POST /execute and returns a reader of its lines; every
// line must be a JSON object (no blank lines).
func (s *interp) stream(t *testing.T, ctx context.Context, body any) (*http.Response, func() (msg, bool)) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/execute", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /execute: %v", err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		return resp, nil
	}
	if !slices.Contains(resp.TransferEncoding, "chunked") {
		t.Errorf("transfer encoding %v, want chunked", resp.TransferEncoding)
	}
	r := bufio.NewReader(resp.Body)
	next := func() (msg, bool) {
		t.Helper()
		line, err := r.ReadBytes('\n')
		if err == io.EOF && len(line) == 0 {
			return nil, false
		}
		if err != nil {
			t.Fatalf("read the stream: %v (after %q)", err, line)
		}
		var m msg
		if err := json.Unmarshal(line, &m); err != nil || m.typ() == "" {
			t.Fatalf("line %q is not a JSON object with a type: %v", line, err)
		}
		return m, true
	}
	return resp, next
}

// exec runs code to the end and checks the stream's shape: the execution
// count first (unless the language is refused), end_of_execution last.
func (s *interp) exec(t *testing.T, body map[string]any) execution {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	resp, next := s.stream(t, ctx, body)
	if next == nil {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST /execute %v: %s %s", body, resp.Status, b)
	}
	var e execution
	for {
		m, ok := next()
		if !ok {
			break
		}
		e.msgs = append(e.msgs, m)
	}
	if len(e.msgs) == 0 || e.msgs[len(e.msgs)-1].typ() != "end_of_execution" && e.msgs[len(e.msgs)-1].typ() != "unexpected_end_of_execution" {
		t.Fatalf("the stream does not end with end_of_execution: %v", e.msgs)
	}
	for _, m := range e.of("stdout") {
		if _, err := time.Parse(time.RFC3339Nano, m.str("timestamp")); err != nil {
			t.Errorf("stdout timestamp: %v", err)
		}
	}
	return e
}

func (s *interp) run(t *testing.T, code string) execution {
	t.Helper()
	return s.exec(t, map[string]any{"code": code})
}

// call makes a JSON request and decodes the answer (an error's too) into
// out (if not nil).
func (s *interp) call(t *testing.T, method, path string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, s.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode >= 400 || resp.StatusCode == http.StatusNoContent {
		if resp.StatusCode != http.StatusNoContent {
			var e struct {
				Error string `json:"error"`
				Code  int    `json:"code"`
			}
			if err := json.Unmarshal(b, &e); err != nil || e.Error == "" || e.Code != resp.StatusCode {
				t.Errorf("%s %s: %s: error body %q is not {error, code}", method, path, resp.Status, b)
			}
			if out != nil {
				_ = json.Unmarshal(b, out)
			}
		} else if len(b) != 0 {
			t.Errorf("%s %s: 204 with a body %q", method, path, b)
		}
		return resp.StatusCode
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v in %q", method, path, err, b)
		}
	}
	return resp.StatusCode
}

type contextInfo struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func TestCodeInterpreterExecute(t *testing.T) {
	s := startServer(t)
	if code := s.call(t, http.MethodGet, "/health", nil, nil); code != http.StatusOK {
		t.Fatalf("GET /health: %d", code)
	}

	// The SDK's smoke test (§8 step 20) and the state of the default context.
	first := s.run(t, `print("hello"); 1+1`)
	if got := first.main().str("text"); got != "2" {
		t.Errorf("text = %q, want 2", got)
	}
	if got := first.texts("stdout"); !slices.Equal(got, []string{"hello\n"}) {
		t.Errorf("stdout = %q", got)
	}
	if n := first.of("number_of_executions"); len(n) != 1 || n[0]["execution_count"] != float64(1) || first.msgs[0].typ() != "number_of_executions" {
		t.Errorf("number_of_executions = %v (messages %v)", n, first.msgs)
	}

	tests := []struct {
		name   string
		code   string
		env    map[string]string
		text   string // the main result's text; "" = no main result
		stdout []string
		stderr []string
		errN   string // the error's name
		errV   string
		tbHas  []string // in the traceback
	}{
		{name: "state kept", code: "x = 41", text: ""},
		{name: "state read", code: "x + 1", text: "42"},
		{name: "last expression only", code: "y = 1\ny + 1\ny + 2", text: "3"},
		{name: "None is no result", code: "None"},
		{name: "statement last", code: "z = [1, 'a']\nfor i in range(2): print(i)", stdout: []string{"0\n", "1\n"}},
		// E2B's text: text/plain without one pair of surrounding single quotes.
		{name: "string", code: "'a' + 'b'", text: "ab"},
		{name: "string with a quote", code: `"it's"`, text: `"it's"`},
		{name: "list of strings", code: "['a']", text: "['a']"},
		{name: "long list, one item a line", code: "list(range(30))", text: "[0,\n 1,\n 2,\n 3,\n 4,\n 5,\n 6,\n 7,\n 8,\n 9,\n 10,\n 11,\n 12,\n 13,\n 14,\n 15,\n 16,\n 17,\n 18,\n 19,\n 20,\n 21,\n 22,\n 23,\n 24,\n 25,\n 26,\n 27,\n 28,\n 29]"},
		{name: "long dict", code: "{'a': 'x' * 40, 'b': 'y' * 40}", text: "{'a': '" + strings.Repeat("x", 40) + "',\n 'b': '" + strings.Repeat("y", 40) + "'}"},
		{name: "indented code", code: "\n    v = 6\n    if v:\n        v *= 7\n\n    v\n    ", text: "42"},
		{name: "stderr", code: "import sys\nprint('oops', file=sys.stderr)", stderr: []string{"oops\n"}},
		{name: "child process output", code: "import os\n_ = os.system('echo from-sh; echo to-err >&2')", stdout: []string{"from-sh\n"}, stderr: []string{"to-err\n"}},
		{name: "partial line", code: "print('no newline', end='')", stdout: []string{"no newline"}},
		{name: "error", code: "a = 1\n1/0", errN: "ZeroDivisionError", errV: "division by zero", tbHas: []string{"<cell ", "line 2", "1/0"}},
		{name: "error in a function", code: "def f():\n    raise ValueError('bad value')\nf()", errN: "ValueError", errV: "bad value", tbHas: []string{"in f", "raise ValueError"}},
		{name: "output before the error", code: "print('before')\nraise KeyError('k')", stdout: []string{"before\n"}, errN: "KeyError", errV: "'k'"},
		{name: "syntax error", code: "def f(:", errN: "SyntaxError", tbHas: []string{"def f(:"}},
		{name: "name error", code: "undefined_name", errN: "NameError", errV: "name 'undefined_name' is not defined"},
		{name: "SystemExit is an error", code: "import sys\nsys.exit(3)", errN: "SystemExit", errV: "3"},
		{name: "top-level await", code: "import asyncio\nawait asyncio.sleep(0)\n7 * 6", text: "42"},
		{name: "rich repr", code: "class H:\n    def _repr_html_(self): return '<b>h</b>'\n    def __repr__(self): return 'H()'\nH()", text: "H()"},
		{name: "env_vars during the execution", code: "import os\nos.environ['CI_TEST_VAR']", env: map[string]string{"CI_TEST_VAR": "v1"}, text: "v1"},
		{name: "env_vars after it", code: "import os\nos.environ.get('CI_TEST_VAR')"},
		{name: "input() reads nothing", code: "input()", errN: "EOFError"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := map[string]any{"code": tc.code}
			if tc.env != nil {
				body["env_vars"] = tc.env
			}
			e := s.exec(t, body)
			if m := e.main(); tc.text == "" && m != nil || tc.text != "" && (m == nil || m.str("text") != tc.text) {
				t.Errorf("main result = %v, want text %q", m, tc.text)
			}
			if got := e.texts("stdout"); !slices.Equal(got, tc.stdout) {
				t.Errorf("stdout = %q, want %q", got, tc.stdout)
			}
			if got := e.texts("stderr"); !slices.Equal(got, tc.stderr) {
				t.Errorf("stderr = %q, want %q", got, tc.stderr)
			}
			em := e.err()
			switch {
			case tc.errN == "" && em != nil:
				t.Errorf("error %v", em)
			case tc.errN != "" && em == nil:
				t.Errorf("no error, want %s", tc.errN)
			case tc.errN != "":
				if em.str("name") != tc.errN || tc.errV != "" && em.str("value") != tc.errV {
					t.Errorf("error %s: %q, want %s: %q", em.str("name"), em.str("value"), tc.errN, tc.errV)
				}
				tb := em.str("traceback")
				for _, w := range tc.tbHas {
					if !strings.Contains(tb, w) {
						t.Errorf("traceback lacks %q:\n%s", w, tb)
					}
				}
				if strings.Contains(tb, "server.py") || strings.Contains(tb, "ast.py") {
					t.Errorf("traceback shows the server's frames:\n%s", tb)
				}
			}
		})
	}

	t.Run("rich repr formats", func(t *testing.T) {
		e := s.run(t, "H()")
		if m := e.main(); m == nil || m.str("html") != "<b>h</b>" {
			t.Errorf("main result %v, want html", m)
		}
	})
	t.Run("display", func(t *testing.T) {
		e := s.run(t, "display('shown')\nprint('after')")
		rs := e.of("result")
		if len(rs) != 1 || rs[0]["is_main_result"] != false || rs[0].str("text") != "shown" {
			t.Errorf("results %v", rs)
		}
	})
	t.Run("mime bundle", func(t *testing.T) {
		e := s.run(t, "class M:\n    def _repr_mimebundle_(self, include=None, exclude=None):\n"+
			"        return {'text/plain': 'M!', 'text/markdown': '**m**', 'application/x-thing': {'k': 1}}\nM()")
		m := e.main()
		if m == nil || m.str("text") != "M!" || m.str("markdown") != "**m**" {
			t.Fatalf("main result %v", m)
		}
		if x, _ := m["extra"].(map[string]any); x == nil || x["application/x-thing"] == nil {
			t.Errorf("extra %v", m["extra"])
		}
	})
	t.Run("unsupported language", func(t *testing.T) {
		e := s.exec(t, map[string]any{"code": "1", "language": "r"})
		if em := e.err(); em == nil || em.str("name") != "UnsupportedLanguage" || !strings.Contains(em.str("value"), "'r' is not supported") {
			t.Errorf("error %v", em)
		}
		if got := s.exec(t, map[string]any{"code": "1", "language": "python"}).main(); got == nil || got.str("text") != "1" {
			t.Errorf("language python: %v", got)
		}
	})
}

func TestCodeInterpreterStreams(t *testing.T) {
	s := startServer(t)
	flag := filepath.Join(t.TempDir(), "go-on")
	code := fmt.Sprintf("import os, time\nprint('first', flush=True)\nwhile not os.path.exists(%q): time.sleep(0.01)\nprint('second')\n'done'", flag)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	_, next := s.stream(t, ctx, map[string]any{"code": code})
	if next == nil {
		t.Fatal("POST /execute failed")
	}
	// The first line must arrive while the code still waits for the file
	// that is created only after it was read.
	var got []msg
	for {
		m, ok := next()
		if !ok {
			t.Fatalf("the stream ended before stdout: %v", got)
		}
		got = append(got, m)
		if m.typ() == "stdout" {
			if m.str("text") != "first\n" {
				t.Fatalf("first stdout %q", m.str("text"))
			}
			break
		}
		if m.typ() != "number_of_executions" {
			t.Fatalf("before stdout: %v", m)
		}
	}
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var rest []string
	for {
		m, ok := next()
		if !ok {
			break
		}
		rest = append(rest, m.typ()+":"+m.str("text"))
	}
	if want := []string{"stdout:second\n", "result:done", "end_of_execution:"}; !slices.Equal(rest, want) {
		t.Errorf("after the file: %q, want %q", rest, want)
	}
}

func TestCodeInterpreterContexts(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	var c contextInfo
	if code := s.call(t, http.MethodPost, "/contexts", map[string]any{"cwd": dir}, &c); code != http.StatusOK {
		t.Fatalf("POST /contexts: %d", code)
	}
	if c.ID == "" || c.Language != "python" || c.Cwd != dir {
		t.Fatalf("context %+v", c)
	}
	var d contextInfo
	if code := s.call(t, http.MethodPost, "/contexts", map[string]any{"language": "python"}, &d); code != http.StatusOK {
		t.Fatalf("POST /contexts: %d", code)
	}
	wantCwd := "/"
	if st, err := os.Stat("/home/user"); err == nil && st.IsDir() {
		wantCwd = "/home/user"
	}
	if d.Cwd != wantCwd || d.ID == c.ID {
		t.Errorf("second context %+v, want cwd %s", d, wantCwd)
	}
	var list []contextInfo
	s.call(t, http.MethodGet, "/contexts", nil, &list)
	ids := make([]string, 0, len(list))
	for _, x := range list {
		ids = append(ids, x.ID)
	}
	if !slices.Contains(ids, c.ID) || !slices.Contains(ids, d.ID) || len(list) != 3 { // and the default one
		t.Errorf("GET /contexts = %+v", list)
	}

	on := func(id, code string) execution {
		return s.exec(t, map[string]any{"code": code, "context_id": id})
	}
	if got := on(c.ID, "import os\nv = 'in c'\nos.getcwd()").main(); got == nil || got.str("text") != dir {
		t.Errorf("cwd of the context: %v", got)
	}
	if got := on(c.ID, "v").main(); got == nil || got.str("text") != "in c" {
		t.Errorf("state of the context: %v", got)
	}
	if e := on(d.ID, "v").err(); e == nil || e.str("name") != "NameError" {
		t.Errorf("another context sees v: %v", e)
	}
	if e := s.run(t, "v").err(); e == nil || e.str("name") != "NameError" {
		t.Errorf("the default context sees v: %v", e)
	}
	if n := on(c.ID, "1").of("number_of_executions"); len(n) != 1 || n[0]["execution_count"] != float64(3) {
		t.Errorf("execution count of the context: %v", n)
	}

	if code := s.call(t, http.MethodPost, "/contexts/"+c.ID+"/restart", nil, nil); code != http.StatusNoContent {
		t.Errorf("restart: %d", code)
	}
	if e := on(c.ID, "v").err(); e == nil || e.str("name") != "NameError" {
		t.Errorf("after restart, v: %v", e)
	}

	// A worker that dies is reported, and the context goes on afresh.
	if e := on(d.ID, "import os\nos._exit(3)").err(); e == nil || e.str("name") != "WorkerDied" || !strings.Contains(e.str("value"), "status 3") {
		t.Errorf("exit: %v", e)
	}
	if got := on(d.ID, "2 + 2").main(); got == nil || got.str("text") != "4" {
		t.Errorf("after the worker died: %v", got)
	}

	for _, tc := range []struct {
		method, path string
		body         any
		want         int
	}{
		{http.MethodDelete, "/contexts/" + c.ID, nil, http.StatusNoContent},
		{http.MethodDelete, "/contexts/" + c.ID, nil, http.StatusNotFound},
		{http.MethodPost, "/contexts/" + c.ID + "/restart", nil, http.StatusNotFound},
		{http.MethodPost, "/contexts/nope/restart", nil, http.StatusNotFound},
		{http.MethodPost, "/execute", map[string]any{"code": "1", "context_id": c.ID}, http.StatusNotFound},
		{http.MethodPost, "/execute", map[string]any{"code": "1", "context_id": d.ID, "language": "python"}, http.StatusBadRequest},
		{http.MethodPost, "/execute", map[string]any{"context_id": d.ID}, http.StatusBadRequest},
		{http.MethodPost, "/execute", map[string]any{"code": "1", "env_vars": map[string]any{"A": 1}}, http.StatusBadRequest},
		{http.MethodPost, "/execute", "not an object", http.StatusBadRequest},
		{http.MethodPost, "/contexts", map[string]any{"language": "r"}, http.StatusNotImplemented},
		{http.MethodPost, "/contexts", map[string]any{"language": 7}, http.StatusBadRequest},
		{http.MethodPost, "/contexts", map[string]any{"cwd": "relative"}, http.StatusBadRequest},
		{http.MethodPost, "/contexts", map[string]any{"cwd": filepath.Join(dir, "missing")}, http.StatusBadRequest},
		{http.MethodGet, "/nope", nil, http.StatusNotFound},
	} {
		if got := s.call(t, tc.method, tc.path, tc.body, nil); got != tc.want {
			t.Errorf("%s %s %v: %d, want %d", tc.method, tc.path, tc.body, got, tc.want)
		}
	}
	s.call(t, http.MethodGet, "/contexts", nil, &list)
	if len(list) != 2 {
		t.Errorf("after delete: %+v", list)
	}
}

// Contexts run at once, each with its own output.
func TestCodeInterpreterConcurrentContexts(t *testing.T) {
	s := startServer(t)
	var a, b contextInfo
	s.call(t, http.MethodPost, "/contexts", map[string]any{}, &a)
	s.call(t, http.MethodPost, "/contexts", map[string]any{}, &b)
	flag := filepath.Join(t.TempDir(), "b-ran")
	var wg sync.WaitGroup
	var ea execution
	wg.Go(func() {
		ea = s.exec(t, map[string]any{"context_id": a.ID, "code": fmt.Sprintf(
			"import os, time\nprint('a1')\nwhile not os.path.exists(%q): time.sleep(0.01)\nprint('a2')", flag)})
	})
	eb := s.exec(t, map[string]any{"context_id": b.ID, "code": fmt.Sprintf("print('b1')\nopen(%q, 'w').close()\nprint('b2')", flag)})
	wg.Wait()
	if got := ea.texts("stdout"); !slices.Equal(got, []string{"a1\n", "a2\n"}) {
		t.Errorf("a's stdout %q", got)
	}
	if got := eb.texts("stdout"); !slices.Equal(got, []string{"b1\n", "b2\n"}) {
		t.Errorf("b's stdout %q", got)
	}
}

// A client that goes away interrupts its execution; the context lives on.
func TestCodeInterpreterInterrupt(t *testing.T) {
	s := startServer(t)
	var c contextInfo
	s.call(t, http.MethodPost, "/contexts", map[string]any{}, &c)
	ctx, cancel := context.WithCancel(t.Context())
	_, next := s.stream(t, ctx, map[string]any{"context_id": c.ID, "code": "import time\nstate = 'running'\n" +
		// 'started' is printed inside the try: an interrupt that comes
		// right after it is caught too.
		"try:\n    print('started', flush=True)\n    while True: time.sleep(0.01)\nexcept KeyboardInterrupt:\n    state = 'interrupted'\n    raise"})
	if next == nil {
		t.Fatal("POST /execute failed")
	}
	for {
		m, ok := next()
		if !ok {
			t.Fatal("the stream ended")
		}
		if m.typ() == "stdout" {
			break
		}
	}
	cancel()
	// The next execution waits for the interrupted one (one at a time).
	if got := s.exec(t, map[string]any{"context_id": c.ID, "code": "state"}).main(); got == nil || got.str("text") != "interrupted" {
		t.Errorf("state = %v", got)
	}
}

func TestCodeInterpreterFigures(t *testing.T) {
	s := startServer(t)
	if err := exec.Command(s.python, "-c", "import matplotlib").Run(); err != nil {
		t.Skip("matplotlib is not installed for the host's python3; the template's SDK test covers figures")
	}
	for _, tc := range []struct {
		name string
		code string
		n    int  // figures
		main bool // the figure is the main result
	}{
		{"show", "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\nprint('after show')", 1, false},
		{"open at the end", "import matplotlib.pyplot as plt\nplt.figure()\nplt.plot([3, 1])\nplt.figure()\nplt.plot([1, 3])\nNone", 2, false},
		{"figure as the value", "import matplotlib.pyplot as plt\nfig = plt.figure()\nplt.plot([1])\nfig", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := s.run(t, tc.code)
			if em := e.err(); em != nil {
				t.Fatalf("error %v", em)
			}
			var n int
			for _, r := range e.of("result") {
				png, err := base64.StdEncoding.DecodeString(r.str("png"))
				if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
					t.Errorf("result %v has no PNG (%v)", r.str("text"), err)
					continue
				}
				if !strings.HasPrefix(r.str("text"), "<Figure size") || (r["is_main_result"] == true) != tc.main {
					t.Errorf("result text %q main %v", r.str("text"), r["is_main_result"])
				}
				n++
			}
			if n != tc.n {
				t.Errorf("%d figures, want %d", n, tc.n)
			}
		})
	}
	if got := s.run(t, "import matplotlib.pyplot as plt\nlen(plt.get_fignums())").main(); got == nil || got.str("text") != "0" {
		t.Errorf("figures left open: %v", got)
	}
}

// FuzzExecuteBody: whatever the request body, the server answers a JSON
// error or a well-formed NDJSON stream, and stays up.
func FuzzExecuteBody(f *testing.F) {
	for _, seed := range []string{
		`{"code":"1"}`, `{"code":"print(1)"}`, `{}`, `[]`, `null`, `{"code":1}`, ``, `{`,
		`{"code":"1","context_id":"x"}`, `{"code":"1","language":"r"}`, `{"code":"1","env_vars":{"A":"b"}}`,
		`{"code":"1","env_vars":{"":"b"}}`, `{"code":"1","env_vars":{"A=":"b"}}`, `{"code":"\u0000"}`,
		`{"code":"1","language":"python","context_id":"y"}`, `{"code":"1","env_vars":[]}`,
	} {
		f.Add([]byte(seed))
	}
	s := startServer(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		resp, err := http.Post(s.url+"/execute", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatalf("POST /execute: %v", err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		switch resp.StatusCode {
		case http.StatusOK:
			lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
			for _, l := range lines {
				var m msg
				if err := json.Unmarshal([]byte(l), &m); err != nil || m.typ() == "" {
					t.Fatalf("line %q: %v", l, err)
				}
			}
			var last msg
			_ = json.Unmarshal([]byte(lines[len(lines)-1]), &last)
			if last.typ() != "end_of_execution" {
				t.Fatalf("last line %q", lines[len(lines)-1])
			}
		case http.StatusBadRequest, http.StatusNotFound:
			var e struct{ Error string }
			if err := json.Unmarshal(b, &e); err != nil || e.Error == "" {
				t.Fatalf("%s: %q", resp.Status, b)
			}
		default:
			t.Fatalf("%s: %q", resp.Status, b)
		}
	})
}
