package storetest

import (
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func activityTests() []namedTest {
	return []namedTest{
		{"TouchSandboxesMovesForwardOnly", testTouchSandboxes},
		{"BackfillActivity", testBackfillActivity},
		{"SetSandboxTimeout", testSetSandboxTimeout},
		{"ClearDeadlineIsCompareAndSwap", testClearDeadline},
		{"ListDeadlinePassed", testListDeadlinePassed},
		{"ListIdle", testListIdle},
		{"RequestReasonIsRecorded", testRequestReason},
		{"PurgeFinished", testPurgeFinished},
		{"PurgeFinishedInBatches", testPurgeBatches},
		{"ConcurrentFlushesAndRequests", testConcurrentFlushes},
	}
}

// onNode edits a sandbox's spec to place it on node ("": unplaced).
func onNode(node model.NodeID, edits ...func(*model.Sandbox)) func(*model.Sandbox) {
	return func(sb *model.Sandbox) {
		sb.NodeID = node
		for _, edit := range edits {
			edit(sb)
		}
	}
}

// sandboxWith creates a sandbox after edit changed its spec.
func (e *env) sandboxWith(p model.ProjectID, tpl model.TemplateDigest, edit func(*model.Sandbox)) model.Sandbox {
	e.t.Helper()
	sb, op := e.newSandbox(p, tpl, nil)
	edit(&sb)
	must(e.t, e.s.CreateSandbox(e.ctx, sb, policy.Spec{}, op, nil))
	return e.getSandbox(sb.ID)
}

// run takes a pending sandbox through its create on node: it is then running.
func (e *env) run(sb model.Sandbox, node model.NodeID) model.Sandbox {
	e.t.Helper()
	op := e.claim(node, e.now())
	if op.SandboxID != sb.ID || op.Kind != model.OpCreate {
		e.t.Fatalf("claimed %+v, want the create of %s", op, sb.ID)
	}
	must(e.t, e.s.TransitionOnNode(e.ctx, sb.ID, e.fence(node), model.StatePending, model.StateCreating, "", "runc", e.now()))
	must(e.t, e.finish(store.Finish{OperationID: op.ID, Owner: node, State: model.OpSucceeded,
		SandboxFrom: model.StateCreating, SandboxTo: model.StateRunning, Now: e.now()}))
	return e.getSandbox(sb.ID)
}

func ids(list []model.Sandbox) []model.SandboxID {
	out := make([]model.SandboxID, len(list))
	for i, sb := range list {
		out[i] = sb.ID
	}
	return out
}

func (e *env) wantIDs(what string, got []model.Sandbox, want ...model.SandboxID) {
	e.t.Helper()
	g := ids(got)
	if len(g) != len(want) {
		e.t.Fatalf("%s = %v, want %v", what, g, want)
	}
	for i := range g {
		if g[i] != want[i] {
			e.t.Fatalf("%s = %v, want %v", what, g, want)
		}
	}
}

func testTouchSandboxes(e *env) {
	t := e.t
	p := e.project()
	tpl := e.template()
	a, _ := e.sandbox(p.ID, tpl.Digest, nil)
	b, _ := e.sandbox(p.ID, tpl.Digest, nil)
	later := e.now().Add(time.Hour)
	n, err := e.s.TouchSandboxes(e.ctx, map[model.SandboxID]time.Time{
		a.ID:                 later,
		b.ID:                 b.LastActivity.Add(-time.Minute), // older: ignored
		model.NewSandboxID(): later,                            // unknown: skipped
	})
	must(t, err)
	if n != 1 {
		t.Fatalf("TouchSandboxes changed %d rows, want 1", n)
	}
	want := a
	want.LastActivity = later
	checkSandbox(t, e.getSandbox(a.ID), want) // updated_at is not activity's business
	checkSandbox(t, e.getSandbox(b.ID), b)
	n, err = e.s.TouchSandboxes(e.ctx, nil)
	if err != nil || n != 0 {
		t.Fatalf("TouchSandboxes(nil) = %d, %v", n, err)
	}
}

func testBackfillActivity(e *env) {
	t := e.t
	p := e.project()
	tpl := e.template()
	node := e.homeNode()
	none := func(sb *model.Sandbox) { sb.LastActivity = time.Time{} }
	old := e.run(e.sandboxWith(p.ID, tpl.Digest, none), node)
	recorded := e.run(e.sandboxWith(p.ID, tpl.Digest, func(*model.Sandbox) {}), node)
	other := e.node()
	elsewhere := e.run(e.sandboxWith(p.ID, tpl.Digest, onNode(other, none)), other)
	at := e.now()
	n, err := e.s.BackfillActivity(e.ctx, node, at)
	must(t, err)
	if n != 1 {
		t.Fatalf("BackfillActivity changed %d rows, want 1", n)
	}
	want := old
	want.LastActivity = at
	checkSandbox(t, e.getSandbox(old.ID), want)
	checkSandbox(t, e.getSandbox(recorded.ID), recorded)
	checkSandbox(t, e.getSandbox(elsewhere.ID), elsewhere)
	if n, err = e.s.BackfillActivity(e.ctx, node, e.now()); err != nil || n != 0 {
		t.Fatalf("second BackfillActivity = %d, %v", n, err)
	}
	_, err = e.s.BackfillActivity(e.ctx, "", at)
	mustIs(t, err, model.ErrInvalid)
}

func testSetSandboxTimeout(e *env) {
	t := e.t
	p, other := e.project(), e.project()
	tpl := e.template()
	sb, _ := e.sandbox(p.ID, tpl.Digest, nil)
	at := e.now()
	deadline := at.Add(90 * time.Second)
	got, err := e.s.SetSandboxTimeout(e.ctx, p.ID, sb.ID, deadline, model.OnTimeoutDelete, "", at)
	must(t, err)
	want := sb
	want.Timeouts.Deadline, want.Timeouts.OnTimeout, want.UpdatedAt = deadline, model.OnTimeoutDelete, at
	checkSandbox(t, got, want)
	checkSandbox(t, e.getSandbox(sb.ID), want)

	// Zero removes the deadline.
	at = e.now()
	got, err = e.s.SetSandboxTimeout(e.ctx, p.ID, sb.ID, time.Time{}, model.OnTimeoutSuspend, "", at)
	must(t, err)
	want.Timeouts.Deadline, want.Timeouts.OnTimeout, want.UpdatedAt = time.Time{}, model.OnTimeoutSuspend, at
	checkSandbox(t, got, want)

	_, err = e.s.SetSandboxTimeout(e.ctx, other.ID, sb.ID, deadline, model.OnTimeoutDelete, "", e.now())
	mustIs(t, err, store.ErrNotFound)
	_, err = e.s.SetSandboxTimeout(e.ctx, p.ID, sb.ID, deadline, "later", "", e.now())
	mustIs(t, err, model.ErrInvalid)
	_, err = e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: p.ID, SandboxID: sb.ID, Operation: e.deleteOp(sb), Now: e.now()})
	must(t, err)
	_, err = e.s.SetSandboxTimeout(e.ctx, p.ID, sb.ID, deadline, model.OnTimeoutDelete, "", e.now())
	mustIs(t, err, model.ErrInvalidTransition)
	if d := e.getSandbox(sb.ID).Timeouts.Deadline; !d.IsZero() {
		t.Fatalf("a refused change wrote deadline %s", d)
	}
}

