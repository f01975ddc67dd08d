package retry_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/retry"
	"github.com/airlockdev/airlock/internal/retry/retrytest"
)

const ms = time.Millisecond

func TestDelays(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    retry.Policy
		want []time.Duration
	}{
		{"doubles up to max", retry.Policy{Initial: 5 * ms, Max: 40 * ms}, []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms, 40 * ms}},
		{"multiplier", retry.Policy{Initial: 10 * ms, Max: time.Second, Multiplier: 3}, []time.Duration{10 * ms, 30 * ms, 90 * ms, 270 * ms, 810 * ms, time.Second}},
		{"no max", retry.Policy{Initial: time.Second}, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}},
		{"max elapsed stops", retry.Policy{Initial: 10 * ms, Max: time.Second, MaxElapsed: 100 * ms}, []time.Duration{10 * ms, 20 * ms, 40 * ms, retry.Stop}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := retrytest.NewClock()
			b := tc.p.Start(clock)
			var got []time.Duration
			for range tc.want {
				d := b.Next()
				got = append(got, d)
				if d != retry.Stop {
					if err := b.Sleep(context.Background(), d); err != nil {
						t.Fatal(err)
					}
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("delays %v, want %v", got, tc.want)
			}
			for i, d := range tc.want {
				if d != retry.Stop && tc.p.Nth(i) != d {
					t.Errorf("Nth(%d) = %v, want %v", i, tc.p.Nth(i), d)
				}
			}
		})
	}
}

func TestJitterStaysInBounds(t *testing.T) {
	p := retry.Policy{Initial: 100 * ms, Max: 400 * ms, Jitter: 0.25}
	for range 200 {
		b := p.Start(retrytest.NewClock())
		for i, base := range []time.Duration{100 * ms, 200 * ms, 400 * ms, 400 * ms} {
			d := b.Next()
			if lo, hi := base*3/4, base*5/4+1; d < lo || d > hi {
				t.Fatalf("delay %d = %v, outside [%v, %v]", i, d, lo, hi)
			}
		}
	}
}

func TestResetStartsAgain(t *testing.T) {
	clock := retrytest.NewClock()
	b := retry.Policy{Initial: 10 * ms, Max: time.Second, MaxElapsed: 50 * ms}.Start(clock)
	for range 3 {
		_ = b.Wait(context.Background())
	}
	if err := b.Wait(context.Background()); !errors.Is(err, retry.ErrExhausted) {
		t.Fatalf("Wait after 70ms of 50: %v, want ErrExhausted", err)
	}
	b.Reset()
	if err := b.Wait(context.Background()); err != nil {
		t.Fatalf("Wait after Reset: %v", err)
	}
	if got, want := clock.Waits(), []time.Duration{10 * ms, 20 * ms, 10 * ms}; !reflect.DeepEqual(got, want) {
		t.Fatalf("waits %v, want %v", got, want)
	}
	if b.Elapsed() != 10*ms {
		t.Fatalf("Elapsed %v after Reset and one wait, want 10ms", b.Elapsed())
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := retry.Sleep(ctx, retry.SystemClock(), time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep: %v", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 20*ms)
	defer cancel()
	if err := retry.Sleep(ctx, retry.SystemClock(), time.Hour); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Sleep: %v", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatal("Sleep did not end with its context")
	}
	if err := retry.Sleep(context.Background(), retry.SystemClock(), ms); err != nil {
		t.Fatal(err)
	}
}

func TestDo(t *testing.T) {
	errFlaky, errBad := errors.New("flaky"), errors.New("bad")
	p := retry.Policy{Initial: 10 * ms, Max: 30 * ms, MaxElapsed: time.Second}
	for _, tc := range []struct {
		name      string
		results   []error // op's results in turn; the last repeats
		want      error
		wantWaits []time.Duration
	}{
		{"at once", []error{nil}, nil, nil},
		{"after two failures", []error{errFlaky, errFlaky, nil}, nil, []time.Duration{10 * ms, 20 * ms}},
		{"permanent", []error{errFlaky, retry.Permanent(errBad)}, errBad, []time.Duration{10 * ms}},
		// 10+20+32·30 = 990 ms waited; one more 30 would end past MaxElapsed.
		{"gives up with the last error", []error{errFlaky}, errFlaky, append([]time.Duration{10 * ms, 20 * ms}, repeat(30*ms, 32)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := retrytest.NewClock()
			calls := 0
			var notified []time.Duration
			err := retry.Do(context.Background(), p, clock, func() error {
				r := tc.results[min(calls, len(tc.results)-1)]
				calls++
				return r
			}, func(_ error, d time.Duration) { notified = append(notified, d) })
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Do: %v, want %v", err, tc.want)
			}
			if got := clock.Waits(); !reflect.DeepEqual(got, tc.wantWaits) || !reflect.DeepEqual(notified, tc.wantWaits) {
				t.Fatalf("waits %v, notified %v, want %v", got, notified, tc.wantWaits)
			}
		})
	}
}

func TestDoStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := retry.Do(ctx, retry.Policy{Initial: ms}, retrytest.NewClock(), func() error {
		calls++
		if calls == 3 {
			cancel()
		}
		return errors.New("flaky")
	}, nil)
	if !errors.Is(err, context.Canceled) || calls != 3 {
		t.Fatalf("Do: %v after %d calls, want context.Canceled after 3", err, calls)
	}
}

func repeat(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}
