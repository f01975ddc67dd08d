package cli

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// fakeServer speaks the documented management API and data plane protocol
// for the CLI's sake: sandboxes are created and deleted at once, and a
// command's behaviour is chosen by its first argument.
type fakeServer struct {
	t   *testing.T
	srv *httptest.Server

	mu         sync.Mutex
	createFail bool
	sandboxes  map[string]apiv1.Sandbox
	ops        map[string]apiv1.Operation
	commands   map[string][]string // process ID → args
	attaches   map[string]int      // process ID → connections
	deleted    []string
	creates    []apiv1.CreateSandboxRequest
	quota      apiv1.QuotaLimits   // of every project
	quotaPuts  []apiv1.QuotaLimits // bodies of PUT …/quota
	hang       chan struct{}       // "hang" commands block until it closes
	egress     *fakeEgress
}

func newFakeServer(t *testing.T) *fakeServer {
	f := &fakeServer{t: t, sandboxes: map[string]apiv1.Sandbox{}, ops: map[string]apiv1.Operation{},
		commands: map[string][]string{}, attaches: map[string]int{}, hang: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes", f.createSandbox)
	mux.HandleFunc("GET /v1/sandboxes", f.listSandboxes)
	mux.HandleFunc("GET /v1/sandboxes/{id}", f.getSandbox)
	mux.HandleFunc("DELETE /v1/sandboxes/{id}", f.deleteSandbox)
	mux.HandleFunc("POST /v1/sandboxes/{id}/commands", f.createCommand)
	mux.HandleFunc("POST /v1/sandboxes/{id}/{kind}", f.lifecycle)
	mux.HandleFunc("GET /v1/operations/{id}", f.getOperation)
	mux.HandleFunc("GET /v1/admin/projects/{id}/quota", f.getQuota)
	mux.HandleFunc("PUT /v1/admin/projects/{id}/quota", f.putQuota)
	mux.HandleFunc("GET /data/v1/processes/{pid}/attach", f.attach)
	f.egress = newFakeEgress(mux)
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer key_test" && !strings.HasPrefix(r.URL.Path, "/data/") {
			writeJSON(w, 401, apiv1.Error{Code: apiv1.CodeUnauthenticated, Message: "unknown API key"})
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		select {
		case <-f.hang:
		default:
			close(f.hang)
		}
		f.srv.Close()
	})
	return f
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

var fixedTime = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func (f *fakeServer) createSandbox(w http.ResponseWriter, r *http.Request) {
	var req apiv1.CreateSandboxRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, 400, apiv1.Error{Code: apiv1.CodeInvalidRequest, Message: err.Error()})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creates = append(f.creates, req)
	sb := apiv1.Sandbox{ID: model.NewSandboxID().String(), Template: "sha256:" + strings.Repeat("ab", 32),
		CPUs: max(req.CPUs, 1), MemoryMiB: max(req.MemoryMiB, 512), DiskMiB: cmp.Or(req.DiskMiB, 10240), Env: req.Env, Metadata: req.Metadata,
		State: "pending", CreatedAt: fixedTime, UpdatedAt: fixedTime}
	op := apiv1.Operation{ID: model.NewOperationID().String(), Kind: "create", State: "pending", SandboxID: sb.ID, CreatedAt: fixedTime, UpdatedAt: fixedTime}
	writeJSON(w, 202, apiv1.SandboxWithOperation{Sandbox: sb, Operation: op})
	// It "runs" at once.
	sb.State, op.State, op.Attempts = "running", "succeeded", 1
	if f.createFail {
		sb.State, sb.StateReason, op.State = "failed", "runtime said no", "failed"
		op.Error = &apiv1.Error{Code: "runtime_error", Message: "runtime said no"}
	}
	f.sandboxes[sb.ID], f.ops[op.ID] = sb, op
}

func (f *fakeServer) listSandboxes(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := apiv1.SandboxList{Sandboxes: []apiv1.Sandbox{}}
	for _, sb := range f.sandboxes {
		out.Sandboxes = append(out.Sandboxes, sb)
	}
	writeJSON(w, 200, out)
}

func (f *fakeServer) getSandbox(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.sandboxes[r.PathValue("id")]
	if !ok {
		writeJSON(w, 404, apiv1.Error{Code: apiv1.CodeNotFound, Message: "sandbox " + r.PathValue("id") + " not found"})
		return
	}
	writeJSON(w, 200, sb)
}

