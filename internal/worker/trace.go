package worker

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/tracing"
)

// traceRuntime runs f, one call of the runtime on sandbox id, in a span
// named "runtime.<call>" when ctx is traced (an operation's span).
func (w *Worker) traceRuntime(ctx context.Context, call string, id model.SandboxID, f func(context.Context) error) error {
	if w.tracer == nil {
		return f(ctx)
	}
	ctx, span := tracing.StartChild(ctx, w.tracer, "runtime."+call, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("airlock.runtime", w.cfg.Runtime.Info().Name), attribute.String("airlock.sandbox.id", id.String())))
	err := f(ctx)
	tracing.End(span, err)
	return err
}
