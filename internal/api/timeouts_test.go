package api

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

func TestCreateTimeouts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, tc := range []struct {
		name     string
		body     string
		timeout  time.Duration // deadline after created_at; 0: none
		on       string
		idle     int64
		activity bool
	}{
		{"defaults", `{}`, 0, "delete", 21600, true},
		{"timeout and suspend", `{"timeout": 90, "on_timeout": "suspend"}`, 90 * time.Second, "suspend", 21600, true},
		{"timeout 0 is none", `{"timeout": 0, "on_timeout": "delete"}`, 0, "delete", 21600, true},
		{"idle never", `{"idle_timeout": 0}`, 0, "delete", 0, true},
		{"idle and timeout at their bounds", `{"idle_timeout": 2592000, "timeout": 31536000}`, 365 * 24 * time.Hour, "delete", 2592000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := e.createSandbox(e.keyA, tc.body).Sandbox
			if sb.OnTimeout != tc.on || sb.IdleTimeout != tc.idle {
				t.Fatalf("on_timeout %q idle_timeout %d, want %q %d", sb.OnTimeout, sb.IdleTimeout, tc.on, tc.idle)
			}
			switch {
			case tc.timeout == 0 && sb.TimeoutAt != nil:
				t.Fatalf("timeout_at %s, want null", sb.TimeoutAt)
			case tc.timeout != 0 && (sb.TimeoutAt == nil || !sb.TimeoutAt.Equal(sb.CreatedAt.Add(tc.timeout))):
				t.Fatalf("timeout_at %v, want created_at + %s (%s)", sb.TimeoutAt, tc.timeout, sb.CreatedAt)
			}
			if sb.LastActivityAt == nil || !sb.LastActivityAt.Equal(sb.CreatedAt) {
				t.Fatalf("last_activity_at %v, want created_at %s", sb.LastActivityAt, sb.CreatedAt)
			}
			var got apiv1.Sandbox
			e.do("GET", "/v1/sandboxes/"+sb.ID, e.keyA, "").want(t, http.StatusOK).decode(t, &got)
			if got.OnTimeout != sb.OnTimeout || got.IdleTimeout != sb.IdleTimeout || (got.TimeoutAt == nil) != (sb.TimeoutAt == nil) {
				t.Fatalf("GET differs from create: %+v vs %+v", got, sb)
			}
		})
	}
}

func TestCreateTimeoutsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	before := e.dump()
	for _, tc := range []struct {
		name, body string
		invalid    bool // the document refuses it too
	}{
		{"negative timeout", `{"timeout": -1}`, true},
		{"timeout over a year", `{"timeout": 31536001}`, true},
		{"unknown on_timeout", `{"on_timeout": "hibernate"}`, true},
		{"empty on_timeout", `{"timeout": 5, "on_timeout": ""}`, true},
		{"negative idle", `{"idle_timeout": -5}`, true},
		{"idle over 30 days", `{"idle_timeout": 2592001}`, true},
		{"idle null", `{"idle_timeout": null}`, true},
		{"timeout as a string", `{"timeout": "1h"}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.send(req{method: "POST", path: "/v1/sandboxes", key: e.keyA, body: tc.body, invalid: tc.invalid, t: t}).
				wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
		})
	}
	if after := e.dump(); after != before {
		t.Fatal("a refused create changed the store")
	}
}

func TestDefaultIdleTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  time.Duration
		want int64
	}{
		{"model default", 0, 21600},
		{"operator's", 90 * time.Minute, 5400},
		{"never", -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, func(c *envConfig) { c.DefaultIdleTimeout = tc.cfg })
			if got := e.createSandbox(e.keyA, `{}`).Sandbox.IdleTimeout; got != tc.want {
				t.Fatalf("idle_timeout %d, want %d", got, tc.want)
			}
			// An explicit value wins.
			if got := e.createSandbox(e.keyA, `{"idle_timeout": 7}`).Sandbox.IdleTimeout; got != 7 {
				t.Fatalf("explicit idle_timeout %d, want 7", got)
			}
		})
	}
}

func TestSetSandboxTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.createSandbox(e.keyA, `{"on_timeout": "suspend"}`).Sandbox
	path := "/v1/sandboxes/" + sb.ID + "/timeout"

	var got apiv1.Sandbox
	e.do("POST", path, e.keyA, `{"timeout": 120}`).want(t, http.StatusOK).decode(t, &got)
	if got.TimeoutAt == nil || got.OnTimeout != "suspend" {
		t.Fatalf("after setting 120 s: timeout_at %v on_timeout %q (suspend kept)", got.TimeoutAt, got.OnTimeout)
	}
	if d := got.TimeoutAt.Sub(got.UpdatedAt); d != 120*time.Second {
		t.Fatalf("timeout_at is %s after the change, want 120s", d)
	}
	e.do("POST", path, e.keyA, `{"timeout": 60, "on_timeout": "delete"}`).want(t, http.StatusOK).decode(t, &got)
	if got.TimeoutAt == nil || got.OnTimeout != "delete" {
		t.Fatalf("after setting 60 s delete: %v %q", got.TimeoutAt, got.OnTimeout)
	}
	e.do("POST", path, e.keyA, `{"timeout": 0}`).want(t, http.StatusOK).decode(t, &got)
	if got.TimeoutAt != nil {
		t.Fatalf("timeout 0 left timeout_at %s", got.TimeoutAt)
	}

	for _, tc := range []struct {
		name, path, key, body string
		status                int
		code                  string
		invalid               bool
	}{
		{"timeout missing", path, e.keyA, `{"on_timeout": "delete"}`, http.StatusBadRequest, apiv1.CodeInvalidRequest, true},
		{"negative", path, e.keyA, `{"timeout": -1}`, http.StatusBadRequest, apiv1.CodeInvalidRequest, true},
		{"bad on_timeout", path, e.keyA, `{"timeout": 5, "on_timeout": "later"}`, http.StatusBadRequest, apiv1.CodeInvalidRequest, true},
		{"empty on_timeout", path, e.keyA, `{"timeout": 5, "on_timeout": ""}`, http.StatusBadRequest, apiv1.CodeInvalidRequest, true},
		{"unknown sandbox", "/v1/sandboxes/" + model.NewSandboxID().String() + "/timeout", e.keyA, `{"timeout": 5}`, http.StatusNotFound, apiv1.CodeNotFound, false},
		{"another project's sandbox", path, e.keyB, `{"timeout": 5}`, http.StatusNotFound, apiv1.CodeNotFound, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.send(req{method: "POST", path: tc.path, key: tc.key, body: tc.body, invalid: tc.invalid, t: t}).
				wantError(t, tc.status, tc.code)
		})
	}

	// With an Idempotency-Key a retry is answered as the first was, and
	// another body under the same key is refused.
	first := e.send(req{method: "POST", path: path, key: e.keyA, header: idem("timeout-1"), body: `{"timeout": 300}`}).want(t, http.StatusOK)
	again := e.send(req{method: "POST", path: path, key: e.keyA, header: idem("timeout-1"), body: `{"timeout": 300}`}).want(t, http.StatusOK)
	if !bytes.Equal(first.body, again.body) || again.header.Get(headerReplayed) != "true" {
		t.Fatalf("retry not replayed:\n%s\n%s", first.body, again.body)
	}
	e.send(req{method: "POST", path: path, key: e.keyA, header: idem("timeout-1"), body: `{"timeout": 301}`}).
		wantError(t, http.StatusConflict, apiv1.CodeIdempotencyKeyReused)

	// A sandbox being deleted keeps what it has: 409.
	e.do("DELETE", "/v1/sandboxes/"+sb.ID, e.keyA, "").want(t, http.StatusAccepted)
	e.do("POST", path, e.keyA, `{"timeout": 5}`).wantError(t, http.StatusConflict, apiv1.CodeInvalidTransition)
}

type recorder struct {
	mu      sync.Mutex
	touched map[model.SandboxID]int
}

func (r *recorder) Touch(id model.SandboxID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.touched[id]++
}

func (r *recorder) count(id model.SandboxID) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.touched[id]
}

// TestCallsNamingASandboxAreActivity: a change to a sandbox of the
// caller's project records activity; another project's call and reading
// the record do not.
func TestCallsNamingASandboxAreActivity(t *testing.T) {
	t.Parallel()
	rec := &recorder{touched: map[model.SandboxID]int{}}
	e := newEnv(t, func(c *envConfig) { c.Activity = rec })
	sb := e.createSandbox(e.keyA, `{}`).Sandbox
	id, err := model.ParseSandboxID(sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	e.do("GET", "/v1/sandboxes/"+sb.ID, e.keyB, "").want(t, http.StatusNotFound)
	if n := rec.count(id); n != 0 {
		t.Fatalf("another project's call recorded %d activities", n)
	}
	e.do("POST", "/v1/sandboxes/"+sb.ID+"/timeout", e.keyB, `{"timeout": 30}`).want(t, http.StatusNotFound)
	e.do("GET", "/v1/sandboxes/"+sb.ID, e.keyA, "").want(t, http.StatusOK)
	e.do("GET", "/v1/sandboxes", e.keyA, "").want(t, http.StatusOK)
	if n := rec.count(id); n != 0 {
		t.Fatalf("reading the sandbox recorded %d activities", n)
	}
	// Refused requests changed nothing: not activity either.
	e.send(req{method: "POST", path: "/v1/sandboxes/" + sb.ID + "/timeout", key: e.keyA, body: `{"timeout": 30, "on_timeout": "later"}`, invalid: true, t: t}).
		wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	e.do("POST", "/v1/sandboxes/"+sb.ID+"/resume", e.keyA, "").want(t, http.StatusConflict)
	if n := rec.count(id); n != 0 {
		t.Fatalf("refused requests recorded %d activities", n)
	}
	e.do("POST", "/v1/sandboxes/"+sb.ID+"/timeout", e.keyA, `{"timeout": 30}`).want(t, http.StatusOK)
	if n := rec.count(id); n != 1 {
		t.Fatalf("recorded %d activities, want 1", n)
	}
	// The store keeps what the tracker flushes, forward only.
	later := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := e.st.TouchSandboxes(context.Background(), map[model.SandboxID]time.Time{id: later}); err != nil {
		t.Fatal(err)
	}
	var got apiv1.Sandbox
	e.do("GET", "/v1/sandboxes/"+sb.ID, e.keyA, "").want(t, http.StatusOK).decode(t, &got)
	if got.LastActivityAt == nil || !got.LastActivityAt.Equal(later) {
		t.Fatalf("last_activity_at %v, want %s", got.LastActivityAt, later)
	}
}
