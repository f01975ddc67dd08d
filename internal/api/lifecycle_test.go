package api

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/sandboxes"
	"github.com/airlockdev/airlock/internal/store"
)

// finishNext drives the oldest unfinished operation, which must be of kind
// on sandbox id, to its end through the store as the controller would:
// success moves the sandbox from the kind's in-progress state to its final
// state (with snap as its snapshot record, for a suspend), failure to its
// failure state.
func (e *testEnv) finishNext(t testing.TB, id model.SandboxID, kind model.OperationKind, succeed bool, snap *model.Snapshot) model.OperationID {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	op, err := e.st.ClaimOperation(ctx, store.Claim{Owner: testNode, Incarnation: testIncarnation, Lease: time.Minute, Now: now})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if op.SandboxID != id || op.Kind != kind {
		t.Fatalf("claimed %s %s of %s, want a %s of %s", op.ID, op.Kind, op.SandboxID, kind, id)
	}
	lc, err := model.LifecycleOf(kind)
	if err != nil {
		t.Fatal(err)
	}
	f := store.Finish{OperationID: op.ID, Owner: testNode, Incarnation: testIncarnation, State: model.OpSucceeded, SandboxFrom: lc.InProgress, SandboxTo: lc.Final, Now: now}
	switch {
	case !succeed:
		f.State, f.SandboxTo = model.OpFailed, lc.Failure
		f.Error = &model.OperationError{Code: "runtime_error", Message: "the runtime said no"}
	case kind == model.OpSuspend:
		f.SetSnapshot, f.Snapshot = true, snap
	}
	if err := e.st.FinishOperation(ctx, f); err != nil {
		t.Fatalf("finish %s: %v", kind, err)
	}
	return op.ID
}

// runningSandbox creates a sandbox with key and drives it to running.
func (e *testEnv) runningSandbox(key string) model.SandboxID {
	e.t.Helper()
	id := model.SandboxID(e.createSandbox(key, `{}`).Sandbox.ID)
	e.finishCreate(id)
	return id
}

func (e *testEnv) lifecycle(t testing.TB, id model.SandboxID, kind, key string) *resp {
	t.Helper()
	return e.send(req{method: "POST", path: "/v1/sandboxes/" + string(id) + "/" + kind, key: key, t: t})
}

func (e *testEnv) sandboxState(t testing.TB, id model.SandboxID) apiv1.Sandbox {
	t.Helper()
	var sb apiv1.Sandbox
	e.send(req{method: "GET", path: "/v1/sandboxes/" + string(id), key: e.keyA, t: t}).want(t, http.StatusOK).decode(t, &sb)
	return sb
}

func TestLifecycleRoutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.runningSandbox(e.keyA)
	snap := &model.Snapshot{Kind: model.SnapshotFilesystem, Format: "oci-upper/1", Location: "/x", SizeBytes: 4096, CreatedAt: time.Now().UTC()}

	type step struct {
		name    string
		kind    string // route: pause, resume, suspend, wake; "" for finish
		key     string // "": keyA
		status  int
		code    string // error code when status is not 202
		message string // part of the error message
		state   model.SandboxState
		finish  model.OperationKind // drive the queued operation of this kind to success
	}
	steps := []step{
		{name: "resume of a running sandbox", kind: "resume", status: 409, code: apiv1.CodeInvalidTransition, message: "is running; a resume needs paused"},
		{name: "wake of a running sandbox", kind: "wake", status: 409, code: apiv1.CodeInvalidTransition, message: "a wake needs suspended"},
		{name: "another project's sandbox", kind: "pause", key: "B", status: 404, code: apiv1.CodeNotFound},
		{name: "pause", kind: "pause", status: 202, state: model.StatePausing},
		{name: "pause while pausing", kind: "pause", status: 409, code: apiv1.CodeSandboxBusy, message: "its pause (op_"},
		{name: "suspend while pausing", kind: "suspend", status: 409, code: apiv1.CodeSandboxBusy},
		{name: "paused", finish: model.OpPause, state: model.StatePaused},
		{name: "pause of a paused sandbox", kind: "pause", status: 409, code: apiv1.CodeInvalidTransition, message: "is paused; a pause needs running"},
		{name: "resume", kind: "resume", status: 202, state: model.StateResuming},
		{name: "resumed", finish: model.OpResume, state: model.StateRunning},
		{name: "pause again", kind: "pause", status: 202, state: model.StatePausing},
		{name: "paused again", finish: model.OpPause, state: model.StatePaused},
		{name: "suspend of a paused sandbox", kind: "suspend", status: 202, state: model.StateSuspending},
		{name: "suspended", finish: model.OpSuspend, state: model.StateSuspended},
		{name: "pause of a suspended sandbox", kind: "pause", status: 409, code: apiv1.CodeInvalidTransition, message: "is suspended; a pause needs running (wake it first)"},
		{name: "resume of a suspended sandbox", kind: "resume", status: 409, code: apiv1.CodeInvalidTransition, message: "wake it first"},
		{name: "suspend of a suspended sandbox", kind: "suspend", status: 409, code: apiv1.CodeInvalidTransition, message: "a suspend needs running or paused"},
		{name: "wake", kind: "wake", status: 202, state: model.StateWaking},
		{name: "woken", finish: model.OpWake, state: model.StateRunning},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if s.finish != "" {
				e.finishNext(t, id, s.finish, true, snap)
				if got := e.sandboxState(t, id).State; got != string(s.state) {
					t.Fatalf("state %s, want %s", got, s.state)
				}
				return
			}
			key := e.keyA
			if s.key == "B" {
				key = e.keyB
			}
			before := e.dump()
			r := e.lifecycle(t, id, s.kind, key)
			if s.status != http.StatusAccepted {
				r.wantError(t, s.status, s.code)
				var ae apiv1.Error
				r.decode(t, &ae)
				if !strings.Contains(ae.Message, s.message) {
					t.Fatalf("message %q, want it to say %q", ae.Message, s.message)
				}
				if after := e.dump(); after != before {
					t.Fatalf("a refused %s changed the store:\n%s\nwant\n%s", s.kind, after, before)
				}
				return
			}
			var out apiv1.SandboxWithOperation
			r.want(t, http.StatusAccepted).decode(t, &out)
			if out.Sandbox.ID != string(id) || out.Sandbox.State != string(s.state) ||
				out.Operation.Kind != s.kind || out.Operation.State != string(model.OpPending) || out.Operation.SandboxID != string(id) {
				t.Fatalf("answer %+v", out)
			}
			if got := e.sandboxState(t, id); got.State != string(s.state) {
				t.Fatalf("stored state %s, want %s", got.State, s.state)
			}
			var op apiv1.Operation
			e.send(req{method: "GET", path: "/v1/operations/" + out.Operation.ID, key: e.keyA, t: t}).want(t, http.StatusOK).decode(t, &op)
			if op.Kind != s.kind {
				t.Fatalf("operation %+v", op)
			}
		})
	}

	// The snapshot is shown while suspended, and it is gone once the
	// wake's finish cleared it (here: the test's finish leaves it; the
	// worker clears it). Its shape is checked on a second sandbox.
	id2 := e.runningSandbox(e.keyA)
	e.lifecycle(t, id2, "suspend", e.keyA).want(t, http.StatusAccepted)
	e.finishNext(t, id2, model.OpSuspend, true, snap)
	got := e.sandboxState(t, id2)
	if got.Snapshot == nil || got.Snapshot.Kind != apiv1.SnapshotFilesystem || got.Snapshot.SizeBytes != 4096 {
		t.Fatalf("suspended sandbox's snapshot %+v", got.Snapshot)
	}
	var list apiv1.SandboxList
	e.do("GET", "/v1/sandboxes", e.keyA, "").want(t, http.StatusOK).decode(t, &list)
	for _, sb := range list.Sandboxes {
		if sb.ID == string(id2) && (sb.Snapshot == nil || sb.Snapshot.Kind != apiv1.SnapshotFilesystem) {
			t.Fatalf("listed suspended sandbox's snapshot %+v", sb.Snapshot)
		}
	}
	// A running sandbox has none (null).
	if r := e.do("GET", "/v1/sandboxes/"+string(e.runningSandbox(e.keyA)), e.keyA, "").want(t, http.StatusOK); !strings.Contains(string(r.body), `"snapshot":null`) {
		t.Fatalf("running sandbox: %s", r.body)
	}

	// Unknown sandbox and a body where none belongs.
	e.lifecycle(t, model.NewSandboxID(), "pause", e.keyA).wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
	e.send(req{method: "POST", path: "/v1/sandboxes/" + string(id) + "/pause", key: e.keyA, body: `{}`, invalid: true}).
		wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	// A delete of a suspended sandbox is accepted.
	e.do("DELETE", "/v1/sandboxes/"+string(id2), e.keyA, "").want(t, http.StatusAccepted)
}