func (f *fakeServer) deleteSandbox(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := r.PathValue("id")
	sb, ok := f.sandboxes[id]
	if !ok {
		writeJSON(w, 404, apiv1.Error{Code: apiv1.CodeNotFound, Message: "no such sandbox"})
		return
	}
	f.deleted = append(f.deleted, id)
	op := apiv1.Operation{ID: model.NewOperationID().String(), Kind: "delete", State: "pending", SandboxID: id, CreatedAt: fixedTime, UpdatedAt: fixedTime}
	writeJSON(w, 202, apiv1.OperationResponse{Operation: op})
	op.State = "succeeded"
	sb.State = "deleted"
	f.ops[op.ID], f.sandboxes[id] = op, sb
}

func (f *fakeServer) getOperation(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	op, ok := f.ops[r.PathValue("id")]
	if !ok {
		writeJSON(w, 404, apiv1.Error{Code: apiv1.CodeNotFound, Message: "no such operation"})
		return
	}
	writeJSON(w, 200, op)
}

func (f *fakeServer) createCommand(w http.ResponseWriter, r *http.Request) {
	var req apiv1.CreateCommandRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Args) == 0 {
		writeJSON(w, 400, apiv1.Error{Code: apiv1.CodeInvalidRequest, Message: fmt.Sprint("bad command: ", err)})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.runFirst(w, r.PathValue("id"), req.Resume) {
		return
	}
	if sb, ok := f.sandboxes[r.PathValue("id")]; !ok || sb.State != "running" {
		writeJSON(w, 409, apiv1.Error{Code: apiv1.CodeSandboxNotRunning, Message: "sandbox is not running"})
		return
	}
	pid := model.NewProcessID().String()
	f.commands[pid] = req.Args
	writeJSON(w, 201, apiv1.CommandSession{ID: model.NewCommandSessionID().String(), SandboxID: r.PathValue("id"), ProcessID: pid,
		AttachURL: "/data/v1/processes/" + pid + "/attach", AttachmentToken: "tok-" + pid, ExpiresAt: fixedTime})
}

func sseEvent(w io.Writer, id int, name string, data any) {
	b, _ := json.Marshal(data)
	if id > 0 {
		fmt.Fprintf(w, "id: %d\n", id)
	}
	fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
}

func (f *fakeServer) attach(w http.ResponseWriter, r *http.Request) {
	pid := r.PathValue("pid")
	f.mu.Lock()
	args, ok := f.commands[pid]
	f.attaches[pid]++
	n := f.attaches[pid]
	f.mu.Unlock()
	if !ok || r.Header.Get("Authorization") != "Bearer tok-"+pid {
		writeJSON(w, 401, apiv1.Error{Code: apiv1.CodeUnauthenticated, Message: "invalid attachment token for this process"})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	fl := w.(http.Flusher)
	out := func(id int, stream, s string) { sseEvent(w, id, stream, apiv1.OutputEventData{Data: []byte(s)}) }
	switch args[0] {
	case "echo":
		out(1, "stdout", strings.Join(args[1:], " ")+"\n")
		out(2, "stderr", "warn\n")
		sseEvent(w, 3, "exit", apiv1.ExitEventData{ExitCode: 0})
	case "exit7":
		sseEvent(w, 1, "exit", apiv1.ExitEventData{ExitCode: 7})
	case "kill":
		out(1, "stdout", "\x00binary\xff")
		sseEvent(w, 2, "exit", apiv1.ExitEventData{ExitCode: -1, Signal: "KILL"})
	case "missing":
		sseEvent(w, 0, "error", apiv1.Error{Code: "exec_failed", Message: "missing: no such file or directory"})
	case "drop":
		if n == 1 {
			out(1, "stdout", "before ")
			fl.Flush()
			hj, _ := w.(http.Hijacker)
			conn, _, _ := hj.Hijack()
			conn.Close()
			return
		}
		if r.Header.Get("Last-Event-ID") != "1" {
			f.t.Errorf("reconnect with Last-Event-ID %q", r.Header.Get("Last-Event-ID"))
		}
		out(2, "stdout", "after\n")
		sseEvent(w, 3, "exit", apiv1.ExitEventData{ExitCode: 0})
	case "hang":
		out(1, "stdout", "started\n")
		fl.Flush()
		select {
		case <-f.hang:
		case <-r.Context().Done():
		}
	}
}

func (f *fakeServer) deletedIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.deleted...)
}

