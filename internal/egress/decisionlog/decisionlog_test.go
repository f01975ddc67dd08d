package decisionlog

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestSinceAndDropped(t *testing.T) {
	l := New(4)
	if ev, d := l.Since(0); len(ev) != 0 || d != 0 {
		t.Fatal("empty log returned events")
	}
	for i := range 6 {
		e := l.Append(Event{Kind: KindDNS, Host: string(rune('a' + i))})
		if e.Seq != uint64(i+1) || e.Time.IsZero() {
			t.Fatalf("append %d: %+v", i, e)
		}
	}
	for _, tc := range []struct {
		after       uint64
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
		ev, d := l.Since(tc.after)
		if uint64(len(ev)) != tc.n || d != tc.wantDropped {
			t.Errorf("Since(%d): %d events, dropped %d; want %d, %d", tc.after, len(ev), d, tc.n, tc.wantDropped)
			continue
		}
		for i, e := range ev {
			if e.Seq != tc.first+uint64(i) {
				t.Errorf("Since(%d)[%d].Seq = %d", tc.after, i, e.Seq)
			}
		}
	}
	if l.Last() != 6 {
		t.Fatal("Last")
	}
}

func TestWait(t *testing.T) {
	l := New(8)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.Wait(ctx, 0) }()
	l.Append(Event{Kind: KindHTTP})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancelShort()
	if err := l.Wait(short, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait with nothing new: %v", err)
	}
	go func() { done <- l.Wait(ctx, 1) }()
	l.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
	if err := l.Wait(ctx, 0); err != nil {
		t.Fatalf("events stay readable after close: %v", err)
	}
}
