package tracing

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// receiver is an OTLP/HTTP trace endpoint on loopback that keeps what it
// is sent.
type receiver struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []*collectortrace.ExportTraceServiceRequest
	err error
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		var msg collectortrace.ExportTraceServiceRequest
		if err == nil && req.URL.Path != "/v1/traces" {
			err = &pathError{req.URL.Path}
		}
		if err == nil {
			err = proto.Unmarshal(body, &msg)
		}
		r.mu.Lock()
		if err != nil {
			r.err = err
		} else {
			r.got = append(r.got, &msg)
		}
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(nil)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

type pathError struct{ path string }

func (e *pathError) Error() string { return "unexpected path " + e.path }

// spans returns the names of the spans received and each resource's
// service.name.
func (r *receiver) spans(t *testing.T) (names, services []string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		t.Fatalf("receiver: %v", r.err)
	}
	for _, req := range r.got {
		for _, rs := range req.ResourceSpans {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					services = append(services, kv.GetValue().GetStringValue())
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					names = append(names, s.Name)
				}
			}
		}
	}
	return names, services
}

// clearOTELEnv unsets every OTEL_* variable for the test.
func clearOTELEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "OTEL_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
}

func emitOne(t *testing.T, p *Provider) {
	t.Helper()
	ctx, root := p.TracerProvider().Tracer(ScopeName).Start(context.Background(), "root")
	_, child := StartChild(ctx, Tracer(p.TracerProvider()), "child")
	child.End()
	root.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// Without an OTLP endpoint tracing is off: the provider is the no-op one
// and nothing reaches a receiver, even one the other OTEL_* variables
// name.
func TestFromEnvOff(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
	}{
		{"nothing set", nil},
		{"only other variables", map[string]string{"OTEL_SERVICE_NAME": "x", "OTEL_EXPORTER_OTLP_HEADERS": "a=b"}},
		{"SDK disabled", map[string]string{EnvEndpoint: "RECEIVER", EnvSDKDisabled: "true"}},
		{"SDK disabled (any case) for the traces endpoint", map[string]string{EnvTracesEndpoint: "RECEIVER/v1/traces", EnvSDKDisabled: " TRUE "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearOTELEnv(t)
			rec := newReceiver(t)
			for k, v := range tc.env {
				t.Setenv(k, strings.ReplaceAll(v, "RECEIVER", rec.srv.URL))
			}
			p, err := FromEnv(context.Background(), os.Getenv, "v1")
			if err != nil {
				t.Fatal(err)
			}
			if p.Enabled() || Enabled(p.TracerProvider()) || Tracer(p.TracerProvider()) != nil {
				t.Fatal("tracing is on without an OTLP endpoint")
			}
			if _, ok := p.TracerProvider().(noop.TracerProvider); !ok {
				t.Fatalf("provider is %T, want the no-op provider", p.TracerProvider())
			}
			emitOne(t, p)
			if names, _ := rec.spans(t); len(names) != 0 {
				t.Fatalf("spans exported with tracing off: %v", names)
			}
		})
	}
}

// With an endpoint, spans are exported over OTLP/HTTP, flushed by
// Shutdown, under service.name airlock unless OTEL_SERVICE_NAME or
// OTEL_RESOURCE_ATTRIBUTES say otherwise.
func TestFromEnvExports(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		service string
	}{
		{"endpoint", map[string]string{EnvEndpoint: "RECEIVER"}, "airlock"},
		{"traces endpoint", map[string]string{EnvTracesEndpoint: "RECEIVER/v1/traces"}, "airlock"},
		{"service name", map[string]string{EnvEndpoint: "RECEIVER", "OTEL_SERVICE_NAME": "airlock-eu1"}, "airlock-eu1"},
		{"resource attributes", map[string]string{EnvEndpoint: "RECEIVER", "OTEL_RESOURCE_ATTRIBUTES": "service.name=fleet,deployment.environment=test"}, "fleet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearOTELEnv(t)
			rec := newReceiver(t)
			for k, v := range tc.env {
				t.Setenv(k, strings.ReplaceAll(v, "RECEIVER", rec.srv.URL))
			}
			p, err := FromEnv(context.Background(), os.Getenv, "v1")
			if err != nil {
				t.Fatal(err)
			}
			if !p.Enabled() {
				t.Fatal("tracing is off with an OTLP endpoint")
			}
			emitOne(t, p)
			names, services := rec.spans(t)
			if strings.Join(names, ",") != "child,root" && strings.Join(names, ",") != "root,child" {
				t.Fatalf("exported spans %v, want root and child", names)
			}
			for _, s := range services {
				if s != tc.service {
					t.Fatalf("service.name %q, want %q", s, tc.service)
				}
			}
			if len(services) == 0 {
				t.Fatal("no service.name exported")
			}
		})
	}
}

