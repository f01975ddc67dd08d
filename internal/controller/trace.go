package controller

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/tracing"
)

// startOperationSpan starts the span of one attempt of op: a child of the
// span that recorded the operation (its TraceParent, the API request's),
// so that a create is one trace from the request to the guest agent; a
// new root when the operation has none or it does not parse (it is read
// back from the database). Tracing off: a span that records nothing.
func (c *Controller) startOperationSpan(ctx context.Context, op model.Operation) (context.Context, trace.Span) {
	if c.tracer == nil {
		return ctx, trace.SpanFromContext(context.Background())
	}
	parent, linked := tracing.WithTraceParent(ctx, op.TraceParent)
	attrs := []attribute.KeyValue{
		attribute.String("airlock.operation.id", op.ID.String()),
		attribute.String("airlock.operation.kind", string(op.Kind)),
		attribute.String("airlock.sandbox.id", op.SandboxID.String()),
		attribute.String("airlock.project.id", string(op.ProjectID)),
		attribute.Int("airlock.operation.attempt", op.Attempts),
	}
	if !linked && op.TraceParent != "" {
		attrs = append(attrs, attribute.Bool("airlock.operation.trace_parent_invalid", true))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...)}
	if !linked {
		opts = append(opts, trace.WithNewRoot())
	}
	return c.tracer.Start(parent, "operation "+string(op.Kind), opts...)
}