func testClearDeadline(e *env) {
	t := e.t
	p := e.project()
	sb, _ := e.sandbox(p.ID, e.template().Digest, nil)
	ok, err := e.s.ClearDeadline(e.ctx, sb.ID, sb.Timeouts.Deadline.Add(time.Second))
	must(t, err)
	if ok {
		t.Fatal("ClearDeadline with a stale deadline cleared it")
	}
	ok, err = e.s.ClearDeadline(e.ctx, sb.ID, sb.Timeouts.Deadline)
	must(t, err)
	if !ok {
		t.Fatal("ClearDeadline with the current deadline did not clear it")
	}
	want := sb
	want.Timeouts.Deadline = time.Time{}
	checkSandbox(t, e.getSandbox(sb.ID), want)
	if ok, err = e.s.ClearDeadline(e.ctx, model.NewSandboxID(), sb.Timeouts.Deadline); err != nil || ok {
		t.Fatalf("ClearDeadline of an unknown sandbox = %v, %v", ok, err)
	}
}

func testListDeadlinePassed(e *env) {
	t := e.t
	p := e.project()
	tpl := e.template()
	node, other := e.node(), e.node()
	base := e.now()
	with := func(deadline time.Time) func(*model.Sandbox) {
		return func(sb *model.Sandbox) { sb.Timeouts.Deadline = deadline }
	}
	// Unplaced sandboxes (no node yet) are every node's to reap.
	late := e.sandboxWith(p.ID, tpl.Digest, onNode("", with(base.Add(2*time.Minute))))
	early := e.sandboxWith(p.ID, tpl.Digest, onNode("", with(base.Add(time.Minute))))
	none := e.sandboxWith(p.ID, tpl.Digest, onNode("", with(time.Time{})))
	future := e.sandboxWith(p.ID, tpl.Digest, onNode("", with(base.Add(time.Hour))))
	elsewhere := e.sandboxWith(p.ID, tpl.Digest, onNode(other, with(base.Add(61*time.Second))))
	mine := e.sandboxWith(p.ID, tpl.Digest, onNode(node, with(base.Add(90*time.Second))))
	_ = none

	now := base.Add(2 * time.Minute)
	got, err := e.s.ListDeadlinePassed(e.ctx, store.ReapQuery{Node: node, Now: now, Limit: 10})
	must(t, err)
	e.wantIDs("passed deadlines", got, early.ID, mine.ID, late.ID)
	got, err = e.s.ListDeadlinePassed(e.ctx, store.ReapQuery{Node: node, Now: now, Limit: 1})
	must(t, err)
	e.wantIDs("passed deadlines, limit 1", got, early.ID)
	got, err = e.s.ListDeadlinePassed(e.ctx, store.ReapQuery{Node: other, Now: now, Limit: 10})
	must(t, err)
	e.wantIDs("passed deadlines of the other node", got, early.ID, elsewhere.ID, late.ID)
	_, err = e.s.ListDeadlinePassed(e.ctx, store.ReapQuery{Node: node, Now: now, Limit: 0})
	mustIs(t, err, model.ErrInvalid)
	_, err = e.s.ListDeadlinePassed(e.ctx, store.ReapQuery{Now: now, Limit: 10})
	mustIs(t, err, model.ErrInvalid)

	// NextDeadline: the earliest deadline strictly after now, of the
	// node's and the unplaced sandboxes.
	for _, tc := range []struct {
		name string
		node model.NodeID
		now  time.Time
		want time.Time // zero: none
	}{
		{"before every deadline", node, base, early.Timeouts.Deadline},
		{"at a deadline: the next one", node, early.Timeouts.Deadline, mine.Timeouts.Deadline},
		{"other node", other, early.Timeouts.Deadline, elsewhere.Timeouts.Deadline},
		{"after the node's: an unplaced one", node, base.Add(2 * time.Minute), future.Timeouts.Deadline},
		{"after every deadline", node, base.Add(2 * time.Hour), time.Time{}},
	} {
		got, ok, err := e.s.NextDeadline(e.ctx, store.ReapQuery{Node: tc.node, Now: tc.now})
		must(t, err)
		if ok != !tc.want.IsZero() || !got.Equal(tc.want) {
			t.Errorf("NextDeadline, %s: %v %v; want %v", tc.name, got, ok, tc.want)
		}
	}
	_, _, err = e.s.NextDeadline(e.ctx, store.ReapQuery{Now: now})
	mustIs(t, err, model.ErrInvalid)
}

