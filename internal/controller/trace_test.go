package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlockdev/airlock/internal/api"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/placement"
	"github.com/airlockdev/airlock/internal/sandboxes"
	"github.com/airlockdev/airlock/internal/tracing"
)

// newTraced is a controller env (real SQLite store, runc, the real guest
// agent) whose store, controller, worker and agent clients record spans
// into an in-memory exporter.
func newTraced(t *testing.T) (*env, *tracing.Provider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	p, err := tracing.WithProcessor(context.Background(), sdktrace.NewSimpleSpanProcessor(exp), "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	e := newEnvWith(t, "runc", nil, Config{TracerProvider: p.TracerProvider()})
	return e, p, exp
}

// waitSpan waits until a span named name of the trace ended (the
// operation's span ends just after its outcome is stored).
func waitSpan(t *testing.T, exp *tracetest.InMemoryExporter, traceID trace.TraceID, name string) tracetest.SpanStub {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, s := range exp.GetSpans() {
			if s.Name == name && (!traceID.IsValid() || s.SpanContext.TraceID() == traceID) {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no span %q in trace %s; spans:\n%s", name, traceID, dumpSpans(exp.GetSpans()))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func dumpSpans(spans tracetest.SpanStubs) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s trace=%s span=%s parent=%s\n", s.Name, s.SpanContext.TraceID(), s.SpanContext.SpanID(), s.Parent.SpanID())
	}
	return b.String()
}

// One create through the API is one trace: the request's server span; the
// store calls it makes below it; the controller's span of the create
// operation below it too (carried across the operation boundary by the
// operation's stored traceparent); and, below the operation's span, its
// store calls, the runtime's create and start and the guest agent's dial
// and handshake.
func TestCreateIsOneTrace(t *testing.T) {
	e, p, exp := newTraced(t)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	dir := t.TempDir()
	ring, err := auth.OpenKeyring(filepath.Join(dir, "attach"), auth.KeyringOptions{})
	if err != nil {
		t.Fatal(err)
	}
	placer, err := placement.New(placement.Config{Store: e.st, DeadAfter: time.Hour, Self: e.node,
		HasLocal: func(model.TemplateDigest) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := sandboxes.New(sandboxes.Config{Store: e.st, Placer: placer, Self: e.node, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	a, err := api.New(api.Config{Store: e.st, Attach: ring.Issuer(), Sandboxes: svc, Self: e.node, Logger: log,
		TracerProvider: p.TracerProvider()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	keyFile := filepath.Join(dir, "admin.key")
	if _, err := api.EnsureAdminKey(ctx, e.st, keyFile, log); err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	e.run()

	do := func(method, path, body string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(key)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	exp.Reset() // the admin key's bootstrap is not the create
	resp, body := do("POST", "/v1/sandboxes", fmt.Sprintf(`{"template": %q, "cpus": 1, "memory_mib": 256}`, e.digest))
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	var created apiv1.SandboxWithOperation
	if err := json.Unmarshal(body, &created); err != nil {
		t.Fatal(err)
	}
	requestID := resp.Header.Get("X-Request-Id")
	for deadline := time.Now().Add(2 * time.Minute); ; {
		if time.Now().After(deadline) {
			t.Fatalf("create %s did not finish", created.Operation.ID)
		}
		_, body := do("GET", "/v1/operations/"+created.Operation.ID+"?wait=10s", "")
		var op apiv1.Operation
		if err := json.Unmarshal(body, &op); err != nil {
			t.Fatalf("operation: %v: %s", err, body)
		}
		if op.State == string(model.OpFailed) {
			t.Fatalf("create failed: %+v", op.Error)
		}
		if op.State == string(model.OpSucceeded) {
			break
		}
	}

	// The request's span is the root of the trace.
	var root tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "POST /v1/sandboxes" {
			root = s
		}
	}
	if !root.SpanContext.IsValid() {
		t.Fatalf("no span of the create request; spans:\n%s", dumpSpans(exp.GetSpans()))
	}
	tid := root.SpanContext.TraceID()
	opSpan := waitSpan(t, exp, tid, "operation create")
	var spans tracetest.SpanStubs
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID() == tid {
			spans = append(spans, s)
		}
	}
	t.Logf("the create's trace:\n%s", dumpSpans(spans))

	if root.Parent.IsValid() || root.SpanKind != trace.SpanKindServer {
		t.Errorf("request span: parent %v, kind %v; want a server span at the root", root.Parent.SpanID(), root.SpanKind)
	}
	attrs := map[string]string{}
	for _, kv := range root.Attributes {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	if attrs["airlock.request_id"] != requestID || requestID == "" || attrs["http.response.status_code"] != "202" || attrs["http.route"] != "/v1/sandboxes" {
		t.Errorf("request span attributes %v; want request ID %q, status 202, route /v1/sandboxes", attrs, requestID)
	}
	if opSpan.Parent.SpanID() != root.SpanContext.SpanID() {
		t.Errorf("operation span's parent %s, want the request's span %s", opSpan.Parent.SpanID(), root.SpanContext.SpanID())
	}
	opAttrs := map[string]string{}
	for _, kv := range opSpan.Attributes {
		opAttrs[string(kv.Key)] = kv.Value.Emit()
	}
	if opAttrs["airlock.operation.id"] != created.Operation.ID || opAttrs["airlock.sandbox.id"] != created.Sandbox.ID {
		t.Errorf("operation span attributes %v", opAttrs)
	}

	// What lies below each span: the store calls of each, the runtime's
	// and the agent's below the operation.
	below := func(parent tracetest.SpanStub, name string) []tracetest.SpanStub {
		var out []tracetest.SpanStub
		for _, s := range spans {
			if s.Parent.SpanID() == parent.SpanContext.SpanID() && (s.Name == name || strings.HasSuffix(name, "*") && strings.HasPrefix(s.Name, strings.TrimSuffix(name, "*"))) {
				out = append(out, s)
			}
		}
		return out
	}
	for _, want := range []struct {
		parent tracetest.SpanStub
		name   string
	}{
		{root, "store.CreateSandbox"},
		{opSpan, "store.*"},
		{opSpan, "store.FinishOperation"},
		{opSpan, "runtime.create"},
		{opSpan, "runtime.start"},
		{opSpan, "agent.connect"},
	} {
		got := below(want.parent, want.name)
		if len(got) == 0 {
			t.Errorf("no span %q below %q", want.name, want.parent.Name)
		}
		for _, s := range got {
			if s.Status.Code != 0 && s.Status.Code != 1 { // unset or ok
				t.Errorf("span %s: status %+v", s.Name, s.Status)
			}
		}
	}
	for _, s := range below(opSpan, "runtime.*") {
		for _, kv := range s.Attributes {
			if kv.Key == "airlock.runtime" && kv.Value.AsString() != "runc" {
				t.Errorf("%s: runtime %q, want runc", s.Name, kv.Value.AsString())
			}
		}
	}
	// Every span of the trace hangs from the request's: no orphans.
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext.SpanID()] = true
	}
	for _, s := range spans {
		if s.SpanContext.SpanID() != root.SpanContext.SpanID() && !ids[s.Parent.SpanID()] {
			t.Errorf("span %s: parent %s is not in the trace", s.Name, s.Parent.SpanID())
		}
	}
}

// The controller parses an operation's stored traceparent: a valid one is
// the parent of the operation's span; an empty or invalid one (the
// column is read from the database) starts a new trace, and the operation
// runs as usual.
func TestOperationTraceParent(t *testing.T) {
	e, _, exp := newTraced(t)
	const valid = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	cases := []struct {
		name, traceParent string
		continues         bool
	}{
		{"valid", valid, true},
		{"empty", "", false},
		{"garbage", "not a traceparent", false},
		{"zero trace ID", "00-00000000000000000000000000000000-b7ad6b7169203331-01", false},
		{"bad version", "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", false},
	}
	ops := map[string]model.OperationID{}
	for _, tc := range cases {
		now := time.Now()
		sb := model.Sandbox{ID: model.NewSandboxID(), ProjectID: e.project, Template: e.digest,
			Resources: model.Resources{CPUs: 1, MemoryMiB: 128}, Metadata: model.Metadata{},
			State: model.StatePending, NodeID: e.node, CreatedAt: now, UpdatedAt: now}
		op := model.Operation{ID: model.NewOperationID(), ProjectID: e.project, SandboxID: sb.ID, Kind: model.OpCreate,
			State: model.OpPending, TraceParent: tc.traceParent, CreatedAt: now, UpdatedAt: now}
		if err := e.st.CreateSandbox(context.Background(), sb, policy.Spec{}, op, nil); err != nil {
			t.Fatal(err)
		}
		stored, err := e.st.GetOperation(context.Background(), e.project, op.ID)
		if err != nil || stored.TraceParent != tc.traceParent {
			t.Fatalf("%s: stored traceparent %q (%v), want %q", tc.name, stored.TraceParent, err, tc.traceParent)
		}
		ops[tc.name] = op.ID
	}
	e.run()
	for _, tc := range cases {
		if op := e.waitOp(ops[tc.name]); op.State != model.OpSucceeded {
			t.Fatalf("%s: operation %+v", tc.name, op)
		}
	}
	byOp := map[string]tracetest.SpanStub{}
	deadline := time.Now().Add(30 * time.Second)
	for len(byOp) < len(cases) && time.Now().Before(deadline) {
		for _, s := range exp.GetSpans() {
			if s.Name != "operation create" {
				continue
			}
			for _, kv := range s.Attributes {
				if kv.Key == "airlock.operation.id" {
					byOp[kv.Value.AsString()] = s
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, tc := range cases {
		s, ok := byOp[string(ops[tc.name])]
		if !ok {
			t.Errorf("%s: no operation span; spans:\n%s", tc.name, dumpSpans(exp.GetSpans()))
			continue
		}
		invalid := false
		for _, kv := range s.Attributes {
			if kv.Key == "airlock.operation.trace_parent_invalid" {
				invalid = kv.Value.AsBool()
			}
		}
		if tc.continues {
			if s.SpanContext.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || s.Parent.SpanID().String() != "b7ad6b7169203331" || !s.Parent.IsRemote() {
				t.Errorf("%s: span trace %s parent %s; want the stored traceparent's", tc.name, s.SpanContext.TraceID(), s.Parent.SpanID())
			}
		} else if s.Parent.IsValid() || s.SpanContext.TraceID().String() == "0af7651916cd43dd8448eb211c80319c" {
			t.Errorf("%s: span has parent %s in trace %s; want a new root", tc.name, s.Parent.SpanID(), s.SpanContext.TraceID())
		}
		if invalid != (tc.traceParent != "" && !tc.continues) {
			t.Errorf("%s: trace_parent_invalid = %v", tc.name, invalid)
		}
		// The operation's own work is in its trace.
		found := false
		for _, c := range exp.GetSpans() {
			if c.Name == "runtime.create" && c.Parent.SpanID() == s.SpanContext.SpanID() && c.SpanContext.TraceID() == s.SpanContext.TraceID() {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no runtime.create span below the operation's", tc.name)
		}
	}
}
