// Package retry is Airlock's one backoff: exponential delays with jitter from
// github.com/cenkalti/backoff/v4, measured and waited out on an injectable
// Clock, reset when the thing retried succeeds.
//
// A Policy says how delays grow; Start turns it into a Backoff that hands out
// the delays one by one and waits them out, ending early when the caller's
// context ends. Callers keep their own loops (what is retried, what is
// logged, what error comes back stay theirs); Do runs the common case of one
// operation retried until it succeeds, fails for good or the delays run out.
// Tests pass a fake Clock (retrytest) and read the delays that were waited
// instead of sleeping through them.
package retry

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Policy describes the delays of one kind of retry. The n-th delay (from 0)
// is Initial·Multiplier^n, at most Max, then spread uniformly over
// ±Jitter of itself (so the jittered delay may exceed Max by up to Jitter).
type Policy struct {
	// Initial is the delay before the first retry (before jitter).
	Initial time.Duration
	// Max caps the delay (before jitter). Zero: no cap beyond overflow.
	Max time.Duration
	// Multiplier is how much each delay grows; 0 means 2.
	Multiplier float64
	// Jitter is the randomization factor in [0, 1): each delay is drawn
	// from [d·(1−Jitter), d·(1+Jitter)]. Zero: exactly d.
	Jitter float64
	// MaxElapsed gives up (Next returns Stop) once a delay would end more
	// than MaxElapsed after Start or the last Reset, as the Clock tells
	// time. Zero: never.
	MaxElapsed time.Duration
}

// Stop is what Next returns once the Policy's MaxElapsed is used up.
const Stop = backoff.Stop

// ErrExhausted is returned by Wait when the Policy's MaxElapsed is used up.
var ErrExhausted = errors.New("retry: backoff exhausted")

// exponential returns the package's backoff configured from p.
func (p Policy) exponential(clock Clock) *backoff.ExponentialBackOff {
	mult := p.Multiplier
	if mult <= 0 {
		mult = 2
	}
	maxInterval := p.Max
	if maxInterval <= 0 {
		maxInterval = time.Duration(1<<63 - 1)
	}
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(p.Initial),
		backoff.WithMaxInterval(maxInterval),
		backoff.WithMultiplier(mult),
		backoff.WithRandomizationFactor(p.Jitter),
		backoff.WithMaxElapsedTime(p.MaxElapsed),
		backoff.WithClockProvider(clock),
	)
	b.Reset()
	return b
}

// Nth returns the delay before retry n (0 for the first retry) on its own,
// for callers whose attempt count lives elsewhere (a store row, a request
// loop that counts attempts). It ignores MaxElapsed.
func (p Policy) Nth(n int) time.Duration {
	p.MaxElapsed = 0
	b := p.exponential(systemClock{})
	for range max(n, 0) {
		b.NextBackOff()
	}
	return b.NextBackOff()
}

// Start returns a Backoff following p on clock (SystemClock if nil); its
// elapsed time starts now.
func (p Policy) Start(clock Clock) *Backoff {
	if clock == nil {
		clock = systemClock{}
	}
	return &Backoff{b: p.exponential(clock), clock: clock}
}

// Backoff hands out one Policy's delays in turn and waits them out. It is
// not safe for concurrent use: one loop owns it.
type Backoff struct {
	b     *backoff.ExponentialBackOff
	clock Clock
}

// Next returns the next delay, or Stop once MaxElapsed is used up.
func (r *Backoff) Next() time.Duration { return r.b.NextBackOff() }

// Reset starts the delays (and the elapsed time) again: call it when the
// thing retried succeeded and the loop goes on.
func (r *Backoff) Reset() { r.b.Reset() }

// Elapsed is the time since Start or the last Reset, on the Backoff's clock.
func (r *Backoff) Elapsed() time.Duration {
	return r.b.GetElapsedTime()
}

// Sleep waits d on the Backoff's clock, or until ctx ends (ctx.Err()).
func (r *Backoff) Sleep(ctx context.Context, d time.Duration) error {
	return Sleep(ctx, r.clock, d)
}

// Wait waits the next delay: nil after it, ErrExhausted if there is none,
// ctx.Err() if ctx ends first.
func (r *Backoff) Wait(ctx context.Context) error {
	d := r.Next()
	if d == Stop {
		return ErrExhausted
	}
	return r.Sleep(ctx, d)
}

// Do calls op until it returns nil, an error wrapped with Permanent (whose
// inner error it returns) or the backoff gives up (op's last error), waiting
// the Policy's delays between calls on clock (SystemClock if nil). If ctx
// ends while it waits, it returns ctx.Err(). notify, if not nil, is called
// with each error that is retried and the delay before the retry.
func Do(ctx context.Context, p Policy, clock Clock, op func() error, notify func(error, time.Duration)) error {
	r := p.Start(clock)
	t := r.clock.NewTimer()
	return backoff.RetryNotifyWithTimer(op, backoff.WithContext(r.b, ctx), notify, t)
}

// Permanent marks err as not worth retrying: Do returns it at once.
func Permanent(err error) error { return backoff.Permanent(err) }

// Sleep waits d on clock, or until ctx ends (ctx.Err()).
func Sleep(ctx context.Context, clock Clock, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t := clock.NewTimer()
	defer t.Stop()
	t.Start(d)
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Clock is what a Backoff tells time and waits with: SystemClock, or a fake
// in tests.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that is not running yet (backoff.Timer:
	// Start, C, Stop). One wait uses it at a time.
	NewTimer() backoff.Timer
}

// SystemClock returns the real clock.
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time          { return time.Now() }
func (systemClock) NewTimer() backoff.Timer { return &systemTimer{} }

// systemTimer is a backoff.Timer on a time.Timer.
type systemTimer struct{ t *time.Timer }

func (t *systemTimer) Start(d time.Duration) {
	if t.t == nil {
		t.t = time.NewTimer(d)
		return
	}
	t.t.Reset(d)
}

func (t *systemTimer) Stop() {
	if t.t != nil {
		t.t.Stop()
	}
}

func (t *systemTimer) C() <-chan time.Time {
	if t.t == nil {
		return nil
	}
	return t.t.C
}
