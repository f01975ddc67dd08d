// Package tracing builds Airlock's OpenTelemetry tracer provider from the
// standard OTEL_* environment, and holds the few helpers the traced
// packages share: starting a child span, ending one with an error, and
// carrying a span context across the operation boundary as a W3C
// traceparent.
//
// There is no global provider: the server builds one and passes it
// through the configs of the API, the store, the controller and the
// workers. Without OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) it is the no-op provider, and the
// traced packages skip their spans altogether (Enabled).
package tracing

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of every Airlock span.
const ScopeName = "github.com/airlockdev/airlock"

// ServiceName is the service.name of Airlock's spans unless
// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise.
const ServiceName = "airlock"

// The environment variables that turn tracing on, and the SDK's switch
// that turns it off whatever the others say.
const (
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvSDKDisabled    = "OTEL_SDK_DISABLED"
)

// Provider is the server's tracer provider and how to flush it.
type Provider struct {
	tp       trace.TracerProvider
	shutdown func(context.Context) error
}

// TracerProvider is what the traced packages' configs take.
func (p *Provider) TracerProvider() trace.TracerProvider { return p.tp }

// Enabled reports whether spans are exported.
func (p *Provider) Enabled() bool { return Enabled(p.tp) }

// Shutdown exports the spans still queued and stops the exporter. The
// no-op provider's does nothing.
func (p *Provider) Shutdown(ctx context.Context) error { return p.shutdown(ctx) }

// FromEnv builds the provider the environment asks for (getenv is
// os.Getenv in the server): with OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set (and OTEL_SDK_DISABLED not
// "true"), an SDK provider whose batch span processor exports over
// OTLP/HTTP; otherwise the no-op provider. The exporter reads the rest of
// the OTEL_EXPORTER_OTLP_* variables itself (headers, timeout, TLS),
// the resource OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, the SDK
// OTEL_TRACES_SAMPLER and OTEL_BSP_*. version is service.version.
func FromEnv(ctx context.Context, getenv func(string) string, version string) (*Provider, error) {
	if strings.EqualFold(strings.TrimSpace(getenv(EnvSDKDisabled)), "true") ||
		getenv(EnvEndpoint) == "" && getenv(EnvTracesEndpoint) == "" {
		return Off(), nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP/HTTP exporter: %w", err)
	}
	return newSDK(ctx, sdktrace.NewBatchSpanProcessor(exp), version)
}

// Off is the no-op provider: tracing is off and costs nothing.
func Off() *Provider {
	return &Provider{tp: noop.NewTracerProvider(), shutdown: func(context.Context) error { return nil }}
}

// WithProcessor is an SDK provider with the resource FromEnv gives, whose
// spans go to sp (tests pass a tracetest exporter's syncer).
func WithProcessor(ctx context.Context, sp sdktrace.SpanProcessor, version string) (*Provider, error) {
	return newSDK(ctx, sp, version)
}

func newSDK(ctx context.Context, sp sdktrace.SpanProcessor, version string) (*Provider, error) {
	attrs := []resource.Option{
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithAttributes(semconv.ServiceName(ServiceName)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES win
	}
	if version != "" {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceVersion(version)))
	}
	res, err := resource.New(ctx, attrs...)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		_ = sp.Shutdown(ctx)
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp), sdktrace.WithResource(res))
	return &Provider{tp: tp, shutdown: tp.Shutdown}, nil
}

// Enabled reports whether tp records spans: not nil, not the no-op
// provider. The traced packages keep a nil tracer otherwise and skip
// their spans.
func Enabled(tp trace.TracerProvider) bool {
	if tp == nil {
		return false
	}
	_, off := tp.(noop.TracerProvider)
	return !off
}

// Tracer is tp's tracer of Airlock's spans, or nil when tp is not
// Enabled.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if !Enabled(tp) {
		return nil
	}
	return tp.Tracer(ScopeName)
}

// StartChild starts a span only inside a traced piece of work (ctx has a
// valid span context): the store, runtime and agent spans are children of
// a request's or an operation's, and background loops (heartbeats,
// resync, claims) make no root traces of their own. A nil tracer (tracing
// off) or no parent gives ctx back with a span that records nothing.
func StartChild(ctx context.Context, t trace.Tracer, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if t == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, trace.SpanFromContext(context.Background()) // the no-op span
	}
	return t.Start(ctx, name, opts...)
}

// End ends span, recording err (if any) as its error status.
func End(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// TraceParent is the W3C traceparent of ctx's span, "" when ctx has no
// valid span context. The store records it with an operation.
func TraceParent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c.Get("traceparent")
}

// WithTraceParent returns ctx with the span context of a stored W3C
// traceparent as its remote parent, and whether it was one. An empty or
// invalid traceparent (the column is read back from the database: it is
// parsed, not trusted) gives ctx unchanged, so the next span is a new
// root.
func WithTraceParent(ctx context.Context, traceparent string) (context.Context, bool) {
	if traceparent == "" {
		return ctx, false
	}
	parsed := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent})
	sc := trace.SpanContextFromContext(parsed)
	if !sc.IsValid() {
		return ctx, false
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc), true
}