func TestLifecycleIdempotency(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.runningSandbox(e.keyA)
	h := http.Header{"Idempotency-Key": {"pause-1"}}
	first := e.send(req{method: "POST", path: "/v1/sandboxes/" + string(id) + "/pause", key: e.keyA, header: h}).want(t, http.StatusAccepted)
	again := e.send(req{method: "POST", path: "/v1/sandboxes/" + string(id) + "/pause", key: e.keyA, header: h}).want(t, http.StatusAccepted)
	if string(first.body) != string(again.body) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay %s (%q), want %s", again.body, again.header.Get("Idempotent-Replayed"), first.body)
	}
	// The same key on another route is another request.
	e.send(req{method: "POST", path: "/v1/sandboxes/" + string(id) + "/suspend", key: e.keyA, header: h}).
		wantError(t, http.StatusConflict, apiv1.CodeIdempotencyKeyReused)
}

func TestLifecycleNotSupported(t *testing.T) {
	t.Parallel()
	sup := sandboxes.LifecycleSupport{}
	e := newEnv(t, func(c *envConfig) {
		c.svc.LifecycleSupport = func(sb model.Sandbox) (sandboxes.LifecycleSupport, bool) { return sup, true }
	})
	id := e.runningSandbox(e.keyA)
	for _, kind := range []string{"pause", "resume", "suspend", "wake"} {
		r := e.lifecycle(t, id, kind, e.keyA).wantError(t, http.StatusNotImplemented, apiv1.CodeNotSupported)
		var ae apiv1.Error
		r.decode(t, &ae)
		if !strings.Contains(ae.Message, "cannot") {
			t.Fatalf("%s: message %q", kind, ae.Message)
		}
	}
	if got := e.sandboxState(t, id).State; got != string(model.StateRunning) {
		t.Fatalf("state %s after refusals", got)
	}
}

// pausedSandbox returns a sandbox of project A driven to paused.
func (e *testEnv) pausedSandbox(t testing.TB) model.SandboxID {
	t.Helper()
	id := e.runningSandbox(e.keyA)
	e.lifecycle(t, id, "pause", e.keyA).want(t, http.StatusAccepted)
	e.finishNext(t, id, model.OpPause, true, nil)
	return id
}

func TestPausedSandboxRefusesCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	paused := e.pausedSandbox(t)
	suspended := e.runningSandbox(e.keyA)
	e.lifecycle(t, suspended, "suspend", e.keyA).want(t, http.StatusAccepted)
	e.finishNext(t, suspended, model.OpSuspend, true, &model.Snapshot{Kind: model.SnapshotMemory, Format: "runsc-checkpoint/1", Location: "/x", CreatedAt: time.Now()})
	for _, tc := range []struct {
		id   model.SandboxID
		code string
		hint string
	}{
		{paused, apiv1.CodeSandboxPaused, "resume it"},
		{suspended, apiv1.CodeSandboxSuspended, "wake it"},
	} {
		for _, path := range []string{"/commands", "/processes", "/files/stat?path=/"} {
			method, body := "POST", `{"args": ["true"]}`
			if path != "/commands" {
				method, body = "GET", ""
			}
			r := e.do(method, "/v1/sandboxes/"+string(tc.id)+path, e.keyA, body)
			if path == "/files/stat?path=/" && r.status == http.StatusNotImplemented {
				continue // this env has no file access; the state check comes after
			}
			r.wantError(t, http.StatusConflict, tc.code)
			var ae apiv1.Error
			r.decode(t, &ae)
			if !strings.Contains(ae.Message, tc.hint) || !strings.Contains(ae.Message, `"resume": true`) {
				t.Fatalf("%s: message %q does not say how to continue", path, ae.Message)
			}
		}
	}
}

func TestCommandResumesFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *envConfig) { c.svc.ResumeTimeout = 2 * time.Second })
	cmd := `{"args": ["true"], "resume": true}`

	t.Run("paused", func(t *testing.T) {
		id := e.pausedSandbox(t)
		done := e.sendAsync(t, req{method: "POST", path: "/v1/sandboxes/" + string(id) + "/commands", key: e.keyA, body: cmd})
		e.waitState(t, id, model.StateResuming)
		e.finishNext(t, id, model.OpResume, true, nil)
		var cs apiv1.CommandSession
		(<-done).want(t, http.StatusCreated).decode(t, &cs)
		if cs.SandboxID != string(id) {
			t.Fatalf("session %+v", cs)
		}
	})
	t.Run("suspended", func(t *testing.T) {
		id := e.runningSandbox(e.keyA)
		e.lifecycle(t, id, "suspend", e.keyA).want(t, http.StatusAccepted)
		e.finishNext(t, id, model.OpSuspend, true, &model.Snapshot{Kind: model.SnapshotFilesystem, Format: "oci-upper/1", Location: "/x", CreatedAt: time.Now()})
		done := e.sendAsync(t, req{method: "POST", path: "/v1/sandboxes/" + string(id) + "/commands", key: e.keyA, body: cmd})
		e.waitState(t, id, model.StateWaking)
		e.finishNext(t, id, model.OpWake, true, nil)
		(<-done).want(t, http.StatusCreated)
	})
	t.Run("running", func(t *testing.T) {
		id := e.runningSandbox(e.keyA)
		e.do("POST", "/v1/sandboxes/"+string(id)+"/commands", e.keyA, cmd).want(t, http.StatusCreated)
	})
	t.Run("failed resume", func(t *testing.T) {
		id := e.pausedSandbox(t)
		done := e.sendAsync(t, req{method: "POST", path: "/v1/sandboxes/" + string(id) + "/commands", key: e.keyA, body: cmd})
		e.waitState(t, id, model.StateResuming)
		e.finishNext(t, id, model.OpResume, false, nil)
		r := (<-done).wantError(t, http.StatusConflict, apiv1.CodeSandboxPaused)
		var ae apiv1.Error
		r.decode(t, &ae)
		if !strings.Contains(ae.Message, "failed: the runtime said no") {
			t.Fatalf("message %q", ae.Message)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		id := e.pausedSandbox(t)
		start := time.Now()
		r := e.do("POST", "/v1/sandboxes/"+string(id)+"/commands", e.keyA, cmd).wantError(t, http.StatusGatewayTimeout, apiv1.CodeResumeTimeout)
		if d := time.Since(start); d < 2*time.Second || d > 10*time.Second {
			t.Fatalf("answered after %s, want about the 2 s resume timeout", d)
		}
		var ae apiv1.Error
		r.decode(t, &ae)
		if !strings.Contains(ae.Message, "resuming") {
			t.Fatalf("message %q should say the sandbox is resuming", ae.Message)
		}
		// The resume it asked for stays queued; its end lets commands in.
		e.finishNext(t, id, model.OpResume, true, nil)
		e.do("POST", "/v1/sandboxes/"+string(id)+"/commands", e.keyA, `{"args": ["true"]}`).want(t, http.StatusCreated)
	})
	t.Run("deleting", func(t *testing.T) {
		id := e.runningSandbox(e.keyA)
		e.do("DELETE", "/v1/sandboxes/"+string(id), e.keyA, "").want(t, http.StatusAccepted)
		e.do("POST", "/v1/sandboxes/"+string(id)+"/commands", e.keyA, cmd).wantError(t, http.StatusConflict, apiv1.CodeSandboxNotRunning)
	})
}

