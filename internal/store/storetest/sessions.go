package storetest

import (
	"reflect"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func sessionTests() []namedTest {
	return []namedTest{
		{"CommandSessions", testCommandSessions},
		{"CommandSessionAttachOnce", testAttachOnce},
	}
}

func (e *env) newSession(sb model.Sandbox) model.CommandSession {
	now := e.now()
	return model.CommandSession{
		ID:        model.NewCommandSessionID(),
		ProjectID: sb.ProjectID,
		SandboxID: sb.ID,
		ProcessID: model.NewProcessID(),
		Spec: model.ProcessSpec{Args: []string{"sh", "-c", "echo hi"}, Env: model.Env{"A": "1"}, Cwd: "/work",
			Stdin: true, PTY: &model.TermSize{Rows: 24, Cols: 80}, User: &model.UserIDs{UID: 1000, GID: 100}, Timeout: 90 * time.Second},
		TokenHash: randomBytes(32),
		CreatedAt: now,
		ExpiresAt: now.Add(5 * time.Minute),
	}
}

func checkSession(e *env, got, want model.CommandSession) {
	e.t.Helper()
	want.CreatedAt, want.ExpiresAt, want.AttachedAt = us(want.CreatedAt), us(want.ExpiresAt), usPtr(want.AttachedAt)
	if !reflect.DeepEqual(got, want) {
		e.t.Fatalf("command session mismatch\n got: %+v\nwant: %+v", got, want)
	}
}

func testCommandSessions(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	sb, _ := e.sandbox(a.ID, tpl.Digest, nil)
	rec := e.idem(a.ID, "cmd-1")
	cs := e.newSession(sb)
	must(t, e.s.CreateCommandSession(e.ctx, cs, rec))
	got, err := e.s.GetCommandSessionByProcess(e.ctx, cs.ProcessID)
	must(t, err)
	checkSession(e, got, cs)

	// A spec with no env and no cwd round-trips as such.
	bare := e.newSession(sb)
	bare.Spec = model.ProcessSpec{Args: []string{"true"}}
	must(t, e.s.CreateCommandSession(e.ctx, bare, nil))
	got, err = e.s.GetCommandSessionByProcess(e.ctx, bare.ProcessID)
	must(t, err)
	checkSession(e, got, bare)

	again := e.newSession(sb)
	conflict(t, e.s.CreateCommandSession(e.ctx, again, e.idem(a.ID, "cmd-1")), rec)
	_, err = e.s.GetCommandSessionByProcess(e.ctx, again.ProcessID)
	mustIs(t, err, store.ErrNotFound)

	dupProcess := e.newSession(sb)
	dupProcess.ProcessID = cs.ProcessID
	mustIs(t, e.s.CreateCommandSession(e.ctx, dupProcess, nil), store.ErrAlreadyExists)
	dupID := e.newSession(sb)
	dupID.ID = cs.ID
	mustIs(t, e.s.CreateCommandSession(e.ctx, dupID, nil), store.ErrAlreadyExists)
	ghost := e.newSession(sb)
	ghost.SandboxID = model.NewSandboxID()
	mustIs(t, e.s.CreateCommandSession(e.ctx, ghost, nil), store.ErrNotFound)
	_, err = e.s.GetCommandSessionByProcess(e.ctx, model.NewProcessID())
	mustIs(t, err, store.ErrNotFound)

	// The attach target: the same session and its sandbox's current state.
	got, state, err := e.s.GetAttachTarget(e.ctx, cs.ProcessID)
	must(t, err)
	checkSession(e, got, cs)
	if state != sb.State {
		t.Errorf("attach target state %q, want %q", state, sb.State)
	}
	_, _, err = e.s.GetAttachTarget(e.ctx, model.NewProcessID())
	mustIs(t, err, store.ErrNotFound)
}

func testAttachOnce(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	sb, _ := e.sandbox(a.ID, tpl.Digest, nil)
	cs := e.newSession(sb)
	must(t, e.s.CreateCommandSession(e.ctx, cs, nil))
	const n = 8
	firsts := make([]bool, n)
	errs := make([]error, n)
	times := make([]time.Time, n)
	for i := range times {
		times[i] = e.now()
	}
	parallel(n, func(i int) {
		firsts[i], errs[i] = e.s.MarkCommandSessionAttached(e.ctx, cs.ID, times[i])
	})
	winner := -1
	for i := range firsts {
		must(t, errs[i])
		if firsts[i] {
			if winner >= 0 {
				t.Fatalf("two callers were told they attached first")
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatal("no caller attached first")
	}
	got, err := e.s.GetCommandSessionByProcess(e.ctx, cs.ProcessID)
	must(t, err)
	cs.AttachedAt = &times[winner]
	checkSession(e, got, cs)
	first, err := e.s.MarkCommandSessionAttached(e.ctx, cs.ID, e.now())
	if err != nil || first {
		t.Fatalf("later MarkCommandSessionAttached = %v, %v; want false, nil", first, err)
	}
	_, err = e.s.MarkCommandSessionAttached(e.ctx, model.NewCommandSessionID(), e.now())
	mustIs(t, err, store.ErrNotFound)
}
