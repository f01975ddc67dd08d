package integration

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// otlpReceiver is an OTLP/HTTP traces endpoint in the test process.
type otlpReceiver struct {
	srv      *httptest.Server
	mu       sync.Mutex
	spans    []*tracepb.Span
	services map[string]bool
	errs     []string
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{services: map[string]bool{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		var msg collectortrace.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &msg)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if err != nil || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			r.errs = append(r.errs, req.URL.Path+" "+req.Header.Get("Content-Type")+" "+errString(err))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		for _, rs := range msg.ResourceSpans {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					r.services[kv.GetValue().GetStringValue()] = true
				}
			}
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (r *otlpReceiver) snapshot() ([]*tracepb.Span, map[string]bool, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	svc := map[string]bool{}
	for k := range r.services {
		svc[k] = true
	}
	return append([]*tracepb.Span(nil), r.spans...), svc, append([]string(nil), r.errs...)
}

// The real server with OTEL_EXPORTER_OTLP_ENDPOINT exports one trace per
// create over OTLP/HTTP — the request, the operation below it, the runtime
// and the agent below that — and flushes what it queued when it stops
// (the batch processor's delay is set beyond the test, so only the flush
// on exit exports).
func TestTracesOverOTLP(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runc")
	rec := newOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rec.srv.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")
	t.Setenv("OTEL_SERVICE_NAME", "airlock-it")
	s := newServer(t, build(t), serverConfig{runtime: "runc"})
	s.start()
	ctx := ctxFor(t, 3*time.Minute)
	c := s.client()
	sb := createSandbox(ctx, t, c, apiv1.CreateSandboxRequest{})
	if _, err := c.DeleteSandbox(ctx, model.SandboxID(sb.ID)); err != nil {
		t.Fatal(err)
	}
	s.waitState(ctx, model.SandboxID(sb.ID), model.StateDeleted)
	time.Sleep(500 * time.Millisecond) // the delete's span ends just after its outcome is stored
	if spans, _, _ := rec.snapshot(); len(spans) != 0 {
		t.Fatalf("%d spans exported before the server stopped, with a 10 min batch delay", len(spans))
	}
	s.stop()

	spans, services, errs := rec.snapshot()
	if len(errs) != 0 {
		t.Fatalf("bad exports: %v", errs)
	}
	if !services["airlock-it"] || len(services) != 1 {
		t.Fatalf("service names %v, want airlock-it (OTEL_SERVICE_NAME)", services)
	}
	byID := map[string]*tracepb.Span{}
	for _, sp := range spans {
		byID[hex.EncodeToString(sp.SpanId)] = sp
	}
	var root *tracepb.Span
	for _, sp := range spans {
		if sp.Name == "POST /v1/sandboxes" {
			root = sp
		}
	}
	if root == nil {
		t.Fatalf("no span of the create request among %d", len(spans))
	}
	parentName := func(sp *tracepb.Span) string {
		if p := byID[hex.EncodeToString(sp.ParentSpanId)]; p != nil {
			return p.Name
		}
		return ""
	}
	found := map[string]bool{}
	for _, sp := range spans {
		if hex.EncodeToString(sp.TraceId) != hex.EncodeToString(root.TraceId) {
			continue
		}
		found[parentName(sp)+" > "+sp.Name] = true
	}
	for _, want := range []string{
		"POST /v1/sandboxes > store.CreateSandbox",
		"POST /v1/sandboxes > operation create",
		"operation create > runtime.create",
		"operation create > runtime.start",
		"operation create > agent.connect",
		"operation create > store.FinishOperation",
	} {
		if !found[want] {
			t.Errorf("no %q in the create's trace; it has %v", want, found)
		}
	}
	// The delete is a trace of its own, with the runtime's delete below
	// its operation.
	del := false
	for _, sp := range spans {
		if sp.Name == "runtime.delete" && parentName(sp) == "operation delete" {
			del = true
		}
	}
	if !del {
		t.Error("no runtime.delete below an operation delete span")
	}
}