// squash collapses runs of spaces, so checks do not depend on alignment.
func squash(s string) string {
	for strings.Contains(s, "  ") {
		s = strings.ReplaceAll(s, "  ", " ")
	}
	return s
}

// runCLI runs the CLI against f and returns the exit code, stdout and stderr.
func runCLI(ctx context.Context, f *fakeServer, args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	if f != nil {
		args = append([]string{"--url", f.srv.URL, "--api-key", "key_test"}, args...)
	}
	code := Run(ctx, Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}, args)
	return code, stdout.String(), stderr.String()
}

func TestExec(t *testing.T) {
	f := newFakeServer(t)
	code, _, stderr := runCLI(context.Background(), f, "-o", "json", "sandbox", "create")
	if code != 0 {
		t.Fatalf("create: %d %s", code, stderr)
	}
	var sbx string
	for id := range f.sandboxes {
		sbx = id
	}
	tests := []struct {
		args             []string
		code             int
		stdout, inStderr string
	}{
		{[]string{"exec", sbx, "--", "echo", "hello", "world"}, 0, "hello world\n", "warn\n"},
		{[]string{"exec", sbx, "echo", "-n"}, 0, "-n\n", "warn\n"},
		{[]string{"exec", sbx, "exit7"}, 7, "", ""},
		{[]string{"exec", sbx, "kill"}, 137, "\x00binary\xff", "killed by SIGKILL"},
		{[]string{"exec", sbx, "missing"}, 127, "", "error: missing: no such file or directory (exec_failed)"},
		{[]string{"exec", sbx, "drop"}, 0, "before after\n", ""},
		{[]string{"exec", model.NewSandboxID().String(), "echo"}, 1, "", "(sandbox_not_running)"},
		{[]string{"exec", sbx}, 1, "", "(invalid_request)"}, // no args: the template's default command, which this one lacks
		{[]string{"exec", "sbx_nope", "echo"}, 2, "", `sandbox ID "sbx_nope" has the wrong length`},
		{[]string{"exec", "--cwd", "rel", sbx, "echo"}, 2, "", "--cwd: invalid value"},
	}
	for _, tt := range tests {
		code, stdout, stderr := runCLI(context.Background(), f, tt.args...)
		if code != tt.code || stdout != tt.stdout || !strings.Contains(stderr, tt.inStderr) {
			t.Errorf("%q: exit %d stdout %q stderr %q; want %d, %q, stderr containing %q", tt.args, code, stdout, stderr, tt.code, tt.stdout, tt.inStderr)
		}
	}
}

func TestRunDeletesTheSandbox(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		createFail bool
		code       int
		stdout     string
		inStderr   string
	}{
		{"success", []string{"run", "--env", "A=1", "--", "echo", "hi"}, false, 0, "hi\n", ""},
		{"wait delete", []string{"run", "--wait-delete", "-v", "echo", "hi"}, false, 0, "hi\n", "deleted"},
		{"exit code", []string{"run", "exit7"}, false, 7, "", ""},
		{"exec failed", []string{"run", "missing"}, false, 127, "", "(exec_failed)"},
		{"create failed", []string{"run", "echo"}, true, 1, "", "failed: runtime said no (runtime_error)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeServer(t)
			f.createFail = tt.createFail
			code, stdout, stderr := runCLI(context.Background(), f, tt.args...)
			if code != tt.code || stdout != tt.stdout || !strings.Contains(stderr, tt.inStderr) {
				t.Errorf("exit %d stdout %q stderr %q; want %d, %q, stderr containing %q", code, stdout, stderr, tt.code, tt.stdout, tt.inStderr)
			}
			if d := f.deletedIDs(); len(d) != 1 || len(f.creates) != 1 {
				t.Errorf("created %d, deleted %v; want one of each", len(f.creates), d)
			}
		})
	}
}

func TestRunInterrupted(t *testing.T) {
	f := newFakeServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var code int
	var stdout, stderr string
	go func() {
		defer close(done)
		code, stdout, stderr = runCLI(ctx, f, "run", "hang")
	}()
	// Wait until the command streams, then "press Ctrl-C".
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.mu.Lock()
		n := len(f.attaches)
		f.mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("run did not stop after the interrupt")
	}
	if code != exitInterrupted || stdout != "started\n" || !strings.Contains(stderr, "error: interrupted") {
		t.Errorf("exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	if d := f.deletedIDs(); len(d) != 1 {
		t.Errorf("deleted %v after the interrupt, want the sandbox", d)
	}
}

