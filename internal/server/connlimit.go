package server

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/airlockdev/airlock/internal/connbudget"
)

// DefaultMaxConnections is the default of Options.MaxConnections: well
// under the process's file limit, which agent sockets share.
const DefaultMaxConnections = connbudget.DefaultMaxConnections

// newConnBudget shares the client connections fairly: per address, an
// unauthenticated share with a short idle limit, per project (see
// internal/connbudget and docs/security.md, "Connection budgets").
func newConnBudget(opts Options, log *slog.Logger) (*connbudget.Budget, error) {
	return connbudget.New(connbudget.Config{
		Max:                 opts.MaxConnections,
		PerAddress:          opts.ConnectionsPerAddress,
		Unauthenticated:     opts.UnauthenticatedConnections,
		PerProject:          opts.ConnectionsPerProject,
		UnauthenticatedIdle: opts.UnauthenticatedIdleTimeout,
		Logger:              log.With("component", "connections"),
	})
}

// newHTTPServer serves handler with the budget's hooks. Requests' contexts
// derive from base: they outlive the stop signal (a drain lets open
// streams run on for the grace period; the data plane ends them then).
func newHTTPServer(handler http.Handler, conns *connbudget.Budget, base context.Context) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		// Authenticated connections; unauthenticated ones have the
		// budget's short limit.
		IdleTimeout: 120 * time.Second,
		ConnState:   conns.ConnState,
		ConnContext: conns.ConnContext,
		BaseContext: func(net.Listener) context.Context { return base },
	}
}
