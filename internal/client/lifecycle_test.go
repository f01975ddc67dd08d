package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

func TestLifecycleRequests(t *testing.T) {
	t.Parallel()
	type seen struct{ method, path, key, contentType string }
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Method, r.URL.Path, r.Header.Get("Idempotency-Key"), r.Header.Get("Content-Type")}
		writeJSON(w, http.StatusAccepted, apiv1.SandboxWithOperation{
			Sandbox:   apiv1.Sandbox{ID: "sb_x", State: "pausing"},
			Operation: apiv1.Operation{ID: "op_x", Kind: "pause"},
		})
	}))
	defer srv.Close()
	c := newTestClient(t, srv.URL)
	ctx := context.Background()
	id := model.NewSandboxID()
	for _, tc := range []struct {
		kind string
		call func(context.Context, model.SandboxID) (apiv1.SandboxWithOperation, error)
	}{
		{"pause", c.PauseSandbox},
		{"resume", c.ResumeSandbox},
		{"suspend", c.SuspendSandbox},
		{"wake", c.WakeSandbox},
		{"wake", func(ctx context.Context, id model.SandboxID) (apiv1.SandboxWithOperation, error) {
			return c.LifecycleSandbox(ctx, id, model.OpWake)
		}},
	} {
		out, err := tc.call(ctx, id)
		if err != nil {
			t.Fatalf("%s: %v", tc.kind, err)
		}
		if out.Operation.ID != "op_x" || out.Sandbox.State != "pausing" {
			t.Fatalf("%s: decoded %+v", tc.kind, out)
		}
		s := <-got
		if s.method != "POST" || s.path != "/v1/sandboxes/"+id.String()+"/"+tc.kind || s.key == "" || s.contentType != "" {
			t.Fatalf("%s: request %+v, want POST …/%s with an Idempotency-Key and no body", tc.kind, s, tc.kind)
		}
	}
	if _, err := c.LifecycleSandbox(ctx, id, model.OpDelete); err == nil {
		t.Fatal("LifecycleSandbox(delete) made a request")
	}
}

// TestResumeTimeoutIsNotRetried: a 504 resume_timeout already waited the
// server's bound out; other 504s are retried.
func TestResumeTimeoutIsNotRetried(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code     string
		attempts int
	}{
		{apiv1.CodeResumeTimeout, 1},
		{apiv1.CodeUnavailable, 5},
	} {
		var rec recorded
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec.add(r.Header.Get("Idempotency-Key"))
			writeJSON(w, http.StatusGatewayTimeout, apiv1.Error{Code: tc.code, Message: "slow"})
		}))
		c := newTestClient(t, srv.URL)
		_, err := c.CreateCommand(context.Background(), model.NewSandboxID(), apiv1.CreateCommandRequest{Args: []string{"true"}, Resume: true})
		srv.Close()
		if !IsCode(err, tc.code) {
			t.Fatalf("%s: err = %v", tc.code, err)
		}
		if n := len(rec.all()); n != tc.attempts {
			t.Errorf("%s: %d attempts, want %d", tc.code, n, tc.attempts)
		}
	}
}
