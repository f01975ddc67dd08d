package postgres

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlockdev/airlock/internal/retry/retrytest"
)

// TestListenerReconnectBackoff: each outage waits the backoff from 50 ms,
// doubling up to 5 s, started afresh for the next outage; on a fake clock.
func TestListenerReconnectBackoff(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name     string
		failures []int // failed connects of each outage
		want     [][]time.Duration
	}{
		{"at once", []int{0}, [][]time.Duration{nil}},
		{"doubles", []int{3}, [][]time.Duration{{50 * ms, 100 * ms, 200 * ms}}},
		{"caps at 5s", []int{9}, [][]time.Duration{{50 * ms, 100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 5 * time.Second, 5 * time.Second}}},
		{"reset after a reconnect", []int{2, 1}, [][]time.Duration{{50 * ms, 100 * ms}, {50 * ms}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := retrytest.NewClock()
			fail, wakes := 0, 0
			l := &listener{logger: slog.New(slog.NewTextHandler(io.Discard, nil)), wake: func() { wakes++ }, clock: clock,
				dial: func(context.Context) (*pgx.Conn, error) {
					if fail > 0 {
						fail--
						return nil, errors.New("connection refused")
					}
					return &pgx.Conn{}, nil
				}}
			for i, n := range tc.failures {
				fail = n
				before := len(clock.Waits())
				if c := l.reconnect(context.Background()); c == nil {
					t.Fatal("reconnect gave up")
				}
				got := clock.Waits()[before:]
				if len(got) != len(tc.want[i]) {
					t.Fatalf("outage %d: waits %v, want about %v", i, got, tc.want[i])
				}
				for j, base := range tc.want[i] {
					if got[j] < base*4/5 || got[j] > base*6/5+1 {
						t.Errorf("outage %d: wait %d = %v, want %v ±20%%", i, j, got[j], base)
					}
				}
			}
			if wakes != len(tc.failures) {
				t.Errorf("%d wakes, want one per reconnect (%d)", wakes, len(tc.failures))
			}
		})
	}
}

func TestListenerReconnectEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	l := &listener{logger: slog.New(slog.NewTextHandler(io.Discard, nil)), wake: func() {}, clock: retrytest.NewClock(),
		dial: func(context.Context) (*pgx.Conn, error) {
			cancel()
			return nil, errors.New("connection refused")
		}}
	if c := l.reconnect(ctx); c != nil {
		t.Fatal("reconnect returned a connection after its context ended")
	}
}
