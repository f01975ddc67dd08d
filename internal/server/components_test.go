package server

import (
	"context"
	"errors"
	"log/slog"
	"testing"
)

func TestRunComponentsFailure(t *testing.T) {
	boom := errors.New("boom")
	var stoppedBeforeCancel bool
	running := make(chan struct{})
	var other context.Context
	comps := []component{
		{name: "waits", run: func(ctx context.Context) error {
			other = ctx
			close(running)
			<-ctx.Done()
			return nil
		}},
		{name: "fails", run: func(context.Context) error { <-running; return boom }},
	}
	var cause error
	err := runComponents(t.Context(), comps, func(failed error) {
		cause = failed
		stoppedBeforeCancel = other.Err() == nil // the rest run on during stop
	}, slog.New(slog.DiscardHandler))
	if !errors.Is(err, boom) || !errors.Is(cause, boom) {
		t.Fatalf("runComponents = %v, stop got %v; want %v", err, cause, boom)
	}
	if !stoppedBeforeCancel {
		t.Error("the other components were cancelled before stop")
	}
}

func TestRunComponentsContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	comps := []component{
		loop("loop", func(ctx context.Context) { <-ctx.Done() }),
		{name: "late failure", run: func(ctx context.Context) error { <-ctx.Done(); return errors.New("late") }},
	}
	stopped := false
	cancel()
	err := runComponents(ctx, comps, func(failed error) {
		stopped = true
		if failed != nil {
			t.Errorf("stop got %v, want nil", failed)
		}
	}, slog.New(slog.DiscardHandler))
	if err != nil || !stopped {
		t.Fatalf("runComponents = %v (stopped %v), want nil after a stop", err, stopped)
	}
}