func testListIdle(e *env) {
	t := e.t
	p := e.project()
	tpl := e.template()
	node := e.homeNode()
	idle := func(d time.Duration) func(*model.Sandbox) {
		return func(sb *model.Sandbox) { sb.Timeouts.Idle = d }
	}
	short := e.run(e.sandboxWith(p.ID, tpl.Digest, idle(time.Minute)), node)
	long := e.run(e.sandboxWith(p.ID, tpl.Digest, idle(time.Hour)), node)
	never := e.run(e.sandboxWith(p.ID, tpl.Digest, idle(0)), node)
	busy := e.run(e.sandboxWith(p.ID, tpl.Digest, idle(time.Minute)), node)
	other := e.node()
	elsewhere := e.run(e.sandboxWith(p.ID, tpl.Digest, onNode(other, idle(time.Minute))), other)
	pending := e.sandboxWith(p.ID, tpl.Digest, idle(time.Minute))
	_, _, _ = never, pending, elsewhere
	// busy has a pause under way: not idle-suspended behind its back.
	pause := model.Operation{ID: model.NewOperationID(), ProjectID: p.ID, SandboxID: busy.ID, Kind: model.OpPause,
		State: model.OpPending, CreatedAt: e.now(), UpdatedAt: e.now()}
	_, err := e.s.RequestOperation(e.ctx, store.OperationRequest{ProjectID: p.ID, SandboxID: busy.ID, Operation: pause, Now: e.now()})
	must(t, err)

	list := func(now time.Time) []model.Sandbox {
		got, err := e.s.ListIdle(e.ctx, store.ReapQuery{Node: node, Now: now, Limit: 10})
		must(t, err)
		return got
	}
	last := e.now()
	e.wantIDs("idle within a minute of the last change", list(last))
	e.wantIDs("idle after two minutes", list(last.Add(2*time.Minute)), short.ID)
	e.wantIDs("idle after two hours", list(last.Add(2*time.Hour)), short.ID, long.ID)

	// Activity counts from the latest of last activity and last change.
	must2(e, last.Add(119*time.Minute+30*time.Second), short.ID)
	e.wantIDs("idle after two hours, short touched", list(last.Add(2*time.Hour)), long.ID)

	// Longest idle first.
	e.wantIDs("idle at three hours", list(last.Add(3*time.Hour)), long.ID, short.ID)
}

