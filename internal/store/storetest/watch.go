package storetest

import (
	"context"
	"runtime"
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
