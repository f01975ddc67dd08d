package storetest

import (
	"context"
	"runtime"
	"slices"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// WakeTimeout bounds how long a watcher may take to be woken.
const WakeTimeout = 10 * time.Second

func watchTests() []namedTest {
	return []namedTest{
		{"WatchWakesOnEveryChange", testWatchWakes},
		{"WatchChannelLifecycle", testWatchLifecycle},
		{"WatchNodeAndBuilds", testWatchNodeAndBuilds},
	}
}

// drain empties ch of wake-ups already delivered, waiting briefly for late
// ones (a PostgreSQL listener delivers its own NOTIFY asynchronously).
func drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		case <-time.After(100 * time.Millisecond):
			return
		}
	}
}

// WaitWake fails t unless ch receives a value within WakeTimeout. It is
// exported for implementation-specific tests (for example a second process).
func WaitWake(t interface {
	Helper()
	Fatalf(string, ...any)
}, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case _, ok := <-ch:
		if !ok {
			t.Fatalf("%s: watch channel closed instead of waking", what)
		}
	case <-time.After(WakeTimeout):
		t.Fatalf("%s: no wake-up within %s", what, WakeTimeout)
	}
}

func testWatchWakes(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	node := e.homeNode()
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	w1, w2 := e.s.Watch(ctx), e.s.Watch(ctx)
	if cap(w1) != 1 {
		t.Fatalf("watch channel capacity %d, want 1", cap(w1))
	}
	var sb model.Sandbox
	var createOp model.Operation
	for _, tc := range []struct {
		name string
		do   func()
	}{
		{"CreateSandbox", func() { sb, createOp = e.sandbox(a.ID, tpl.Digest, nil) }},
		{"ClaimOperation", func() { e.claim(node, e.now()) }},
		{"TransitionOnNode", func() {
			must(t, e.s.TransitionOnNode(e.ctx, sb.ID, e.fence(node), model.StatePending, model.StateCreating, "", "runsc", e.now()))
		}},
		{"FinishOperation", func() {
			must(t, e.finish(store.Finish{OperationID: createOp.ID, Owner: node, State: model.OpSucceeded,
				SandboxFrom: model.StateCreating, SandboxTo: model.StateRunning, Now: e.now()}))
		}},
		{"RequestDelete", func() {
			_, err := e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: a.ID, SandboxID: sb.ID, Operation: e.deleteOp(sb), Now: e.now()})
			must(t, err)
		}},
		{"ReleaseLeases", func() {
			e.claim(node, e.now())
			drain(w1)
			drain(w2)
			n, err := e.s.ReleaseLeases(e.ctx, node, e.now())
			must(t, err)
			if n != 1 {
				t.Fatalf("released %d leases, want 1", n)
			}
		}},
		{"TransitionSandbox", func() {
			other, _ := e.sandbox(a.ID, tpl.Digest, nil)
			drain(w1)
			drain(w2)
			must(t, e.s.TransitionSandbox(e.ctx, other.ID, model.StatePending, model.StateDeleting, "", e.now()))
		}},
	} {
		drain(w1)
		drain(w2)
		tc.do()
		WaitWake(t, w1, tc.name)
		WaitWake(t, w2, tc.name+" (second watcher)")
	}

	// Wake-ups coalesce and never block writers: an unread watcher does not
	// stall 20 changes, and holds at most one pending value.
	w3 := e.s.Watch(ctx)
	for i := 0; i < 20; i++ {
		e.sandbox(a.ID, tpl.Digest, nil)
	}
	WaitWake(t, w3, "after 20 changes")
	if len(w3) > 1 {
		t.Fatalf("%d pending wake-ups, want at most 1", len(w3))
	}
}