// must2 touches id at at.
func must2(e *env, at time.Time, id model.SandboxID) {
	e.t.Helper()
	_, err := e.s.TouchSandboxes(e.ctx, map[model.SandboxID]time.Time{id: at})
	must(e.t, err)
}

func testRequestReason(e *env) {
	t := e.t
	p := e.project()
	tpl := e.template()
	node := e.homeNode()
	sb := e.run(e.sandboxWith(p.ID, tpl.Digest, func(*model.Sandbox) {}), node)
	suspend := model.Operation{ID: model.NewOperationID(), ProjectID: p.ID, SandboxID: sb.ID, Kind: model.OpSuspend,
		State: model.OpPending, CreatedAt: e.now(), UpdatedAt: e.now()}
	got, err := e.s.RequestOperation(e.ctx, store.OperationRequest{ProjectID: p.ID, SandboxID: sb.ID, Operation: suspend,
		Now: e.now(), Reason: "idle for 1h0m0s"})
	must(t, err)
	if got.State != model.StateSuspending || got.StateReason != "idle for 1h0m0s" {
		t.Fatalf("after a reasoned suspend request: %s %q", got.State, got.StateReason)
	}

	other := e.sandboxWith(p.ID, tpl.Digest, func(*model.Sandbox) {})
	got, err = e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: p.ID, SandboxID: other.ID, Operation: e.deleteOp(other),
		Now: e.now(), Reason: "deadline passed"})
	must(t, err)
	if got.State != model.StateDeleting || got.StateReason != "deadline passed" {
		t.Fatalf("after a reasoned delete request: %s %q", got.State, got.StateReason)
	}
}