func TestTraceParentRoundTrip(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	p, err := WithProcessor(context.Background(), newSyncer(exp), "")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	ctx, span := Tracer(p.TracerProvider()).Start(context.Background(), "request")
	tp := TraceParent(ctx)
	span.End()
	sc := span.SpanContext()
	want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	if tp != want {
		t.Fatalf("TraceParent = %q, want %q", tp, want)
	}
	got, ok := WithTraceParent(context.Background(), tp)
	if !ok {
		t.Fatal("WithTraceParent refused its own traceparent")
	}
	parsed := trace.SpanContextFromContext(got)
	if parsed.TraceID() != sc.TraceID() || parsed.SpanID() != sc.SpanID() || !parsed.IsRemote() || !parsed.IsSampled() {
		t.Fatalf("parsed %+v, want the span's context %+v (remote)", parsed, sc)
	}
	if TraceParent(context.Background()) != "" {
		t.Fatal("TraceParent of an untraced context is not empty")
	}
}

// A stored traceparent is untrusted: whatever does not parse leaves the
// context alone (the next span is a new root), without an error.
func TestWithTraceParentInvalid(t *testing.T) {
	for _, tp := range []string{
		"",
		"garbage",
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",    // no flags
		"00-00000000000000000000000000000000-b7ad6b7169203331-01", // zero trace ID
		"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", // zero span ID
		"ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", // version ff is invalid
		"00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01", // upper case
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
		"00-0af7651916cd43dd8448eb211c80319z-b7ad6b7169203331-01",
		strings.Repeat("0", 4096),
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\x00",
	} {
		ctx, ok := WithTraceParent(context.Background(), tp)
		if ok || trace.SpanContextFromContext(ctx).IsValid() {
			t.Errorf("WithTraceParent(%q) accepted: %+v", tp, trace.SpanContextFromContext(ctx))
		}
	}
	if _, ok := WithTraceParent(context.Background(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"); !ok {
		t.Error("WithTraceParent refused a valid traceparent")
	}
}

// Store, runtime and agent spans exist only below a request's or an
// operation's: with no span in the context, or no tracer, StartChild
// records nothing.
func TestStartChildNeedsParent(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	p, err := WithProcessor(context.Background(), newSyncer(exp), "")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	tr := Tracer(p.TracerProvider())
	if _, s := StartChild(context.Background(), tr, "orphan"); s.IsRecording() {
		t.Fatal("a span without a parent records")
	}
	ctx, root := tr.Start(context.Background(), "root")
	if _, s := StartChild(ctx, nil, "untraced"); s.IsRecording() {
		t.Fatal("a span of a nil tracer records")
	}
	_, child := StartChild(ctx, tr, "child")
	End(child, io.EOF)
	root.End()
	spans := exp.GetSpans()
	if len(spans) != 2 || spans[0].Name != "child" || spans[0].Parent.SpanID() != root.SpanContext().SpanID() {
		t.Fatalf("spans %v, want child below root", spans.Snapshots())
	}
	if spans[0].Status.Description != io.EOF.Error() {
		t.Fatalf("child status %+v, want the error", spans[0].Status)
	}
}
