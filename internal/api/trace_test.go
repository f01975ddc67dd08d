package api

import (
	"context"
	"net/http"
	"strconv"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/airlockdev/airlock/internal/tracing"
)

// Each request has a server span named by its route pattern, with its
// status, request ID and caller, below a traceparent the client sent.
func TestRequestSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	p, err := tracing.WithProcessor(context.Background(), sdktrace.NewSimpleSpanProcessor(exp), "")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	e := newEnv(t, func(c *envConfig) { c.TracerProvider = p.TracerProvider() })
	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for _, tc := range []struct {
		name, method, path  string
		header              http.Header
		wantName, wantRoute string
		wantStatus          int
		continues           bool
	}{
		{"route", "GET", "/v1/sandboxes", nil, "GET /v1/sandboxes", "/v1/sandboxes", http.StatusOK, false},
		{"route with a path value", "GET", "/v1/sandboxes/sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa", nil, "GET /v1/sandboxes/{id}", "/v1/sandboxes/{id}", http.StatusNotFound, false},
		{"no route", "GET", "/v1/nothing-here", nil, "HTTP GET", "", http.StatusNotFound, false},
		{"client traceparent", "GET", "/v1/sandboxes", http.Header{"Traceparent": {parent}}, "GET /v1/sandboxes", "/v1/sandboxes", http.StatusOK, true},
		{"invalid client traceparent", "GET", "/v1/sandboxes", http.Header{"Traceparent": {"00-zz-zz-01"}}, "GET /v1/sandboxes", "/v1/sandboxes", http.StatusOK, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp.Reset()
			h := http.Header{"X-Request-Id": {"req-" + tc.name[:2]}}
			for k, v := range tc.header {
				h[k] = v
			}
			res := e.send(req{t: t, method: tc.method, path: tc.path, key: e.keyA, header: h, invalid: tc.wantRoute == ""})
			if res.status != tc.wantStatus {
				t.Fatalf("status %d, want %d", res.status, tc.wantStatus)
			}
			var server *tracetest.SpanStub
			spans := exp.GetSpans()
			for i := range spans {
				if !spans[i].Parent.IsValid() || spans[i].Parent.IsRemote() {
					server = &spans[i]
				}
			}
			if server == nil {
				t.Fatalf("no server span among %d", len(spans))
			}
			if server.Name != tc.wantName {
				t.Errorf("span name %q, want %q", server.Name, tc.wantName)
			}
			attrs := map[string]string{}
			for _, kv := range server.Attributes {
				attrs[string(kv.Key)] = kv.Value.Emit()
			}
			if attrs["http.route"] != tc.wantRoute || attrs["http.response.status_code"] != strconv.Itoa(tc.wantStatus) ||
				attrs["airlock.request_id"] != res.header.Get("X-Request-Id") || (attrs["airlock.project.id"] == string(e.projA)) != (tc.wantRoute != "") {
				t.Errorf("attributes %v", attrs)
			}
			if got := server.Parent.IsValid(); got != tc.continues {
				t.Errorf("span has a parent: %v, want %v", got, tc.continues)
			}
			if tc.continues && (server.SpanContext.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || server.Parent.SpanID().String() != "b7ad6b7169203331") {
				t.Errorf("span %s/%s, want the client's trace", server.SpanContext.TraceID(), server.Parent.SpanID())
			}
		})
	}
}
