package reaper

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/store/sqlite"
)

var t0 = time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)

// fixture is a real SQLite store with a project and a template, and a
// clock the reaper reads.
type fixture struct {
	t    testing.TB
	ctx  context.Context
	st   sqlStore
	node model.NodeID
	inc  model.Incarnation
	proj model.ProjectID
	tpl  model.TemplateDigest
	now  time.Time
}

// sqlStore is a store.Store over SQL (SQLite or PostgreSQL).
type sqlStore interface {
	store.Store
	DB() *sql.DB
}

// openSQLite opens a fresh SQLite store.
func openSQLite(t testing.TB) sqlStore {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "airlock.db"), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	return newFixtureOn(t, openSQLite(t))
}

func newFixtureOn(t testing.TB, st sqlStore) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{t: t, ctx: ctx, st: st, node: model.NewNodeID(), inc: model.NewIncarnation(), now: t0}
	_, err := st.RegisterNode(ctx, model.Node{ID: f.node, Incarnation: f.inc, Role: model.RoleAll, AdvertiseURL: "http://127.0.0.1:1"})
	must(t, err)
	p := model.Project{ID: model.NewProjectID(), Name: "reaper", CreatedAt: t0}
	must(t, st.CreateProject(ctx, p))
	manifest := []byte(`{"rootfs":"reaper"}`)
	tpl := model.Template{Digest: model.DigestFromSHA256(sha256.Sum256(manifest)), SizeBytes: 1, Manifest: manifest, CreatedAt: t0}
	must(t, st.PutTemplate(ctx, tpl))
	f.proj, f.tpl = p.ID, tpl.Digest
	return f
}

func (f *fixture) clock() time.Time { return f.now }

// sandbox creates a sandbox with timeouts to and takes it to state
// (pending, creating, running or paused) on the fixture's node.
func (f *fixture) sandbox(to model.Timeouts, state model.SandboxState) model.Sandbox {
	f.t.Helper()
	sb := model.Sandbox{
		ID: model.NewSandboxID(), ProjectID: f.proj, Template: f.tpl, Resources: model.DefaultResources(),
		State: model.StatePending, Timeouts: to, LastActivity: f.now, CreatedAt: f.now, UpdatedAt: f.now, NodeID: f.node,
	}
	op := model.Operation{ID: model.NewOperationID(), ProjectID: f.proj, SandboxID: sb.ID, Kind: model.OpCreate,
		State: model.OpPending, CreatedAt: f.now, UpdatedAt: f.now}
	must(f.t, f.st.CreateSandbox(f.ctx, sb, policy.Spec{}, op, nil))
	if state == model.StatePending {
		return f.get(sb.ID)
	}
	claimed, err := f.st.ClaimOperation(f.ctx, store.Claim{Owner: f.node, Incarnation: f.inc, Lease: time.Hour, Now: f.now})
	must(f.t, err)
	must(f.t, f.st.TransitionOnNode(f.ctx, sb.ID, store.Fence{Node: f.node, Incarnation: f.inc}, model.StatePending, model.StateCreating, "", "runc", f.now))
	if state == model.StateRunning || state == model.StatePaused {
		must(f.t, f.st.FinishOperation(f.ctx, store.Finish{OperationID: claimed.ID, Owner: f.node, Incarnation: f.inc, State: model.OpSucceeded,
			SandboxFrom: model.StateCreating, SandboxTo: model.StateRunning, Now: f.now}))
	}
	if state == model.StatePaused {
		pause := model.Operation{ID: model.NewOperationID(), ProjectID: f.proj, SandboxID: sb.ID, Kind: model.OpPause,
			State: model.OpPending, CreatedAt: f.now, UpdatedAt: f.now}
		_, err := f.st.RequestOperation(f.ctx, store.OperationRequest{ProjectID: f.proj, SandboxID: sb.ID, Operation: pause, Now: f.now})
		must(f.t, err)
		claimed, err := f.st.ClaimOperation(f.ctx, store.Claim{Owner: f.node, Incarnation: f.inc, Lease: time.Hour, Now: f.now})
		must(f.t, err)
		must(f.t, f.st.FinishOperation(f.ctx, store.Finish{OperationID: claimed.ID, Owner: f.node, Incarnation: f.inc, State: model.OpSucceeded,
			SandboxFrom: model.StatePausing, SandboxTo: model.StatePaused, Now: f.now}))
	}
	return f.get(sb.ID)
}