// finishDelete takes a deleting sandbox's delete operation to its end.
func (e *env) finishDelete(sb model.Sandbox, node model.NodeID, at time.Time) {
	e.t.Helper()
	op, err := e.s.ClaimOperation(e.ctx, store.Claim{Owner: node, Incarnation: e.inc(node), Lease: time.Minute, Now: at})
	must(e.t, err)
	if op.SandboxID != sb.ID || op.Kind != model.OpDelete {
		e.t.Fatalf("claimed %+v, want the delete of %s", op, sb.ID)
	}
	must(e.t, e.finish(store.Finish{OperationID: op.ID, Owner: node, State: model.OpSucceeded,
		SandboxFrom: model.StateDeleting, SandboxTo: model.StateDeleted, Now: at}))
}

func testPurgeFinished(e *env) {
	t := e.t
	p := e.project()
	tpl := e.template()
	node := e.homeNode()
	ep := e.profile("dev", `{"allow": ["example.com"]}`)

	// gone: deleted long ago, with metadata, an egress profile link, a
	// session and operations.
	gone, op := e.newSandbox(p.ID, tpl.Digest, model.Metadata{"team": "a"})
	must(t, e.s.CreateSandbox(e.ctx, gone, policy.Spec{Profiles: []policy.ProfileName{ep.Name}}, op, nil))
	gone = e.run(e.getSandbox(gone.ID), node)
	goneSession := e.newSession(gone)
	must(t, e.s.CreateCommandSession(e.ctx, goneSession, nil))
	_, err := e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: p.ID, SandboxID: gone.ID, Operation: e.deleteOp(gone), Now: e.now()})
	must(t, err)
	e.finishDelete(gone, node, e.now())

	// live: running, with an old finished create and two old expired
	// sessions, one never attached (a background command's): both stay
	// while the sandbox lives.
	live := e.run(e.sandboxWith(p.ID, tpl.Digest, func(*model.Sandbox) {}), node)
	stale := e.newSession(live)
	must(t, e.s.CreateCommandSession(e.ctx, stale, nil))
	used := e.newSession(live)
	must(t, e.s.CreateCommandSession(e.ctx, used, nil))
	_, err = e.s.MarkCommandSessionAttached(e.ctx, used.ID, e.now())
	must(t, err)

	cutoff := e.now().Add(time.Hour) // everything so far is older
	// recent: deleted after the cutoff; its rows stay.
	recent := e.sandboxWith(p.ID, tpl.Digest, func(*model.Sandbox) {})
	_, err = e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: p.ID, SandboxID: recent.ID, Operation: e.deleteOp(recent), Now: e.now()})
	must(t, err)
	e.finishDelete(recent, node, cutoff.Add(time.Minute))
	// unfinished: a pending delete of a live sandbox stays, however old.
	pendingDel := e.run(e.sandboxWith(p.ID, tpl.Digest, func(*model.Sandbox) {}), node)
	delOp := e.deleteOp(pendingDel)
	_, err = e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: p.ID, SandboxID: pendingDel.ID, Operation: delOp, Now: e.now()})
	must(t, err)

	got, err := e.s.PurgeFinished(e.ctx, store.Purge{Before: cutoff, Limit: 100})
	must(t, err)
	// Operations: the creates of live and pendingDel and the cancelled
	// create of recent (gone's went with it; recent's delete ended later).
	if want := (store.PurgeCounts{Sandboxes: 1, Sessions: 1, Operations: 3}); got != want {
		t.Fatalf("PurgeFinished = %+v, want %+v", got, want)
	}
	_, err = e.s.GetSandboxByID(e.ctx, gone.ID)
	mustIs(t, err, store.ErrNotFound)
	_, err = e.s.GetCommandSessionByProcess(e.ctx, goneSession.ProcessID)
	mustIs(t, err, store.ErrNotFound)
	_, err = e.s.GetCommandSessionByProcess(e.ctx, stale.ProcessID)
	must(t, err)
	_, err = e.s.GetCommandSessionByProcess(e.ctx, used.ProcessID)
	must(t, err)
	e.getSandbox(live.ID)
	e.getSandbox(recent.ID)
	if op := e.getOp(delOp); op.State != model.OpPending {
		t.Fatalf("pending delete after purge: %+v", op)
	}
	// The profile gone named is free: it can be deleted now.
	must(t, e.s.DeleteEgressProfile(e.ctx, ep.Name))
	// Listing by metadata does not find the purged sandbox's pairs.
	page, err := e.s.ListSandboxes(e.ctx, store.SandboxQuery{ProjectID: p.ID, Metadata: map[string]string{"team": "a"}, Limit: 10})
	must(t, err)
	if len(page.Sandboxes) != 0 {
		t.Fatalf("metadata listing after purge: %v", ids(page.Sandboxes))
	}

	// Nothing left to purge before the cutoff.
	got, err = e.s.PurgeFinished(e.ctx, store.Purge{Before: cutoff, Limit: 100})
	must(t, err)
	if got != (store.PurgeCounts{}) {
		t.Fatalf("second PurgeFinished = %+v, want nothing", got)
	}
	_, err = e.s.PurgeFinished(e.ctx, store.Purge{Before: cutoff, Limit: 0})
	mustIs(t, err, model.ErrInvalid)
}

