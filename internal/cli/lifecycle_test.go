package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// lifecycle fakes POST /v1/sandboxes/{id}/pause|resume|suspend|wake: the
// lifecycle table decides, and the operation finishes at once (a suspend
// keeps the filesystem only); a sandbox with metadata fail=KIND fails it.
func (f *fakeServer) lifecycle(w http.ResponseWriter, r *http.Request) {
	kind, err := model.ParseOperationKind(r.PathValue("kind"))
	if err != nil || kind == model.OpCreate || kind == model.OpDelete {
		writeJSON(w, 404, apiv1.Error{Code: apiv1.CodeNotFound, Message: "no route"})
		return
	}
	lc, _ := model.LifecycleOf(kind)
	f.mu.Lock()
	defer f.mu.Unlock()
	id := r.PathValue("id")
	sb, ok := f.sandboxes[id]
	if !ok {
		writeJSON(w, 404, apiv1.Error{Code: apiv1.CodeNotFound, Message: "sandbox " + id + " not found"})
		return
	}
	if !lc.CanStart(model.SandboxState(sb.State)) {
		writeJSON(w, 409, apiv1.Error{Code: apiv1.CodeInvalidTransition, Message: "sandbox " + id + " is " + sb.State + "; a " + string(kind) + " needs something else"})
		return
	}
	op := apiv1.Operation{ID: model.NewOperationID().String(), Kind: string(kind), State: "pending", SandboxID: id, CreatedAt: fixedTime, UpdatedAt: fixedTime}
	sb.State = string(lc.InProgress)
	writeJSON(w, 202, apiv1.SandboxWithOperation{Sandbox: sb, Operation: op})
	op.State, op.Attempts, sb.State = "succeeded", 1, string(lc.Final)
	if sb.Metadata["fail"] == string(kind) {
		op.State, sb.State = "failed", string(lc.Failure)
		op.Error = &apiv1.Error{Code: "runtime_error", Message: "the runtime said no"}
	}
	switch model.SandboxState(sb.State) {
	case model.StateSuspended:
		sb.Snapshot = &apiv1.Snapshot{Kind: apiv1.SnapshotFilesystem, SizeBytes: 3 << 20, CreatedAt: fixedTime}
	case model.StateRunning:
		sb.Snapshot = nil
	}
	f.sandboxes[id], f.ops[op.ID] = sb, op
}

// runFirst fakes a command's resume: a paused or suspended sandbox
// refuses it unless it asks to resume, which then runs it at once. Called
// with f.mu held; false: it answered.
func (f *fakeServer) runFirst(w http.ResponseWriter, id string, resume bool) bool {
	sb, ok := f.sandboxes[id]
	if !ok || (sb.State != "paused" && sb.State != "suspended") {
		return true
	}
	if resume {
		sb.State, sb.Snapshot = "running", nil
		f.sandboxes[id] = sb
		return true
	}
	code := apiv1.CodeSandboxPaused
	if sb.State == "suspended" {
		code = apiv1.CodeSandboxSuspended
	}
	writeJSON(w, 409, apiv1.Error{Code: code, Message: "sandbox " + id + " is " + sb.State + "; resume it or send the command with \"resume\": true"})
	return false
}

func TestSandboxLifecycleCommands(t *testing.T) {
	f := newFakeServer(t)
	ctx := context.Background()
	if code, _, stderr := runCLI(ctx, f, "sandbox", "create"); code != 0 {
		t.Fatalf("create: %s", stderr)
	}
	var id string
	for k := range f.sandboxes {
		id = k
	}
	steps := []struct {
		args     []string
		code     int
		stdout   []string // parts of stdout (squashed)
		stderr   []string
		notInOut string
	}{
		{args: []string{"sandbox", "pause", id}, stdout: []string{"State: paused", "(pause, succeeded)"}, stderr: []string{": pausing (operation op_", ": paused ("}},
		{args: []string{"exec", id, "--", "echo", "hi"}, code: 1, stderr: []string{"(sandbox_paused)", "hint: `airlock sandbox resume`", "exec --resume"}},
		{args: []string{"sandbox", "pause", id}, code: 1, stderr: []string{"is paused; a pause", "(invalid_transition)"}},
		{args: []string{"sandbox", "resume", id}, stdout: []string{"State: running", "(resume, succeeded)"}},
		{args: []string{"sandbox", "suspend", id}, stdout: []string{"State: suspended", "Snapshot: filesystem: filesystem only", "3.0 MiB"}},
		{args: []string{"sandbox", "get", id}, stdout: []string{"Snapshot: filesystem"}},
		{args: []string{"exec", id, "--", "echo", "hi"}, code: 1, stderr: []string{"(sandbox_suspended)"}},
		{args: []string{"exec", "--resume", id, "--", "echo", "hi"}, stdout: []string{"hi\n"}},
		{args: []string{"sandbox", "suspend", id, "--no-wait"}, stdout: []string{"State: suspending", "(suspend, pending)"}},
		{args: []string{"sandbox", "wake", id}, stdout: []string{"State: running", "(wake, succeeded)"}, notInOut: "Snapshot:",
			stderr: []string{"kept the filesystem only", "do not continue"}},
		{args: []string{"sandbox", "wake", model.NewSandboxID().String()}, code: 1, stderr: []string{"(not_found)"}},
		{args: []string{"sandbox", "pause"}, code: 2},
		{args: []string{"sandbox", "pause", "not-an-id"}, code: 2},
	}
	for _, s := range steps {
		code, stdout, stderr := runCLI(ctx, f, s.args...)
		if code != s.code {
			t.Fatalf("%v: exit %d, want %d\n%s\n%s", s.args, code, s.code, stdout, stderr)
		}
		for _, want := range s.stdout {
			if !strings.Contains(squash(stdout), want) {
				t.Errorf("%v: stdout lacks %q:\n%s", s.args, want, stdout)
			}
		}
		for _, want := range s.stderr {
			if !strings.Contains(stderr, want) {
				t.Errorf("%v: stderr lacks %q:\n%s", s.args, want, stderr)
			}
		}
		if s.notInOut != "" && strings.Contains(stdout, s.notInOut) {
			t.Errorf("%v: stdout has %q:\n%s", s.args, s.notInOut, stdout)
		}
	}

	// A failed operation fails the command and says where the sandbox is.
	f.mu.Lock()
	sb := f.sandboxes[id]
	sb.Metadata = map[string]string{"fail": "pause"}
	f.sandboxes[id] = sb
	f.mu.Unlock()
	code, stdout, stderr := runCLI(ctx, f, "-o", "json", "sandbox", "pause", id)
	var res apiv1.SandboxWithOperation
	if code != 1 || json.Unmarshal([]byte(stdout), &res) != nil || res.Operation.State != "failed" ||
		!strings.Contains(stderr, "the runtime said no (runtime_error); the sandbox is running") {
		t.Fatalf("failed pause: %d\n%s\n%s", code, stdout, stderr)
	}
}
