package agentclient

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlockdev/airlock/internal/tracing"
)

// Option configures a Client.
type Option func(*Client)

// WithTracerProvider records a span for each request to the agent (and
// each dial with its handshake) made inside a traced request or operation
// (docs/tracing.md). Without it the Client records none.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *Client) { c.tracer = tracing.Tracer(tp) }
}

// startSpan starts the span of one agent request (method and path) or,
// with method "", of a dial ("agent.connect").
func (c *Client) startSpan(ctx context.Context, method, path string) (context.Context, trace.Span) {
	if c.tracer == nil {
		return ctx, trace.SpanFromContext(context.Background())
	}
	name := "agent.connect"
	var attrs []attribute.KeyValue
	if method != "" {
		route := agentRoute(path)
		name = "agent " + method + " " + route
		attrs = []attribute.KeyValue{attribute.String("http.request.method", method), attribute.String("url.template", route)}
	}
	return tracing.StartChild(ctx, c.tracer, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// agentRoute is a request path without its query and with a process ID
// replaced by {id}: "/v1/processes/p1/wait" → "/v1/processes/{id}/wait".
func agentRoute(path string) string {
	path, _, _ = strings.Cut(path, "?")
	const procs = "/v1/processes/"
	rest, ok := strings.CutPrefix(path, procs)
	if !ok || rest == "" {
		return path
	}
	_, tail, _ := strings.Cut(rest, "/")
	if tail == "" {
		return procs + "{id}"
	}
	return procs + "{id}/" + tail
}
