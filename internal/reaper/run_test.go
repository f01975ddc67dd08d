package reaper

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/model"
)

// fakeClock is a clock whose time moves only when the test sets it; the
// timers Run starts on it fire when it reaches them, and each start is
// reported on armed (the time it will fire at).
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*fakeTimer]bool
	armed  chan time.Time
}

type fakeTimer struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock(now time.Time) *fakeClock {
	return &fakeClock{now: now, timers: map[*fakeTimer]bool{}, armed: make(chan time.Time, 100)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Timer(d time.Duration) (<-chan time.Time, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.now.Add(d), ch: make(chan time.Time, 1)}
	c.armed <- t.at
	if !t.at.After(c.now) {
		t.ch <- c.now
	} else {
		c.timers[t] = true
	}
	return t.ch, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.timers, t)
	}
}

// set moves the clock to now and fires the timers due by then.
func (c *fakeClock) set(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = now
	for t := range c.timers {
		if !t.at.After(now) {
			t.ch <- now
			delete(c.timers, t)
		}
	}
}

// waitArmed waits for Run to start a timer for want. A timer started again
// for prev (a wake-up by a store change that moved nothing) is allowed; one
// for any other time fails the test.
func (c *fakeClock) waitArmed(t *testing.T, prev, want time.Time) {
	t.Helper()
	hang := time.After(30 * time.Second) // a guard against a hung test, not a timing assertion
	for {
		select {
		case at := <-c.armed:
			if at.Equal(want) {
				return
			}
			if !at.Equal(prev) {
				t.Fatalf("the reaper set a timer for %s; want %s (the next deadline or idle pass)", at.Sub(t0), want.Sub(t0))
			}
		case <-hang:
			t.Fatalf("the reaper set no timer for %s", want.Sub(t0))
		}
	}
}

// waitState waits for the reaper's request to show in the store (Run acts
// in its own goroutine); the bound guards against a hang only.
func waitState(t *testing.T, f *fixture, id model.SandboxID, want model.SandboxState) model.Sandbox {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); ; {
		sb := f.get(id)
		if sb.State == want {
			return sb
		}
		if time.Now().After(end) {
			t.Fatalf("sandbox %s is %s; want %s", id, sb.State, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRunFiresAtTheDeadline: Run sleeps until the next deadline on a timer
// (not the interval), acts when the clock reaches it and not a microsecond
// before, and a deadline set meanwhile (a store change) re-arms the timer.
func TestRunFiresAtTheDeadline(t *testing.T) {
	f := newFixture(t)
	first := f.sandbox(model.Timeouts{Deadline: t0.Add(time.Second), OnTimeout: model.OnTimeoutDelete}, model.StateRunning)
	later := f.sandbox(model.Timeouts{OnTimeout: model.OnTimeoutDelete}, model.StateRunning)
	clock := newFakeClock(t0)
	r, err := New(Config{
		Store: f.st, Node: f.node, Interval: time.Hour, Now: clock.Now, Timer: clock.Timer,
		Watch: func(ctx context.Context) <-chan struct{} { return f.st.WatchNode(ctx, f.node) },
	})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()

	// The first pass (idle limits too) finds nothing; the timer is set
	// for the deadline, not for the hour of the idle interval.
	clock.waitArmed(t, time.Time{}, t0.Add(time.Second))
	clock.set(t0.Add(time.Second - time.Microsecond))
	if sb := f.get(first.ID); sb.State != model.StateRunning {
		t.Fatalf("before its deadline the sandbox is %s", sb.State)
	}
	clock.set(t0.Add(time.Second))
	sb := waitState(t, f, first.ID, model.StateDeleting)
	if sb.StateReason != ReasonDeadline {
		t.Errorf("reason %q; want %q", sb.StateReason, ReasonDeadline)
	}
	// No deadline left: the timer is set for the next idle pass.
	clock.waitArmed(t, t0.Add(time.Second), t0.Add(time.Hour))

	// A deadline set now (by any server: a store change) wakes Run,
	// which sets its timer for it.
	_, err = f.st.SetSandboxTimeout(f.ctx, f.proj, later.ID, t0.Add(3*time.Second), model.OnTimeoutSuspend, "", t0.Add(time.Second))
	must(t, err)
	clock.waitArmed(t, t0.Add(time.Hour), t0.Add(3*time.Second))
	clock.set(t0.Add(3 * time.Second))
	waitState(t, f, later.ID, model.StateSuspending)
	clock.waitArmed(t, t0.Add(3*time.Second), t0.Add(time.Hour)) // after the pass: the deadline is cleared
	sb = f.get(later.ID)
	if sb.StateReason != ReasonDeadline {
		t.Errorf("reason %q; want %q", sb.StateReason, ReasonDeadline)
	}
	if !sb.Timeouts.Deadline.IsZero() {
		t.Errorf("the deadline acted on is still set: %s", sb.Timeouts.Deadline)
	}
}
