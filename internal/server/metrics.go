package server

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/airlockdev/airlock/internal/hostallow"
	"github.com/airlockdev/airlock/internal/metrics"
	"github.com/airlockdev/airlock/internal/metrics/storefeed"
	"github.com/airlockdev/airlock/internal/store"
)

// newMetrics makes the process's metrics: its own registry, the store's
// failed calls counted, and the sandboxes and pools read from the store at
// each scrape (so an api replica reports them too).
func newMetrics(st store.Store, log *slog.Logger) *metrics.Metrics {
	m := metrics.New()
	if s, ok := st.(interface{ OnError(func(op string)) }); ok {
		s.OnError(m.StoreError)
	}
	m.WatchStore(storefeed.New(st), metrics.DefaultStoreTimeout, log.With("component", "metrics"))
	return m
}

// listenMetrics opens --metrics-listen (nil when it is empty: off).
func listenMetrics(addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen %s: %w", addr, err)
	}
	return ln, nil
}

// metricsComponents serve GET /metrics without authentication on ln (the
// --metrics-listen address, meant for a private interface) until ctx
// ends. A nil ln serves nothing.
func metricsComponents(ln net.Listener, m *metrics.Metrics, hosts hostallow.List, log *slog.Logger) []component {
	if ln == nil {
		return nil
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	// Unauthenticated: the Host allow-list keeps a rebound page from it.
	srv := &http.Server{Handler: hostallow.Handler(hosts, nil, mux), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	log.Info("serving metrics without authentication", "url", "http://"+ln.Addr().String()+"/metrics")
	return httpComponents("metrics server", srv, ln, 5*time.Second)
}