// sendAsync sends r from another goroutine and delivers its response; a
// failure to send is reported there with t.Error (never FailNow off the
// test's goroutine) and delivers nil, which fails the reader.
func (e *testEnv) sendAsync(t *testing.T, r req) <-chan *resp {
	out := make(chan *resp, 1)
	go func() {
		r.t = &nonFatal{t}
		defer func() {
			if v := recover(); v != nil {
				if _, ok := v.(nonFatalStop); !ok {
					panic(v)
				}
				out <- &resp{}
			}
		}()
		out <- e.send(r)
	}()
	return out
}

// nonFatal turns Fatal into Error plus a panic that sendAsync recovers.
type nonFatal struct{ *testing.T }

type nonFatalStop struct{}

func (n *nonFatal) Fatal(args ...any) { n.Error(args...); panic(nonFatalStop{}) }
func (n *nonFatal) Fatalf(format string, args ...any) {
	n.Errorf(format, args...)
	panic(nonFatalStop{})
}

// waitState waits until sandbox id of project A is in state want.
func (e *testEnv) waitState(t testing.TB, id model.SandboxID, want model.SandboxState) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		sb, err := e.st.GetSandbox(context.Background(), e.projA, id)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s is %s, want %s", id, sb.State, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPausedSandboxRefusesAttachments: a process started before the pause
// gets no new attachment token while its sandbox is paused.
func TestPausedSandboxRefusesAttachments(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.runningSandbox(e.keyA)
	var cs apiv1.CommandSession
	e.do("POST", "/v1/sandboxes/"+string(id)+"/commands", e.keyA, `{"args": ["sleep", "60"]}`).want(t, http.StatusCreated).decode(t, &cs)
	e.lifecycle(t, id, "pause", e.keyA).want(t, http.StatusAccepted)
	e.finishNext(t, id, model.OpPause, true, nil)
	path := "/v1/sandboxes/" + string(id) + "/processes/" + cs.ProcessID + "/attachments"
	e.do("POST", path, e.keyA, "").wantError(t, http.StatusConflict, apiv1.CodeSandboxPaused)
	e.lifecycle(t, id, "resume", e.keyA).want(t, http.StatusAccepted)
	e.finishNext(t, id, model.OpResume, true, nil)
	e.do("POST", path, e.keyA, "").want(t, http.StatusCreated)
}

// TestFilesOfPausedSandbox: file calls of a paused sandbox are refused
// with sandbox_paused; a transfer that asks to resume first gets its token
// once the sandbox runs, and the data plane then serves it.
func TestFilesOfPausedSandbox(t *testing.T) {
	t.Parallel()
	f := newFilesEnv(t)
	id := f.pausedSandbox(t)
	base := "/v1/sandboxes/" + string(id)
	f.do("GET", base+"/files/stat?path=/", f.keyA, "").wantError(t, http.StatusConflict, apiv1.CodeSandboxPaused)
	f.do("POST", base+"/files/mkdir", f.keyA, `{"path": "/d"}`).wantError(t, http.StatusConflict, apiv1.CodeSandboxPaused)
	f.do("POST", base+"/files/transfers", f.keyA, `{"path": "/f", "direction": "upload"}`).wantError(t, http.StatusConflict, apiv1.CodeSandboxPaused)

	done := f.sendAsync(t, req{method: "POST", path: base + "/files/transfers", key: f.keyA, body: `{"path": "/f", "direction": "upload", "resume": true}`})
	f.waitState(t, id, model.StateResuming)
	f.finishNext(t, id, model.OpResume, true, nil)
	var tr apiv1.Transfer
	(<-done).want(t, http.StatusCreated).decode(t, &tr)
	tr.URL = f.dp.URL + strings.TrimPrefix(tr.URL, f.srv.URL)
	res := f.send(tr.Method, tr.URL, tr.Token, strings.NewReader("hello"), "application/octet-stream")
	res.Body.Close()
	if res.StatusCode/100 != 2 {
		t.Fatalf("upload after the resume: %s", res.Status)
	}
}

