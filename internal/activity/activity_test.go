package activity

import (
	"context"
	"errors"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/model"
)

type fakeStore struct {
	mu      sync.Mutex
	calls   []map[model.SandboxID]time.Time
	failing bool
}

func (f *fakeStore) TouchSandboxes(_ context.Context, at map[model.SandboxID]time.Time) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failing {
		return 0, errors.New("database is down")
	}
	f.calls = append(f.calls, maps.Clone(at))
	return len(at), nil
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestTracker(t *testing.T) {
	ctx := context.Background()
	a, b := model.NewSandboxID(), model.NewSandboxID()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, tr *Tracker, c *clock, st *fakeStore)
	}{
		{"coalesces touches into one write per flush", func(t *testing.T, tr *Tracker, c *clock, st *fakeStore) {
			for range 1000 {
				tr.Touch(a)
				c.Add(time.Millisecond)
			}
			tr.Touch(b)
			must(t, tr.Flush(ctx))
			want := map[model.SandboxID]time.Time{a: t0.Add(999 * time.Millisecond), b: t0.Add(time.Second)}
			if len(st.calls) != 1 || !maps.Equal(st.calls[0], want) {
				t.Fatalf("writes %v, want one of %v", st.calls, want)
			}
			must(t, tr.Flush(ctx)) // nothing new: no write
			if len(st.calls) != 1 {
				t.Fatalf("an empty flush wrote: %v", st.calls)
			}
		}},
		{"a held sandbox is active at every flush", func(t *testing.T, tr *Tracker, c *clock, st *fakeStore) {
			release := tr.Hold(a)
			if _, held := tr.LastActive(a); !held {
				t.Fatal("LastActive: not held while a stream is open")
			}
			must(t, tr.Flush(ctx))
			c.Add(time.Minute)
			must(t, tr.Flush(ctx))
			if len(st.calls) != 2 || !st.calls[1][a].Equal(t0.Add(time.Minute)) {
				t.Fatalf("writes %v, want a at +1m in the second", st.calls)
			}
			c.Add(time.Minute)
			release()
			release() // twice is once
			if last, held := tr.LastActive(a); held || !last.Equal(t0.Add(2*time.Minute)) {
				t.Fatalf("after release LastActive = %v, %v", last, held)
			}
			must(t, tr.Flush(ctx))
			c.Add(time.Minute)
			must(t, tr.Flush(ctx))
			if len(st.calls) != 3 {
				t.Fatalf("a released sandbox is still written: %v", st.calls)
			}
		}},
		{"a failed flush is retried with what came since", func(t *testing.T, tr *Tracker, c *clock, st *fakeStore) {
			tr.Touch(a)
			st.failing = true
			if err := tr.Flush(ctx); err == nil {
				t.Fatal("Flush hid the store's error")
			}
			st.failing = false
			c.Add(time.Second)
			tr.Touch(b)
			must(t, tr.Flush(ctx))
			want := map[model.SandboxID]time.Time{a: t0, b: t0.Add(time.Second)}
			if len(st.calls) != 1 || !maps.Equal(st.calls[0], want) {
				t.Fatalf("writes %v, want %v", st.calls, want)
			}
		}},
		{"recent activity is forgotten a while after its flush", func(t *testing.T, tr *Tracker, c *clock, st *fakeStore) {
			tr.Touch(a)
			must(t, tr.Flush(ctx))
			if last, _ := tr.LastActive(a); !last.Equal(t0) {
				t.Fatalf("LastActive right after the flush = %v", last)
			}
			c.Add(time.Hour)
			must(t, tr.Flush(ctx))
			if last, _ := tr.LastActive(a); !last.IsZero() {
				t.Fatalf("LastActive an hour later = %v, want forgotten", last)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{t: t0}
			st := &fakeStore{}
			tr, err := New(Config{Store: st, Now: c.Now, Interval: time.Second})
			must(t, err)
			tc.run(t, tr, c, st)
		})
	}
}

func TestRunFlushesOnStop(t *testing.T) {
	st := &fakeStore{}
	tr, err := New(Config{Store: st, Interval: time.Hour})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tr.Run(ctx)
	}()
	id := model.NewSandboxID()
	tr.Touch(id)
	cancel()
	<-done
	if len(st.calls) != 1 || st.calls[0][id].IsZero() {
		t.Fatalf("writes after stop: %v", st.calls)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
