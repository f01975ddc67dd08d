package codeinterp

import (
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// nodeSupport skips unless the host has node; it reports whether that node
// can run TypeScript (as the server's probe sees it).
func nodeSupport(t *testing.T) (typescript bool) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed on this host: JavaScript contexts need it")
	}
	out, err := exec.Command(node, "../../../templates/code-interpreter/node_worker.js", "--probe").Output()
	if err != nil {
		t.Fatalf("node_worker.js --probe: %v", err)
	}
	var p struct {
		Node       string `json:"node"`
		TypeScript bool   `json:"typescript"`
	}
	if err := json.Unmarshal(out, &p); err != nil || !strings.HasPrefix(p.Node, "v") {
		t.Fatalf("probe %q: %v", out, err)
	}
	return p.TypeScript
}

func TestCodeInterpreterJavaScript(t *testing.T) {
	nodeSupport(t)
	s := startServer(t)
	js := func(code string) execution {
		return s.exec(t, map[string]any{"code": code, "language": "js"})
	}
	tests := []struct {
		name   string
		code   string
		env    map[string]string
		text   string
		stdout []string
		errN   string
		errV   string
	}{
		{name: "console.log", code: `console.log("Hello World!")`, stdout: []string{"Hello World!\n"}},
		{name: "state kept (const)", code: "const z = 1"},
		{name: "state read", code: "z", text: "1"},
		{name: "es6", code: "const add = (x, y) => x + y;\nadd(1, 2)", text: "3"},
		{name: "top-level await, string unquoted", code: "\n    async function main() {\n        return 'Hello, World!'\n    }\n\n    await main()\n    ", text: "Hello, World!"},
		{name: "object", code: "({a: 1, b: [1, 2]})", text: "{ a: 1, b: [ 1, 2 ] }"},
		{name: "undefined is no result", code: "undefined"},
		{name: "static imports", code: "import os from 'os'\nimport { join as j } from 'path'\nimport * as p from 'node:path'\nj('a', typeof os.cpus) + p.sep", text: "a/function/"},
		{name: "child process output", code: "require('child_process').execSync('echo from-sh', {stdio: 'inherit'}); 0", stdout: []string{"from-sh\n"}, text: "0"},
		{name: "error", code: "console.log('before')\nnotDefined", stdout: []string{"before\n"}, errN: "ReferenceError", errV: "notDefined is not defined"},
		{name: "rejected await", code: "await Promise.reject(new TypeError('bad'))", errN: "TypeError", errV: "bad"},
		{name: "syntax error", code: "function f() {", errN: "SyntaxError"},
		{name: "env_vars", code: "process.env.CI_JS_VAR", env: map[string]string{"CI_JS_VAR": "v1"}, text: "v1"},
		{name: "env_vars after", code: "process.env.CI_JS_VAR"},
		{name: "Jupyter display", code: "({[Symbol.for('Jupyter.display')]() { return {'text/plain': 'Hello world!', 'text/html': '<h1>Hello world!</h1>'} }})", text: "Hello world!"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := map[string]any{"code": tc.code, "language": "javascript"}
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
			em := e.err()
			if (em != nil) != (tc.errN != "") || em != nil && (em.str("name") != tc.errN || tc.errV != "" && em.str("value") != tc.errV) {
				t.Errorf("error = %v, want %s: %s", em, tc.errN, tc.errV)
			}
			if em != nil && (strings.Contains(em.str("traceback"), "node_worker.js") || strings.Contains(em.str("traceback"), "node:repl")) {
				t.Errorf("traceback shows the worker's frames:\n%s", em.str("traceback"))
			}
			if n := e.of("number_of_executions"); len(n) != 1 {
				t.Errorf("number_of_executions %v", n)
			}
		})
	}
	if m := js("[1, 2].map(x => x * 2)").main(); m == nil || m.str("text") != "[ 2, 4 ]" {
		t.Errorf("js name: %v", m)
	}

	// A context of its own, in a working directory; the default context's
	// state is not there.
	dir := t.TempDir()
	var c contextInfo
	if code := s.call(t, http.MethodPost, "/contexts", map[string]any{"language": "js", "cwd": dir}, &c); code != http.StatusOK || c.Language != "javascript" || c.Cwd != dir {
		t.Fatalf("POST /contexts: %d %+v", code, c)
	}
	on := func(code string) execution { return s.exec(t, map[string]any{"code": code, "context_id": c.ID}) }
	if m := on("process.cwd()").main(); m == nil || m.str("text") != dir {
		t.Errorf("cwd: %v", m)
	}
	if em := on("z").err(); em == nil || em.str("name") != "ReferenceError" {
		t.Errorf("z in another context: %v", em)
	}
	if n := on("1").of("number_of_executions"); len(n) != 1 || n[0]["execution_count"] != float64(3) {
		t.Errorf("execution count %v", n)
	}

	// A client that goes away interrupts a busy loop; the context goes on.
	ctx, cancel := context.WithCancel(t.Context())
	_, next := s.stream(t, ctx, map[string]any{"context_id": c.ID, "code": "globalThis.spun = 'spinning'; console.log('started'); while (true) {}"})
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
	done := make(chan execution, 1)
	go func() { done <- on("spun") }()
	select {
	case e := <-done:
		if m := e.main(); m == nil || m.str("text") != "spinning" {
			t.Errorf("after the interrupt: %v %v", m, e.err())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the interrupted loop still runs")
	}

	// node dying is reported; the context starts afresh.
	if em := on("process.exit(3)").err(); em == nil || em.str("name") != "WorkerDied" || !strings.Contains(em.str("value"), "javascript process") {
		t.Errorf("exit: %v", em)
	}
	if m := on("typeof spun").main(); m == nil || m.str("text") != "undefined" {
		t.Errorf("after the exit: %v", m)
	}
	if code := s.call(t, http.MethodPost, "/contexts/"+c.ID+"/restart", nil, nil); code != http.StatusNoContent {
		t.Errorf("restart: %d", code)
	}
	if code := s.call(t, http.MethodDelete, "/contexts/"+c.ID, nil, nil); code != http.StatusNoContent {
		t.Errorf("delete: %d", code)
	}
}

