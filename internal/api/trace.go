package api

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// withTracing records the server span of each request (docs/tracing.md):
// a child of the client's W3C traceparent if it sent one, named by the
// route pattern that served it ("POST /v1/sandboxes"; "HTTP GET" when no
// route matched), with its status, request ID and caller. Everything the
// request does (store calls, the operation it queues) is below it.
// Tracing off: next itself.
func (a *API) withTracing(next http.Handler) http.Handler {
	if a.tracer == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := a.tracer.Start(ctx, "HTTP "+r.Method, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(
				attribute.String("http.request.method", r.Method),
				attribute.String("url.path", r.URL.Path),
				attribute.String("airlock.request_id", requestIDFrom(r.Context())),
			))
		// The ServeMux below sets the pattern on this very request; one
		// an outer mux set (the server's "/") names no route of ours.
		r = r.WithContext(ctx)
		r.Pattern = ""
		done := false
		defer func() {
			if !done { // a panic: recoverPanics answers 500
				span.SetStatus(codes.Error, "handler panicked")
				span.End()
			}
		}()
		next.ServeHTTP(w, r)
		done = true
		if p := r.Pattern; p != "" {
			method, path, ok := strings.Cut(p, " ")
			if !ok {
				method, path = r.Method, p
			}
			span.SetName(method + " " + path)
			span.SetAttributes(attribute.String("http.route", path))
		}
		if info := infoFrom(ctx); info != nil && info.project != "" {
			span.SetAttributes(attribute.String("airlock.project.id", string(info.project)), attribute.String("airlock.key.id", string(info.key)))
		}
		status := responseStatus(w)
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if status >= http.StatusInternalServerError {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
		span.End()
	})
}

// responseStatus is the status the request was answered with, from the
// logging middleware's statusWriter below w's wrappers (0: none).
func responseStatus(w http.ResponseWriter) int {
	for {
		if sw, ok := w.(*statusWriter); ok {
			return sw.status
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return 0
		}
		w = u.Unwrap()
	}
}

// injectTrace puts the request's trace context into the headers of a
// request forwarded to the sandbox's node, whose server span continues
// the trace.
func (a *API) injectTrace(r *http.Request, h http.Header) {
	if a.tracer != nil {
		propagation.TraceContext{}.Inject(r.Context(), propagation.HeaderCarrier(h))
	}
}
