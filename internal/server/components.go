package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"
)

// component is one of what a server runs until it stops: run returns when
// ctx ends (nil) or when the component failed (its error, which stops the
// server).
type component struct {
	name string
	run  func(ctx context.Context) error
}

// loop is a component that cannot fail.
func loop(name string, run func(context.Context)) component {
	return component{name: name, run: func(ctx context.Context) error { run(ctx); return nil }}
}

// httpComponents serve srv on ln until ctx ends, then shut it down within
// grace.
func httpComponents(name string, srv *http.Server, ln net.Listener, grace time.Duration) []component {
	return []component{
		{name: name, run: func(context.Context) error {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("%s: %w", name, err)
			}
			return nil
		}},
		{name: name + " shutdown", run: func(ctx context.Context) error {
			<-ctx.Done()
			shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
			defer cancel()
			_ = srv.Shutdown(shut)
			return nil
		}},
	}
}

// runComponents starts comps in order, each under a context that ends when
// ctx does or once stop returned, and waits for all of them. The first
// component to fail, or the end of ctx, calls stop (the drain of the API,
// while the other components still run when one failed); then the rest are
// cancelled. It returns the error of the component that failed first, nil
// when ctx ended first.
func runComponents(ctx context.Context, comps []component, stop func(cause error), log *slog.Logger) error {
	g, failed := errgroup.WithContext(ctx)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, c := range comps {
		g.Go(func() error { return c.run(runCtx) })
	}
	var runErr error
	g.Go(func() error {
		<-failed.Done()
		if ctx.Err() == nil { // a component failed
			runErr = context.Cause(failed)
		}
		stop(runErr)
		cancel()
		return nil
	})
	if err := g.Wait(); err != nil && err != runErr { //nolint:errorlint // the very error, not one that wraps it
		log.Debug("component failed while shutting down", "err", err)
	}
	return runErr
}