// TestSuspendKeepMemory: keep_memory is honoured where the runtime can
// write that kind of snapshot (carried on the queued suspend), refused
// (501, nothing queued) where it cannot, never ignored.
func TestSuspendKeepMemory(t *testing.T) {
	t.Parallel()
	runc := sandboxes.LifecycleSupport{Pause: true, Suspends: []model.SnapshotKind{model.SnapshotFilesystem}}
	runsc := sandboxes.LifecycleSupport{Pause: true, Suspends: []model.SnapshotKind{model.SnapshotMemory, model.SnapshotFilesystem}}
	qemu := sandboxes.LifecycleSupport{Pause: true, Suspends: []model.SnapshotKind{model.SnapshotMemory}}
	for _, tc := range []struct {
		name    string
		support sandboxes.LifecycleSupport // what the sandbox's runtime can do
		body    string
		status  int
		kind    model.SnapshotKind // carried on the queued suspend
		message string             // in the refusal
	}{
		{"filesystem-only on runc", runc, `{"keep_memory": false}`, http.StatusAccepted, model.SnapshotFilesystem, ""},
		{"memory on runsc", runsc, `{"keep_memory": true}`, http.StatusAccepted, model.SnapshotMemory, ""},
		{"no preference on runsc", runsc, `{}`, http.StatusAccepted, "", ""},
		{"filesystem-only on runsc", runsc, `{"keep_memory": false}`, http.StatusAccepted, model.SnapshotFilesystem, ""},
		{"filesystem-only on qemu", qemu, `{"keep_memory": false}`, http.StatusNotImplemented, "", "keeps only the filesystem (processes end) (keep_memory false) is not supported"},
		{"memory on runc", runc, `{"keep_memory": true}`, http.StatusNotImplemented, "", "keep_memory true) is not supported"},
		{"cannot suspend at all", sandboxes.LifecycleSupport{Pause: true}, `{"keep_memory": false}`, http.StatusNotImplemented, "", "cannot snapshot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, func(c *envConfig) {
				c.svc.LifecycleSupport = func(sb model.Sandbox) (sandboxes.LifecycleSupport, bool) {
					return tc.support, true
				}
			})
			id := e.runningSandbox(e.keyA)
			r := e.send(req{method: "POST", path: "/v1/sandboxes/" + string(id) + "/suspend", key: e.keyA, body: tc.body})
			if tc.status == http.StatusAccepted {
				r.want(t, tc.status)
				if got := e.sandboxState(t, id).State; got != string(model.StateSuspending) {
					t.Fatalf("state %s after the suspend", got)
				}
				ops, err := e.st.ListUnfinishedOperations(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				found := false
				for _, op := range ops {
					if op.SandboxID == id && op.Kind == model.OpSuspend {
						found = true
						if op.SnapshotKind != tc.kind {
							t.Fatalf("the queued suspend carries snapshot kind %q, want %q", op.SnapshotKind, tc.kind)
						}
					}
				}
				if !found {
					t.Fatal("no suspend queued")
				}
				return
			}
			var ae apiv1.Error
			r.wantError(t, tc.status, apiv1.CodeNotSupported).decode(t, &ae)
			if !strings.Contains(ae.Message, tc.message) {
				t.Errorf("message %q, want it to say %q", ae.Message, tc.message)
			}
			if got := e.sandboxState(t, id).State; got != string(model.StateRunning) {
				t.Fatalf("state %s after the refusal", got)
			}
		})
	}
	e := newEnv(t)
	id := e.runningSandbox(e.keyA)
	e.send(req{method: "POST", path: "/v1/sandboxes/" + string(id) + "/suspend", key: e.keyA, body: `{"keep_memory": "no"}`, invalid: true}).
		wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
}