func testWatchLifecycle(e *env) {
	t := e.t
	ctx, cancel := context.WithCancel(e.ctx)
	w := e.s.Watch(ctx)
	cancel()
	select {
	case _, ok := <-w:
		if ok {
			// A wake-up raced with the cancel; the close must follow.
			if _, ok := <-w; ok {
				t.Fatal("watch channel still open after its context ended")
			}
		}
	case <-time.After(WakeTimeout):
		t.Fatal("watch channel not closed after its context ended")
	}
	// Already-ended context: closed at once.
	select {
	case _, ok := <-e.s.Watch(ctx):
		if ok {
			t.Fatal("Watch on an ended context delivered a value")
		}
	case <-time.After(WakeTimeout):
		t.Fatal("Watch on an ended context returned an open channel")
	}
	// Many watchers come and go without leaving goroutines behind.
	before := runtime.NumGoroutine()
	for i := 0; i < 200; i++ {
		c, cancel := context.WithCancel(e.ctx)
		ch := e.s.Watch(c)
		cancel()
		for range ch {
		}
	}
	deadline := time.Now().Add(WakeTimeout)
	for runtime.NumGoroutine() > before+10 {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines grew from %d to %d after 200 finished watchers", before, runtime.NumGoroutine())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Watchers is a set of named watch channels, for checking which of them a
// change wakes. It is exported for implementation-specific tests (for
// example a second process).
type Watchers map[string]<-chan struct{}

// Drain empties every channel of wake-ups already delivered, waiting
// briefly for late ones (a PostgreSQL listener delivers notifications
// asynchronously).
func (ws Watchers) Drain() {
	for {
		woke := false
		for _, ch := range ws {
			select {
			case <-ch:
				woke = true
			default:
			}
		}
		if !woke {
			time.Sleep(100 * time.Millisecond) // for late ones
			for _, ch := range ws {
				select {
				case <-ch:
					woke = true
				default:
				}
			}
			if !woke {
				return
			}
		}
	}
}

// Expect fails t unless the watchers named in want are woken and the others
// are not. The woken ones are waited for first (up to WakeTimeout each),
// then the others get a moment to show a late wake-up; a wake-up still in
// flight after it goes unseen, so only a wake-up that comes is a failure.
func (ws Watchers) Expect(t interface {
	Helper()
	Fatalf(string, ...any)
}, what string, want ...string) {
	t.Helper()
	for _, name := range want {
		if _, ok := ws[name]; !ok {
			t.Fatalf("%s: no watcher %q", what, name)
		}
		WaitWake(t, ws[name], what+": "+name)
	}
	time.Sleep(200 * time.Millisecond)
	for name, ch := range ws {
		if slices.Contains(want, name) {
			continue
		}
		select {
		case _, ok := <-ch:
			if ok {
				t.Fatalf("%s woke %s, which it does not concern (want only %v)", what, name, want)
			}
			t.Fatalf("%s: watcher %s closed", what, name)
		default:
		}
	}
}

// testWatchNodeAndBuilds: a node's watch wakes for changes of the
// operations and sandboxes on the node (and the node's row) and for
// cluster-wide changes, never for another node's or an unplaced sandbox's;
// the builds' watch only for builds and cluster-wide changes; the coarse
// watch for all of them.
func testWatchNodeAndBuilds(e *env) {
	t := e.t
	p, tpl := e.project(), e.template()
	a, b := e.node(), e.node()
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	ws := Watchers{"A": e.s.WatchNode(ctx, a), "B": e.s.WatchNode(ctx, b), "builds": e.s.WatchBuilds(ctx), "all": e.s.Watch(ctx)}
	for name, ch := range ws {
		if cap(ch) != 1 {
			t.Fatalf("%s: watch channel capacity %d, want 1", name, cap(ch))
		}
	}
	var onA, onB, unplaced model.Sandbox
	var createA model.Operation
	for _, step := range []struct {
		name string
		do   func()
		want []string
	}{
		{"create on A", func() { onA, createA = e.mustCreateOn(p.ID, tpl.Digest, a) }, []string{"A", "all"}},
		{"claim by A", func() { e.claim(a, e.now()) }, []string{"A", "all"}},
		{"TransitionOnNode on A", func() {
			must(t, e.s.TransitionOnNode(e.ctx, onA.ID, e.fence(a), model.StatePending, model.StateCreating, "", "runc", e.now()))
		}, []string{"A", "all"}},
		{"finish on A", func() {
			must(t, e.finish(store.Finish{OperationID: createA.ID, Owner: a, State: model.OpSucceeded,
				SandboxFrom: model.StateCreating, SandboxTo: model.StateRunning, Now: e.now()}))
		}, []string{"A", "all"}},
		{"request on A", func() {
			now := e.now()
			op := model.Operation{ID: model.NewOperationID(), ProjectID: p.ID, SandboxID: onA.ID, Kind: model.OpPause,
				State: model.OpPending, CreatedAt: now, UpdatedAt: now}
			_, err := e.s.RequestOperation(e.ctx, store.OperationRequest{ProjectID: p.ID, SandboxID: onA.ID, Operation: op, Now: now})
			must(t, err)
		}, []string{"A", "all"}},
		{"create on B", func() { onB, _ = e.mustCreateOn(p.ID, tpl.Digest, b) }, []string{"B", "all"}},
		{"delete on B", func() {
			_, err := e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: p.ID, SandboxID: onB.ID, Operation: e.deleteOp(onB), Now: e.now()})
			must(t, err)
		}, []string{"B", "all"}},
		{"deadline cleared (the reaper's)", func() {
			cleared, err := e.s.ClearDeadline(e.ctx, onA.ID, onA.Timeouts.Deadline)
			must(t, err)
			if !cleared {
				t.Fatal("ClearDeadline cleared nothing")
			}
		}, []string{"all"}},
		{"unplaced create", func() { unplaced, _ = e.mustCreateOn(p.ID, tpl.Digest, "") }, []string{"all"}},
		{"placed on B", func() { must(t, e.s.AssignNode(e.ctx, unplaced.ID, b)) }, []string{"B", "all"}},
		{"A cordoned", func() {
			_, err := e.s.SetNodeState(e.ctx, a, model.NodeCordoned)
			must(t, err)
		}, []string{"A", "all"}},
		{"build queued", func() { e.newBuild("w") }, []string{"builds", "all"}},
		{"build claimed", func() {
			_, err := e.s.ClaimBuild(e.ctx, store.Claim{Owner: a, Lease: time.Minute, Now: e.now()})
			must(t, err)
		}, []string{"builds", "all"}},
		{"pool set (every node's)", func() { e.pool("name:w", 1) }, []string{"A", "B", "builds", "all"}},
	} {
		ws.Drain()
		step.do()
		ws.Expect(t, step.name, step.want...)
	}
}