func (f *fixture) get(id model.SandboxID) model.Sandbox {
	f.t.Helper()
	sb, err := f.st.GetSandboxByID(f.ctx, id)
	must(f.t, err)
	return sb
}

// unfinished returns the kinds of the sandbox's unfinished operations.
func (f *fixture) unfinished(id model.SandboxID) []model.OperationKind {
	f.t.Helper()
	ops, err := f.st.ListUnfinishedOperations(f.ctx)
	must(f.t, err)
	var out []model.OperationKind
	for _, op := range ops {
		if op.SandboxID == id {
			out = append(out, op.Kind)
		}
	}
	return out
}

type fakeActivity struct {
	last map[model.SandboxID]time.Time
	held map[model.SandboxID]bool
}

func (a fakeActivity) LastActive(id model.SandboxID) (time.Time, bool) { return a.last[id], a.held[id] }

func TestReaper(t *testing.T) {
	deadline := func(on model.OnTimeout) model.Timeouts {
		return model.Timeouts{Idle: 0, Deadline: t0.Add(time.Minute), OnTimeout: on}
	}
	idle := model.Timeouts{Idle: time.Minute, OnTimeout: model.OnTimeoutDelete}
	no := func(model.Sandbox) bool { return false }
	type want struct {
		state    model.SandboxState
		reason   string
		ops      []model.OperationKind
		deadline bool // still set
	}
	for _, tc := range []struct {
		name       string
		timeouts   model.Timeouts
		state      model.SandboxState
		after      time.Duration // how far the clock moves before the pass
		canSuspend bool
		cannotStop bool // cannot pause either
		activity   func(sb model.Sandbox) fakeActivity
		before     func(f *fixture, sb model.Sandbox) // a concurrent change
		want       want
	}{
		{name: "deadline not yet passed", timeouts: deadline(model.OnTimeoutDelete), state: model.StateRunning, after: 59 * time.Second,
			canSuspend: true, want: want{state: model.StateRunning, deadline: true}},
		{name: "deadline passed: delete", timeouts: deadline(model.OnTimeoutDelete), state: model.StateRunning, after: time.Minute,
			canSuspend: true, want: want{state: model.StateDeleting, reason: ReasonDeadline, ops: []model.OperationKind{model.OpDelete}}},
		{name: "deadline passed: delete a pending sandbox", timeouts: deadline(model.OnTimeoutDelete), state: model.StatePending, after: time.Hour,
			canSuspend: true, want: want{state: model.StateDeleting, reason: ReasonDeadline, ops: []model.OperationKind{model.OpDelete}}},
		{name: "deadline passed: suspend", timeouts: deadline(model.OnTimeoutSuspend), state: model.StateRunning, after: time.Hour,
			canSuspend: true, want: want{state: model.StateSuspending, reason: ReasonDeadline, ops: []model.OperationKind{model.OpSuspend}}},
		{name: "deadline passed: cannot suspend, pause", timeouts: deadline(model.OnTimeoutSuspend), state: model.StateRunning, after: time.Hour,
			want: want{state: model.StatePausing, reason: ReasonDeadlinePaused, ops: []model.OperationKind{model.OpPause}}},
		{name: "deadline passed: can neither suspend nor pause", timeouts: deadline(model.OnTimeoutSuspend), state: model.StateRunning, after: time.Hour,
			cannotStop: true, want: want{state: model.StateRunning}},
		{name: "deadline passed: suspend waits for a create", timeouts: deadline(model.OnTimeoutSuspend), state: model.StateCreating, after: time.Hour,
			canSuspend: true, want: want{state: model.StateCreating, ops: []model.OperationKind{model.OpCreate}, deadline: true}},
		{name: "deadline passed: deleted by its user first", timeouts: deadline(model.OnTimeoutSuspend), state: model.StateRunning, after: time.Hour,
			canSuspend: true, before: func(f *fixture, sb model.Sandbox) {
				op := model.Operation{ID: model.NewOperationID(), ProjectID: sb.ProjectID, SandboxID: sb.ID, Kind: model.OpDelete, State: model.OpPending, CreatedAt: f.now, UpdatedAt: f.now}
				_, err := f.st.RequestDelete(f.ctx, store.DeleteRequest{ProjectID: sb.ProjectID, SandboxID: sb.ID, Operation: op, Now: f.now})
				must(f.t, err)
			}, want: want{state: model.StateDeleting, ops: []model.OperationKind{model.OpDelete}}},
		{name: "deadline passed: the user's pause wins", timeouts: deadline(model.OnTimeoutSuspend), state: model.StateRunning, after: time.Hour,
			canSuspend: true, before: func(f *fixture, sb model.Sandbox) {
				op := model.Operation{ID: model.NewOperationID(), ProjectID: sb.ProjectID, SandboxID: sb.ID, Kind: model.OpPause, State: model.OpPending, CreatedAt: f.now, UpdatedAt: f.now}
				_, err := f.st.RequestOperation(f.ctx, store.OperationRequest{ProjectID: sb.ProjectID, SandboxID: sb.ID, Operation: op, Now: f.now})
				must(f.t, err)
			}, want: want{state: model.StatePausing, ops: []model.OperationKind{model.OpPause}, deadline: true}},

		{name: "idle past its limit: suspend", timeouts: idle, state: model.StateRunning, after: 61 * time.Second,
			canSuspend: true, want: want{state: model.StateSuspending, reason: "idle for 1m0s", ops: []model.OperationKind{model.OpSuspend}}},
		{name: "idle and paused: suspend", timeouts: idle, state: model.StatePaused, after: 61 * time.Second,
			canSuspend: true, want: want{state: model.StateSuspending, reason: "idle for 1m0s", ops: []model.OperationKind{model.OpSuspend}}},
		{name: "deadline passed: paused and cannot suspend", timeouts: deadline(model.OnTimeoutSuspend), state: model.StatePaused, after: time.Hour,
			want: want{state: model.StatePaused}},
		{name: "deadline passed: delete a paused sandbox", timeouts: deadline(model.OnTimeoutDelete), state: model.StatePaused, after: time.Hour,
			want: want{state: model.StateDeleting, reason: ReasonDeadline, ops: []model.OperationKind{model.OpDelete}}},
		{name: "idle within its limit", timeouts: idle, state: model.StateRunning, after: 59 * time.Second,
			canSuspend: true, want: want{state: model.StateRunning}},
		{name: "idle limit 0: never", timeouts: model.Timeouts{OnTimeout: model.OnTimeoutDelete}, state: model.StateRunning, after: 1000 * time.Hour,
			canSuspend: true, want: want{state: model.StateRunning}},
		{name: "idle but a stream is attached", timeouts: idle, state: model.StateRunning, after: time.Hour, canSuspend: true,
			activity: func(sb model.Sandbox) fakeActivity {
				return fakeActivity{held: map[model.SandboxID]bool{sb.ID: true}}
			}, want: want{state: model.StateRunning}},
		{name: "idle in the store, active in memory", timeouts: idle, state: model.StateRunning, after: time.Hour, canSuspend: true,
			activity: func(sb model.Sandbox) fakeActivity {
				return fakeActivity{last: map[model.SandboxID]time.Time{sb.ID: t0.Add(time.Hour - time.Second)}}
			}, want: want{state: model.StateRunning}},
		{name: "idle but its runtime cannot suspend", timeouts: idle, state: model.StateRunning, after: time.Hour,
			want: want{state: model.StateRunning}},
		{name: "idle but not yet running", timeouts: idle, state: model.StateCreating, after: time.Hour,
			canSuspend: true, want: want{state: model.StateCreating, ops: []model.OperationKind{model.OpCreate}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			sb := f.sandbox(tc.timeouts, tc.state)
			cfg := Config{Store: f.st, Node: f.node, Now: f.clock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			if !tc.canSuspend {
				cfg.CanSuspend = func(sb model.Sandbox, _ model.SnapshotKind) bool { return no(sb) }
			}
			if tc.cannotStop {
				cfg.CanPause = no
			}
			if tc.activity != nil {
				cfg.Activity = tc.activity(sb)
			}
			r, err := New(cfg)
			must(t, err)
			f.now = f.now.Add(tc.after)
			if tc.before != nil {
				tc.before(f, sb)
			}
			if _, err := r.Pass(f.ctx); err != nil {
				t.Fatalf("Pass: %v", err)
			}
			got := f.get(sb.ID)
			if got.State != tc.want.state || got.StateReason != tc.want.reason {
				t.Fatalf("sandbox is %s (%q), want %s (%q)", got.State, got.StateReason, tc.want.state, tc.want.reason)
			}
			if ops := f.unfinished(sb.ID); fmt.Sprint(ops) != fmt.Sprint(tc.want.ops) {
				t.Fatalf("unfinished operations %v, want %v", ops, tc.want.ops)
			}
			if set := !got.Timeouts.Deadline.IsZero(); set != tc.want.deadline && !tc.timeouts.Deadline.IsZero() {
				t.Fatalf("deadline set = %v, want %v", set, tc.want.deadline)
			}
			// A second pass changes nothing more.
			if _, err := r.Pass(f.ctx); err != nil {
				t.Fatalf("second Pass: %v", err)
			}
			if ops := f.unfinished(sb.ID); fmt.Sprint(ops) != fmt.Sprint(tc.want.ops) {
				t.Fatalf("after a second pass: unfinished operations %v, want %v", ops, tc.want.ops)
			}
		})
	}
}

// TestReaperDeadlineSnapshotKind: a deadline's suspend carries the kind
// of snapshot the sandbox asked it to write onto the operation it queues;
// a runtime that cannot write that kind suspends with its own (rather than
// leaving the sandbox running past its deadline).
func TestReaperDeadlineSnapshotKind(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind model.SnapshotKind
		can  []model.SnapshotKind // what the runtime's suspend can write
		want model.SnapshotKind
	}{
		{"filesystem asked, can", model.SnapshotFilesystem, []model.SnapshotKind{model.SnapshotMemory, model.SnapshotFilesystem}, model.SnapshotFilesystem},
		{"memory asked, can", model.SnapshotMemory, []model.SnapshotKind{model.SnapshotMemory, model.SnapshotFilesystem}, model.SnapshotMemory},
		{"none asked", "", []model.SnapshotKind{model.SnapshotMemory, model.SnapshotFilesystem}, ""},
		{"filesystem asked, cannot", model.SnapshotFilesystem, []model.SnapshotKind{model.SnapshotMemory}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			sb := f.sandbox(model.Timeouts{OnTimeout: model.OnTimeoutSuspend, SnapshotKind: tc.kind, Deadline: t0.Add(time.Second)}, model.StateRunning)
			r, err := New(Config{Store: f.st, Node: f.node, Now: f.clock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				CanSuspend: func(_ model.Sandbox, k model.SnapshotKind) bool { return k == "" || slices.Contains(tc.can, k) }})
			must(t, err)
			f.now = f.now.Add(time.Minute)
			if _, err := r.Pass(f.ctx); err != nil {
				t.Fatalf("Pass: %v", err)
			}
			ops, err := f.st.ListUnfinishedOperations(f.ctx)
			must(t, err)
			var got []model.Operation
			for _, op := range ops {
				if op.SandboxID == sb.ID {
					got = append(got, op)
				}
			}
			if len(got) != 1 || got[0].Kind != model.OpSuspend || got[0].SnapshotKind != tc.want {
				t.Fatalf("queued %+v, want one suspend writing %q", got, tc.want)
			}
		})
	}
}

