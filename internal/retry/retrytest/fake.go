// Package retrytest has a fake retry.Clock for tests that check backoff
// delays without sleeping through them.
package retrytest

import (
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Clock is a fake retry.Clock whose time moves only when a timer is
// started: a timer started for d moves the clock on by d and fires at once.
// Waits records every d, so a test reads the delays a loop waited. It is
// safe for concurrent use.
type Clock struct {
	mu    sync.Mutex
	now   time.Time
	waits []time.Duration
}

// NewClock returns a Clock at an arbitrary fixed time.
func NewClock() *Clock {
	return &Clock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

// Now implements retry.Clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer implements retry.Clock.
func (c *Clock) NewTimer() backoff.Timer { return &timer{c: c} }

// Advance moves the clock on by d without a wait.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Waits returns the durations of the timers started so far, in order.
func (c *Clock) Waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}

type timer struct {
	c  *Clock
	ch chan time.Time
}

func (t *timer) Start(d time.Duration) {
	t.c.mu.Lock()
	t.c.now = t.c.now.Add(d)
	t.c.waits = append(t.c.waits, d)
	now := t.c.now
	t.c.mu.Unlock()
	t.ch = make(chan time.Time, 1)
	t.ch <- now
}

func (t *timer) Stop() {}

func (t *timer) C() <-chan time.Time { return t.ch }