func testPurgeBatches(e *env) {
	t := e.t
	p := e.project()
	tpl := e.template()
	node := e.homeNode()
	for range 5 {
		sb := e.sandboxWith(p.ID, tpl.Digest, func(*model.Sandbox) {})
		_, err := e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: p.ID, SandboxID: sb.ID, Operation: e.deleteOp(sb), Now: e.now()})
		must(t, err)
		e.finishDelete(sb, node, e.now())
	}
	cutoff := e.now()
	total := 0
	for i := 0; ; i++ {
		got, err := e.s.PurgeFinished(e.ctx, store.Purge{Before: cutoff, Limit: 2})
		must(t, err)
		if got.Max() > 2 {
			t.Fatalf("batch %d purged %+v, over the limit 2", i, got)
		}
		total += got.Sandboxes
		if got.Max() < 2 {
			break
		}
		if i > 5 {
			t.Fatal("PurgeFinished does not converge")
		}
	}
	if total != 5 {
		t.Fatalf("purged %d sandboxes in batches, want 5", total)
	}
}

// testConcurrentFlushes: flushes of overlapping sets (several servers'
// trackers) race with lifecycle requests and timeout changes on the same
// rows; none fails and the latest activity wins.
func testConcurrentFlushes(e *env) {
	t := e.t
	p := e.project()
	tpl := e.template()
	node := e.homeNode()
	var list []model.Sandbox
	for range 6 {
		list = append(list, e.run(e.sandboxWith(p.ID, tpl.Digest, func(*model.Sandbox) {}), node))
	}
	base := e.now()
	const flushers = 4
	errs := make([]error, flushers+len(list))
	parallel(flushers+len(list), func(i int) {
		if i < flushers {
			for round := range 10 {
				at := map[model.SandboxID]time.Time{}
				for j, sb := range list {
					at[sb.ID] = base.Add(time.Duration(round*100+i*10+j) * time.Millisecond)
				}
				if _, err := e.s.TouchSandboxes(e.ctx, at); err != nil {
					errs[i] = err
					return
				}
			}
			return
		}
		sb := list[i-flushers]
		if i%2 == 0 {
			_, errs[i] = e.s.SetSandboxTimeout(e.ctx, p.ID, sb.ID, base.Add(time.Hour), model.OnTimeoutDelete, "", base)
			return
		}
		op := model.Operation{ID: model.NewOperationID(), ProjectID: p.ID, SandboxID: sb.ID, Kind: model.OpPause,
			State: model.OpPending, CreatedAt: base, UpdatedAt: base}
		_, errs[i] = e.s.RequestOperation(e.ctx, store.OperationRequest{ProjectID: p.ID, SandboxID: sb.ID, Operation: op, Now: base})
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("goroutine %d: %v", i, err)
		}
	}
	for j, sb := range list {
		want := us(base.Add(time.Duration(900+(flushers-1)*10+j) * time.Millisecond))
		if got := e.getSandbox(sb.ID).LastActivity; !got.Equal(want) {
			t.Fatalf("sandbox %d: last activity %s, want the latest flushed %s", j, got, want)
		}
	}
}
