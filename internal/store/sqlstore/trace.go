package sqlstore

import (
	"context"
	"runtime"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlockdev/airlock/internal/tracing"
)

// Option configures a Store.
type Option func(*Store)

// WithTracerProvider records a span for each of the Store's calls made
// inside a traced request or operation (docs/tracing.md). Without it, or
// with the no-op provider, the Store records none.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(s *Store) { s.tracer = tracing.Tracer(tp) }
}

// startSpan starts the span of one statement (exec, query) or one
// transaction (write) if ctx is traced. It is named after the Store
// method that called the helper ("store.CreateSandbox"): the caller's
// frame is skip frames up. The caller ends it with tracing.End.
func (s *Store) startSpan(ctx context.Context, skip int) (context.Context, trace.Span) {
	if s.tracer == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return tracing.StartChild(ctx, s.tracer, "store."+callerMethod(skip+1),
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system.name", s.d.Name)))
}

// callerMethod names the function skip frames above its caller, without
// its package, receiver and closure suffixes ("CreateSandbox").
func callerMethod(skip int) string {
	pc := make([]uintptr, 1)
	if runtime.Callers(skip+2, pc) == 0 {
		return "call"
	}
	f, _ := runtime.CallersFrames(pc).Next()
	name := f.Function
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	// sqlstore.(*Store).CreateSandbox.func1 → CreateSandbox
	parts := strings.Split(name, ".")
	for i := len(parts) - 1; i > 0; i-- {
		if p := parts[i]; p != "" && !strings.HasPrefix(p, "func") && !strings.HasPrefix(p, "(") {
			return p
		}
	}
	return name
}