// TestReaperWakeIsNotIdle: a sandbox that changed state (woken, resumed)
// within its idle limit is not idle, however old its last activity.
func TestReaperWakeIsNotIdle(t *testing.T) {
	f := newFixture(t)
	sb := f.sandbox(model.Timeouts{Idle: time.Minute, OnTimeout: model.OnTimeoutDelete}, model.StateRunning)
	r, err := New(Config{Store: f.st, Node: f.node, Now: f.clock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	must(t, err)
	f.now = f.now.Add(time.Hour)
	// A pause and resume an hour later (no activity recorded).
	for _, k := range []model.OperationKind{model.OpPause, model.OpResume} {
		op := model.Operation{ID: model.NewOperationID(), ProjectID: sb.ProjectID, SandboxID: sb.ID, Kind: k, State: model.OpPending, CreatedAt: f.now, UpdatedAt: f.now}
		_, err := f.st.RequestOperation(f.ctx, store.OperationRequest{ProjectID: sb.ProjectID, SandboxID: sb.ID, Operation: op, Now: f.now})
		must(t, err)
		claimed, err := f.st.ClaimOperation(f.ctx, store.Claim{Owner: f.node, Incarnation: f.inc, Lease: time.Hour, Now: f.now})
		must(t, err)
		lc, err := model.LifecycleOf(k)
		must(t, err)
		must(t, f.st.FinishOperation(f.ctx, store.Finish{OperationID: claimed.ID, Owner: f.node, Incarnation: f.inc, State: model.OpSucceeded,
			SandboxFrom: lc.InProgress, SandboxTo: lc.Final, Now: f.now}))
	}
	f.now = f.now.Add(30 * time.Second)
	res, err := r.Pass(f.ctx)
	must(t, err)
	if res.Suspended != 0 || f.get(sb.ID).State != model.StateRunning {
		t.Fatalf("suspended %d within a minute of its resume; state %s", res.Suspended, f.get(sb.ID).State)
	}
	f.now = f.now.Add(time.Minute)
	res, err = r.Pass(f.ctx)
	must(t, err)
	if res.Suspended != 1 || f.get(sb.ID).State != model.StateSuspending {
		t.Fatalf("not suspended a minute after its resume: %+v, %s", res, f.get(sb.ID).State)
	}
}

func TestPurger(t *testing.T) {
	f := newFixture(t)
	sb := f.sandbox(model.Timeouts{OnTimeout: model.OnTimeoutDelete}, model.StatePending)
	op := model.Operation{ID: model.NewOperationID(), ProjectID: sb.ProjectID, SandboxID: sb.ID, Kind: model.OpDelete, State: model.OpPending, CreatedAt: f.now, UpdatedAt: f.now}
	_, err := f.st.RequestDelete(f.ctx, store.DeleteRequest{ProjectID: sb.ProjectID, SandboxID: sb.ID, Operation: op, Now: f.now})
	must(t, err)
	claimed, err := f.st.ClaimOperation(f.ctx, store.Claim{Owner: f.node, Incarnation: f.inc, Lease: time.Hour, Now: f.now})
	must(t, err)
	must(t, f.st.FinishOperation(f.ctx, store.Finish{OperationID: claimed.ID, Owner: f.node, Incarnation: f.inc, State: model.OpSucceeded,
		SandboxFrom: model.StateDeleting, SandboxTo: model.StateDeleted, Now: f.now}))
	must(t, f.st.PutIdempotency(f.ctx, store.IdempotencyRecord{ProjectID: f.proj, KeyHash: []byte("k"), Method: "POST", Path: "/",
		RequestHash: []byte("r"), Status: 200, SealedBody: []byte("b"), CreatedAt: f.now}))
	for _, at := range []time.Time{t0, t0, t0.Add(2 * time.Hour)} {
		_, err := f.st.AppendAudit(f.ctx, store.AuditEntry{At: at, Project: f.proj, Method: "POST", Route: "/v1/sandboxes", Action: "POST /v1/sandboxes", Status: 202})
		must(t, err)
	}

	p, err := NewPurger(PurgeConfig{Store: f.st, Retention: 48 * time.Hour, AuditRetention: 72 * time.Hour, Batch: 1, Now: f.clock,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	must(t, err)
	for _, tc := range []struct {
		after time.Duration
		want  PurgeTotals
	}{
		{time.Hour, PurgeTotals{}},
		{25 * time.Hour, PurgeTotals{Idempotency: 1}},
		{49 * time.Hour, PurgeTotals{PurgeCounts: store.PurgeCounts{Sandboxes: 1}}},
		{73 * time.Hour, PurgeTotals{Audit: 2}}, // in batches of one
		{74 * time.Hour, PurgeTotals{}},         // the bound is exclusive
		{74*time.Hour + time.Second, PurgeTotals{Audit: 1}},
	} {
		f.now = t0.Add(tc.after)
		got, err := p.Once(f.ctx)
		must(t, err)
		if got != tc.want {
			t.Fatalf("at +%s purged %+v, want %+v", tc.after, got, tc.want)
		}
	}
	if _, err := f.st.GetSandboxByID(f.ctx, sb.ID); err == nil {
		t.Fatal("the deleted sandbox is still there after the retention period")
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestReaperBackfill: a sandbox stored before activity was recorded is not
// idle since its last change when the reaper first runs, but from then on.
func TestReaperBackfill(t *testing.T) {
	f := newFixture(t)
	sb := f.sandbox(model.Timeouts{Idle: time.Minute, OnTimeout: model.OnTimeoutDelete}, model.StateRunning)
	if _, err := f.st.DB().ExecContext(f.ctx, `UPDATE sandboxes SET last_activity_at = 0`); err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Store: f.st, Node: f.node, Now: f.clock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	must(t, err)
	f.now = f.now.Add(time.Hour) // an hour after its last change
	res, err := r.Pass(f.ctx)
	must(t, err)
	if res.Suspended != 0 || !f.get(sb.ID).LastActivity.Equal(f.now) {
		t.Fatalf("first pass: %+v, last activity %s", res, f.get(sb.ID).LastActivity)
	}
	f.now = f.now.Add(61 * time.Second)
	res, err = r.Pass(f.ctx)
	must(t, err)
	if res.Suspended != 1 {
		t.Fatalf("a minute later: %+v, want it suspended", res)
	}
}
