package server

import (
	"context"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/airlockdev/airlock/internal/tracing"
)

// tracingFlushTimeout bounds the export of the spans still queued when the
// server stops.
const tracingFlushTimeout = 5 * time.Second

// openTracing returns the tracer provider the server passes to the API,
// the store, the controller and the workers (docs/tracing.md):
// Options.TracerProvider if set (tests), else the one the OTEL_*
// environment asks for (the no-op provider without
// OTEL_EXPORTER_OTLP_ENDPOINT). stop flushes and shuts down the one it
// built.
func openTracing(ctx context.Context, opts Options, log *slog.Logger) (tp trace.TracerProvider, stop func(), err error) {
	if opts.TracerProvider != nil {
		return opts.TracerProvider, func() {}, nil
	}
	version := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		version = bi.Main.Version
	}
	p, err := tracing.FromEnv(ctx, os.Getenv, version)
	if err != nil {
		return nil, nil, err
	}
	if p.Enabled() {
		log.Info("exporting traces over OTLP/HTTP")
	}
	return p.TracerProvider(), func() {
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingFlushTimeout)
		defer cancel()
		if err := p.Shutdown(flushCtx); err != nil {
			log.Warn("flush traces", "err", err)
		}
	}, nil
}
