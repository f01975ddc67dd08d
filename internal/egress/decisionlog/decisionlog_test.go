package decisionlog

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestSinceAndDropped(t *testing.T) {
	l := New(4)
	if ev, d := l.Since(0); len(ev) != 0 || d != 0 || l.Last() != 0 {
		t.Fatal("empty log returned events")
	}
	var base uint64
	for i := range 6 {
		e := l.Append(Event{Kind: KindDNS, Host: string(rune('a' + i))})
		if i == 0 {
			base = e.Seq - 1
		}
		if e.Seq != base+uint64(i+1) || e.Time.IsZero() {
			t.Fatalf("append %d: %+v", i, e)
		}
	}
	for _, tc := range []struct {
		after       uint64 // relative to base; 0 is "from before this log"
		first, n    uint64
		wantDropped uint64
	}{
		{0, 3, 4, 2},
		{1, 3, 4, 1},
		{2, 3, 4, 0},
		{4, 5, 2, 0},
		{6, 0, 0, 0},
		{9, 0, 0, 0},
	} {
		after := base + tc.after
		ev, d := l.Since(after)
		if uint64(len(ev)) != tc.n || d != tc.wantDropped {
			t.Errorf("Since(base+%d): %d events, dropped %d; want %d, %d", tc.after, len(ev), d, tc.n, tc.wantDropped)
			continue
		}
		for i, e := range ev {
			if e.Seq != base+tc.first+uint64(i) {
				t.Errorf("Since(base+%d)[%d].Seq = base+%d", tc.after, i, e.Seq-base)
			}
		}
	}
	if l.Last() != base+6 {
		t.Fatal("Last")
	}
	// A reader resuming from a number of an older log (any number below
	// this one's first) gets this log from its start, and no bogus drop count.
	if ev, d := l.Since(0); len(ev) != 4 || d != 2 {
		t.Fatalf("Since(0): %d events, dropped %d", len(ev), d)
	}
	if ev, d := l.Since(base - 1000); len(ev) != 4 || d != 2 {
		t.Fatalf("Since(older log): %d events, dropped %d", len(ev), d)
	}
	// A later log numbers above this one.
	time.Sleep(time.Millisecond)
	if next := New(4).Append(Event{}); next.Seq <= base+6 {
		t.Fatalf("a new log starts at %d, not above the old one's %d", next.Seq, base+6)
	}
}

func TestWait(t *testing.T) {
	l := New(8)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	short0, cancel0 := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel0()
	if err := l.Wait(short0, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait on an empty log: %v", err)
	}
	go func() { done <- l.Wait(ctx, 0) }()
	first := l.Append(Event{Kind: KindHTTP})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancelShort()
	if err := l.Wait(short, first.Seq); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait with nothing new: %v", err)
	}
	go func() { done <- l.Wait(ctx, first.Seq) }()
	l.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
	if err := l.Wait(ctx, 0); err != nil {
		t.Fatalf("events stay readable after close: %v", err)
	}
}

// NewObserved's function sees every appended event, numbered, after it is
// in the log.
func TestObserved(t *testing.T) {
	var seen []Event
	var l *Log
	l = NewObserved(2, func(e Event) {
		if got, _ := l.Since(e.Seq - 1); len(got) != 1 || got[0].Seq != e.Seq {
			t.Errorf("observed event %d is not in the log yet", e.Seq)
		}
		seen = append(seen, e)
	})
	l.Append(Event{Kind: KindDNS, Allowed: true})
	l.Append(Event{Kind: KindHTTP})
	l.Append(Event{Kind: KindCut})
	if len(seen) != 3 || seen[1].Kind != KindHTTP || seen[1].Allowed || seen[2].Seq != seen[0].Seq+2 {
		t.Fatalf("observed %+v", seen)
	}
}