func TestSandboxCommands(t *testing.T) {
	f := newFakeServer(t)
	ctx := context.Background()
	code, stdout, stderr := runCLI(ctx, f, "sandbox", "create", "--cpus", "2", "--disk-mib", "2048", "--metadata", "team=ml", "--env", "SECRET=hunter2")
	if code != 0 || !strings.Contains(squash(stdout), "State: running") || !strings.Contains(squash(stdout), "Env: SECRET\n") ||
		!strings.Contains(squash(stdout), "Disk: 2048 MiB") ||
		strings.Contains(stdout, "hunter2") || !strings.Contains(stderr, ": running (") {
		t.Fatalf("create: %d\n%s\n%s", code, stdout, stderr)
	}
	if req := f.creates[0]; req.CPUs != 2 || req.DiskMiB != 2048 || req.Metadata["team"] != "ml" || req.Env["SECRET"] != "hunter2" {
		t.Errorf("request %+v", req)
	}
	var id string
	for k := range f.sandboxes {
		id = k
	}
	code, stdout, _ = runCLI(ctx, f, "-o", "json", "sandbox", "get", id)
	var sb apiv1.Sandbox
	if code != 0 || json.Unmarshal([]byte(stdout), &sb) != nil || sb.ID != id || sb.Env["SECRET"] != "hunter2" {
		t.Errorf("get json: %d %s", code, stdout)
	}
	code, stdout, stderr = runCLI(ctx, f, "sandbox", "delete", id)
	if code != 0 || !strings.Contains(squash(stdout), "State: succeeded") || !strings.Contains(stderr, "deleting") {
		t.Errorf("delete: %d\n%s\n%s", code, stdout, stderr)
	}
	f.createFail = true
	code, _, stderr = runCLI(ctx, f, "sandbox", "create")
	if code != 1 || !strings.Contains(stderr, "error: operation op_") || !strings.Contains(stderr, "(runtime_error); remove the sandbox with `airlock sandbox delete sbx_") {
		t.Errorf("failed create: %d %s", code, stderr)
	}
	code, _, stderr = runCLI(ctx, f, "sandbox", "get", model.NewSandboxID().String())
	if code != 1 || !strings.Contains(stderr, "(not_found)\n") {
		t.Errorf("missing sandbox: %d %s", code, stderr)
	}
	code, _, stderr = runCLI(ctx, f, "--api-key", "wrong", "sandbox", "list")
	if code != 1 || !strings.Contains(stderr, "error: unknown API key (unauthenticated)\nhint: the API key came from --api-key") {
		t.Errorf("wrong key: %d %s", code, stderr)
	}
}