func TestCodeInterpreterTypeScript(t *testing.T) {
	if !nodeSupport(t) {
		t.Skip("this host's node has neither type stripping nor the typescript package")
	}
	s := startServer(t)
	e := s.exec(t, map[string]any{"language": "ts", "code": "function subtract(x: number, y: number): number {\n  return x - y;\n}\n\nsubtract(1, 2)"})
	if m := e.main(); m == nil || m.str("text") != "-1" {
		t.Errorf("subtract: %v %v", m, e.err())
	}
	e = s.exec(t, map[string]any{"language": "typescript", "code": "interface P { name: string }\nconst p: P = { name: 'ts' }\nawait Promise.resolve(p.name)"})
	if m := e.main(); m == nil || m.str("text") != "ts" {
		t.Errorf("interface: %v %v", m, e.err())
	}
	var c contextInfo
	if code := s.call(t, http.MethodPost, "/contexts", map[string]any{"language": "ts"}, &c); code != http.StatusOK || c.Language != "typescript" {
		t.Errorf("POST /contexts ts: %d %+v", code, c)
	}
}

// Languages the server does not run are refused with a message naming the
// ones it does.
func TestCodeInterpreterRefusedLanguages(t *testing.T) {
	s := startServer(t)
	for _, lang := range []string{"r", "java", "bash", "deno", "tslab"} {
		var body struct{ Error string }
		if code := s.call(t, http.MethodPost, "/contexts", map[string]any{"language": lang}, &body); code != http.StatusNotImplemented ||
			!strings.Contains(body.Error, "python, javascript (js) and typescript (ts)") {
			t.Errorf("context %s: %d %q", lang, code, body.Error)
		}
		if em := s.exec(t, map[string]any{"code": "1", "language": lang}).err(); em == nil || em.str("name") != "UnsupportedLanguage" {
			t.Errorf("execute %s: %v", lang, em)
		}
	}
}
