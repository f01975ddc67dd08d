package storetest

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/store"
)

func traceTests() []namedTest {
	return []namedTest{
		{"OperationTraceParent", testOperationTraceParent},
	}
}

// tracedContext is ctx inside a (sampled) span, as a traced request's is.
func tracedContext(ctx context.Context, traceID, spanID byte) (context.Context, string) {
	var tid trace.TraceID
	var sid trace.SpanID
	tid[0], tid[15], sid[7] = traceID, traceID, spanID
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	return trace.ContextWithSpanContext(ctx, sc), "00-" + tid.String() + "-" + sid.String() + "-01"
}

// An operation records the span of the call that queued it (its W3C
// traceparent), so that the controller's span of running it continues the
// request's trace; the claim hands it back. Untraced: empty. One given
// with the operation is kept as it is.
func testOperationTraceParent(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	node := e.homeNode()

	ctx, want := tracedContext(e.ctx, 0xa1, 0x01)
	sb, op := e.newSandbox(a.ID, tpl.Digest, nil)
	must(t, e.s.CreateSandbox(ctx, sb, policy.Spec{}, op, nil))
	if got := e.getOp(op).TraceParent; got != want {
		t.Fatalf("create in a traced call: traceparent %q, want %q", got, want)
	}
	if got := e.claim(node, e.now()); got.ID != op.ID || got.TraceParent != want {
		t.Fatalf("claimed %s with traceparent %q, want %s with %q", got.ID, got.TraceParent, op.ID, want)
	}

	plain, plainOp := e.newSandbox(a.ID, tpl.Digest, nil)
	must(t, e.s.CreateSandbox(e.ctx, plain, policy.Spec{}, plainOp, nil))
	if got := e.getOp(plainOp).TraceParent; got != "" {
		t.Fatalf("create in an untraced call: traceparent %q, want none", got)
	}

	given, givenOp := e.newSandbox(a.ID, tpl.Digest, nil)
	givenOp.TraceParent = "not a traceparent" // stored as given; the controller parses it
	must(t, e.s.CreateSandbox(ctx, given, policy.Spec{}, givenOp, nil))
	if got := e.getOp(givenOp).TraceParent; got != givenOp.TraceParent {
		t.Fatalf("create with a traceparent: stored %q, want %q", got, givenOp.TraceParent)
	}

	// A delete requested in a traced call records its span too.
	delCtx, wantDel := tracedContext(e.ctx, 0xb2, 0x02)
	del := e.deleteOp(plain)
	if _, err := e.s.RequestDelete(delCtx, store.DeleteRequest{ProjectID: a.ID, SandboxID: plain.ID, Operation: del, Now: e.now()}); err != nil {
		t.Fatal(err)
	}
	if got := e.getOp(del).TraceParent; got != wantDel {
		t.Fatalf("delete in a traced call: traceparent %q, want %q", got, wantDel)
	}
}
