package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/retry/retrytest"
)

// scriptedListener returns its results in turn: an error, or (nil) a
// connection.
type scriptedListener struct {
	net.Listener
	results []error
}

func (l *scriptedListener) Accept() (net.Conn, error) {
	if len(l.results) == 0 {
		return nil, net.ErrClosed
	}
	err := l.results[0]
	l.results = l.results[1:]
	if err != nil {
		return nil, err
	}
	c, _ := net.Pipe()
	return c, nil
}

func TestRetryListenerBacksOffAndResets(t *testing.T) {
	emfile := syscall.EMFILE
	ms := time.Millisecond
	for _, tc := range []struct {
		name    string
		results []error
		want    []time.Duration // base delays (±20%)
	}{
		{"no errors", []error{nil, nil}, nil},
		{"doubles", []error{emfile, emfile, emfile, nil}, []time.Duration{5 * ms, 10 * ms, 20 * ms}},
		{"caps at 1s", []error{emfile, emfile, emfile, emfile, emfile, emfile, emfile, emfile, emfile, nil}, []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 640 * ms, time.Second}},
		{"resets after a connection", []error{emfile, emfile, nil, emfile, nil}, []time.Duration{5 * ms, 10 * ms, 5 * ms}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := retrytest.NewClock()
			l := &retryListener{Listener: &scriptedListener{results: tc.results}, ctx: context.Background(),
				logger: slog.New(slog.NewTextHandler(io.Discard, nil)), clock: clock}
			for {
				c, err := l.Accept()
				if errors.Is(err, net.ErrClosed) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				c.Close()
			}
			got := clock.Waits()
			if len(got) != len(tc.want) {
				t.Fatalf("waits %v, want about %v", got, tc.want)
			}
			for i, base := range tc.want {
				if got[i] < base*4/5 || got[i] > base*6/5+1 {
					t.Errorf("wait %d = %v, want %v ±20%%", i, got[i], base)
				}
			}
		})
	}
}

// alwaysFailing fails every Accept.
type alwaysFailing struct{ net.Listener }

func (alwaysFailing) Accept() (net.Conn, error) { return nil, syscall.EMFILE }

func TestRetryListenerStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	l := &retryListener{Listener: alwaysFailing{}, ctx: ctx, logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	start := time.Now()
	if _, err := l.Accept(); err == nil {
		t.Fatal("Accept succeeded")
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("Accept kept retrying after its context ended")
	}
}

// Exited records are kept in the order the processes exited, also when
// they are recorded in another order (a process's exit is published
// before it is recorded, so a client may start, and see the end of,
// another process in between): the oldest exit is pruned first.
func TestExitedRecordsInExitOrder(t *testing.T) {
	s := &Server{opts: Options{MaxExited: 2, ExitedTTL: time.Hour, ExitedBufferBytes: 1 << 20}, procs: map[model.ProcessID]*process{}}
	b := &budget{max: 1 << 20}
	t0 := time.Now()
	exited := func(after time.Duration) *process {
		p := &process{id: model.NewProcessID(), log: newEventLog(1<<10, b), exited: true, exitedAt: t0.Add(after)}
		s.procs[p.id] = p
		return p
	}
	first, second, third := exited(1), exited(2), exited(3)
	s.processExited(second)
	s.processExited(first) // recorded late
	s.processExited(third)
	got := s.exited
	if want := []*process{second, third}; !slices.Equal(got, want) {
		t.Fatalf("exited records %v, want second and third (the oldest exit pruned)", got)
	}
	if _, ok := s.procs[first.id]; ok {
		t.Fatalf("the oldest exit's record is still known")
	}
}