func TestOpWait(t *testing.T) {
	f := newFakeServer(t)
	f.createFail = true
	ctx := context.Background()
	if code, _, _ := runCLI(ctx, f, "sandbox", "create", "--no-wait"); code != 0 {
		t.Fatal("create --no-wait failed")
	}
	var op string
	for k := range f.ops {
		op = k
	}
	code, stdout, stderr := runCLI(ctx, f, "op", "wait", op, "--timeout", "10s")
	if code != 1 || !strings.Contains(squash(stdout), "State: failed") || !strings.Contains(stderr, "runtime said no (runtime_error)") {
		t.Errorf("op wait: %d\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(ctx, f, "op", "get", op, "-o", "json")
	if code != 0 || !strings.Contains(stdout, `"state": "failed"`) {
		t.Errorf("op get: %d %s", code, stdout)
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args     []string
		inStderr string
	}{
		{[]string{"bogus"}, `unknown command "bogus" for "airlock"`},
		{[]string{"sandbox", "crate"}, `(did you mean "create"?)`},
		{[]string{"sandbox", "get"}, "missing SANDBOX"},
		{[]string{"sandbox", "get", "a", "b"}, `unexpected argument "b"`},
		{[]string{"sandbox", "list", "--limit", "x"}, `invalid argument "x" for "--limit"`},
		{[]string{"sandbox", "list", "--state", "runing"}, `unknown sandbox state "runing"`},
		{[]string{"sandbox", "create", "--metadata", "k"}, `--metadata "k": expected KEY=VALUE`},
		{[]string{"--output", "yaml", "template", "list"}, `--output must be table or json`},
		{[]string{"op", "wait", "sbx_x"}, `operation ID "sbx_x" must start with "op_"`},
		{[]string{"admin", "key", "create", "--role", "member"}, "--project is required"},
		{[]string{"admin", "key", "revoke", "prj_x"}, `API key ID "prj_x" must start with "key_"`},
		{[]string{"server", "--runtime", "docker"}, "--runtime must be runc, crun or runsc"},
		{[]string{"server", "--env", "docker"}, "--env must be runsc, crun or runc"},
		{[]string{"server", "--env", "runc", "--env", "runc"}, "--env runc given twice"},
		{[]string{"server", "--listen", "7070"}, `--listen "7070" must be HOST:PORT`},
		{[]string{"server", "--metrics-listen", "9464"}, `--metrics-listen "9464" must be HOST:PORT`},
		{[]string{"server", "--metrics-listen", "127.0.0.1:x"}, `--metrics-listen "127.0.0.1:x": port "x" is not a number`},
		{[]string{"server", "--log-level", "loud"}, "--log-level must be"},
		{[]string{"server", "--database-url", "mysql://x"}, "--database-url must be a postgres:// URL"},
		{[]string{"template", "import", "/x", "--name", "Bad"}, "--name: invalid value"},
	}
	for _, tt := range tests {
		code, stdout, stderr := runCLI(context.Background(), nil, tt.args...)
		if code != exitUsage || !strings.HasPrefix(stderr, "error: ") || !strings.Contains(stderr, tt.inStderr) || !strings.Contains(stderr, "--help' for usage.") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q", tt.args, code, stdout, stderr, tt.inStderr)
		}
	}
	// Help is not an error.
	for _, args := range [][]string{{}, {"sandbox"}, {"exec", "--help"}, {"help", "run"}} {
		if code, stdout, _ := runCLI(context.Background(), nil, args...); code != 0 || !strings.Contains(stdout, "Usage:") {
			t.Errorf("%q: exit %d, stdout %q", args, code, stdout)
		}
	}
}

func TestNoServerConfigured(t *testing.T) {
	dir := t.TempDir()
	code, _, stderr := runCLI(context.Background(), nil, "--data-dir", dir, "sandbox", "list")
	if code != 1 || !strings.Contains(stderr, "pass --url and --api-key, set AIRLOCK_URL and AIRLOCK_API_KEY, or point --data-dir / AIRLOCK_DATA_DIR") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

func TestDataDirDiscovery(t *testing.T) {
	f := newFakeServer(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "server.url"), []byte(f.srv.URL+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "admin.key"), []byte("key_test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	env := Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string {
		if k == "AIRLOCK_DATA_DIR" {
			return dir
		}
		return ""
	}}
	if code := Run(context.Background(), env, []string{"sandbox", "list", "-o", "json"}); code != 0 || !strings.Contains(stdout.String(), `"sandboxes": []`) {
		t.Errorf("exit %d stdout %q stderr %q", code, stdout.String(), stderr.String())
	}
}

func TestConnectionRefusedHint(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close()
	code, _, stderr := runCLI(context.Background(), nil, "--url", url, "--api-key", "k", "sandbox", "list")
	if code != 1 || !strings.Contains(stderr, "connection refused") || !strings.Contains(stderr, "hint: is `airlock server` running at "+url+" (from --url)?") {
		t.Errorf("exit %d stderr %q", code, stderr)
	}
}

func TestTimeout(t *testing.T) {
	f := newFakeServer(t)
	code, _, stderr := runCLI(context.Background(), f, "--timeout", "300ms", "run", "hang")
	if code != 1 || !strings.Contains(stderr, "--timeout 300ms reached") {
		t.Errorf("exit %d stderr %q", code, stderr)
	}
	if d := f.deletedIDs(); len(d) != 1 {
		t.Errorf("deleted %v after the timeout", d)
	}
}

func TestVersion(t *testing.T) {
	code, stdout, _ := runCLI(context.Background(), nil, "version", "-o", "json")
	var v versionInfo
	if code != 0 || json.Unmarshal([]byte(stdout), &v) != nil || v.Version == "" || !strings.HasPrefix(v.GoVersion, "go") {
		t.Errorf("exit %d stdout %q", code, stdout)
	}
}

func TestOutputBase64RoundTrip(t *testing.T) {
	// The fake server's output events are what the real data plane sends:
	// base64 in JSON. Make sure that is what the fake encodes.
	var b bytes.Buffer
	sseEvent(&b, 1, "stdout", apiv1.OutputEventData{Data: []byte("hi")})
	if !strings.Contains(b.String(), base64.StdEncoding.EncodeToString([]byte("hi"))) {
		t.Fatalf("fake output event %q is not base64", b.String())
	}
}
