package control

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// fakeNative is a scripted native API for one sandbox: GET returns the
// states of script in turn (the last one repeats); lifecycle calls are
// recorded and move the sandbox to running (wake, resume) or suspended
// (suspend); an operation is always finished.
type fakeNative struct {
	mu      sync.Mutex
	id      model.SandboxID
	script  []model.SandboxState
	busy    int // lifecycle calls answered sandbox_busy before one succeeds
	calls   []string
	timeout *apiv1.SetTimeoutRequest
	// metrics are the native samples; metricsQuery the last query of them.
	metrics      []apiv1.SandboxMetric
	metricsQuery string
	// suspendBody is the body of the last native suspend, createBody of
	// the last native create.
	suspendBody string
	createBody  string
}

func (f *fakeNative) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	// A deadline 2s away: connect and refresh extend it.
	deadline := time.Now().Add(2 * time.Second)
	sb := apiv1.Sandbox{ID: f.id.String(), Template: "sha256:abc", State: string(f.script[0]), CreatedAt: time.Now(), TimeoutAt: &deadline}
	base := "/v1/sandboxes/" + f.id.String()
	switch {
	case r.Method == "GET" && r.URL.Path == base:
		if len(f.script) > 1 {
			f.script = f.script[1:]
		}
		_ = json.NewEncoder(w).Encode(sb)
	case r.Method == "GET" && r.URL.Path == base+"/metrics":
		f.metricsQuery = r.URL.RawQuery
		_ = json.NewEncoder(w).Encode(apiv1.SandboxMetricList{Metrics: append([]apiv1.SandboxMetric{}, f.metrics...)})
	case r.Method == "GET" && strings.HasPrefix(r.URL.Path, "/v1/operations/"):
		_ = json.NewEncoder(w).Encode(apiv1.Operation{ID: strings.TrimPrefix(r.URL.Path, "/v1/operations/"), State: "succeeded"})
	case r.Method == "POST" && r.URL.Path == base+"/timeout":
		var req apiv1.SetTimeoutRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.timeout = &req
		f.calls = append(f.calls, "timeout")
		_ = json.NewEncoder(w).Encode(sb)
	case r.Method == "POST" || r.Method == "DELETE":
		kind := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, base), "/")
		if kind == "" {
			kind = "delete"
		}
		f.calls = append(f.calls, kind)
		switch body, _ := io.ReadAll(r.Body); {
		case kind == "suspend":
			f.suspendBody = string(body)
		case r.URL.Path == "/v1/sandboxes":
			f.createBody = string(body)
		}
		if f.busy > 0 {
			f.busy--
			w.WriteHeader(http.StatusConflict)
			_ = json.NewEncoder(w).Encode(apiv1.Error{Code: apiv1.CodeSandboxBusy, Message: "busy"})
			return
		}
		switch kind {
		case "wake", "resume":
			f.script = []model.SandboxState{model.StateRunning}
		case "suspend":
			f.script = []model.SandboxState{model.StateSuspended}
		}
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(apiv1.SandboxWithOperation{Sandbox: sb, Operation: apiv1.Operation{ID: model.NewOperationID().String(), Kind: kind, State: "pending"}})
	default:
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(apiv1.Error{Code: apiv1.CodeNotFound, Message: "no route"})
	}
}

func TestLifecycle(t *testing.T) {
	S := func(s ...model.SandboxState) []model.SandboxState { return s }
	tests := []struct {
		name        string
		method, op  string // op: path after /sandboxes/{id} (or "connect2" for /v2/…/connect)
		body        string
		script      []model.SandboxState
		busy        int
		status      int
		calls       []string
		onTimeout   string // the timeout request's on_timeout, when one is expected
		wantTimeout int64
	}{
		{"connect running", "POST", "/connect", `{"timeout":60}`, S(model.StateRunning), 0, 200, []string{"timeout"}, "", 60},
		{"connect never shortens", "POST", "/connect", `{"timeout":1}`, S(model.StateRunning), 0, 200, nil, "", 0},
		{"refresh absent", "POST", "/refreshes", ``, S(model.StateRunning), 0, 204, nil, "", 0},
		{"connect suspended", "POST", "connect2", `{}`, S(model.StateSuspended), 0, 201, []string{"wake", "timeout"}, "", 300},
		{"connect paused", "POST", "connect2", `{"timeout":30}`, S(model.StatePaused), 0, 201, []string{"resume", "timeout"}, "", 30},
		{"connect while waking", "POST", "connect2", `{}`, S(model.StateWaking, model.StateWaking, model.StateRunning), 0, 200, []string{"timeout"}, "", 300},
		{"connect while suspending", "POST", "connect2", `{}`, S(model.StateSuspending, model.StateSuspended), 0, 201, []string{"wake", "timeout"}, "", 300},
		{"connect busy", "POST", "connect2", `{}`, S(model.StateSuspended), 2, 201, []string{"wake", "wake", "wake", "timeout"}, "", 300},
		{"connect deleting", "POST", "connect2", `{}`, S(model.StateDeleting), 0, 404, nil, "", 0},
		{"resume running", "POST", "/resume", `{}`, S(model.StateRunning), 0, 409, nil, "", 0},
		{"resume suspended", "POST", "/resume", `{"timeout":20,"autoPause":true}`, S(model.StateSuspended), 0, 201, []string{"wake", "timeout"}, "suspend", 20},
		{"pause running", "POST", "/pause", ``, S(model.StateRunning), 0, 204, []string{"timeout", "suspend"}, "", 0}, // the deadline cleared first
		{"pause paused", "POST", "/pause", `{}`, S(model.StatePaused), 0, 204, []string{"timeout", "suspend"}, "", 0},
		{"pause suspended", "POST", "/pause", `{}`, S(model.StateSuspended), 0, 409, nil, "", 0},
		{"pause suspending", "POST", "/pause", `{}`, S(model.StateSuspending), 0, 409, nil, "", 0},
		{"pause failed", "POST", "/pause", `{}`, S(model.StateFailed), 0, 404, nil, "", 0},
		{"timeout running", "POST", "/timeout", `{"timeout":5}`, S(model.StateRunning), 0, 204, []string{"timeout"}, "", 5},
		{"timeout zero", "POST", "/timeout", `{"timeout":0}`, S(model.StateRunning), 0, 204, []string{"timeout"}, "", 1},
		{"timeout missing", "POST", "/timeout", `{}`, S(model.StateRunning), 0, 400, nil, "", 0},
		{"timeout suspended", "POST", "/timeout", `{"timeout":5}`, S(model.StateSuspended), 0, 404, nil, "", 0},
		{"refresh", "POST", "/refreshes", `{"duration":10}`, S(model.StateRunning), 0, 204, []string{"timeout"}, "", 10},
		{"refresh too long", "POST", "/refreshes", `{"duration":3601}`, S(model.StateRunning), 0, 400, nil, "", 0},
		{"kill", "DELETE", "", ``, S(model.StateFailed), 0, 204, []string{"delete"}, "", 0},
		{"kill deleting", "DELETE", "", ``, S(model.StateDeleting), 0, 404, nil, "", 0},
		{"get failed", "GET", "", ``, S(model.StateFailed), 0, 404, nil, "", 0},
		{"get suspended", "GET", "", ``, S(model.StateSuspended), 0, 200, nil, "", 0},
		{"metrics failed", "GET", "/metrics", ``, S(model.StateFailed), 0, 404, nil, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeNative{id: model.NewSandboxID(), script: tt.script, busy: tt.busy}
			h, _ := newTestHandler(t, f)
			path := "/sandboxes/" + f.id.String() + tt.op
			if tt.op == "connect2" {
				path = "/v2/sandboxes/" + f.id.String() + "/connect"
			}
			req := httptest.NewRequest(tt.method, path, strings.NewReader(tt.body))
			req.Header.Set("X-API-Key", "k")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.status, rec.Body)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if strings.Join(f.calls, ",") != strings.Join(tt.calls, ",") {
				t.Fatalf("native calls %v, want %v", f.calls, tt.calls)
			}
			if tt.wantTimeout != 0 && (f.timeout == nil || f.timeout.Timeout != tt.wantTimeout || f.timeout.OnTimeout != tt.onTimeout) {
				t.Fatalf("timeout request %+v, want %d %q", f.timeout, tt.wantTimeout, tt.onTimeout)
			}
			if rec.Code >= 400 {
				var e errorBody
				if json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Code != tt.status {
					t.Fatalf("error body %q", rec.Body)
				}
			}
			if rec.Code == 200 || rec.Code == 201 {
				var out map[string]any
				if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
					t.Fatal(err)
				}
				if out["sandboxID"] != f.id.String() || out["envdVersion"] != EnvdVersion || out["envdAccessToken"] != "test-only-token" || out["domain"] != "sbx.test:8080" {
					t.Fatalf("answer %v", out)
				}
			}
		})
	}
}

func TestFailedOpStatus(t *testing.T) {
	tests := []struct {
		err  *apiv1.Error
		want int
	}{
		{nil, 500},
		{&apiv1.Error{Code: apiv1.CodeNoCapacity}, 503},
		{&apiv1.Error{Code: apiv1.CodeNodeUnreachable}, 503},
		{&apiv1.Error{Code: apiv1.CodeResumeTimeout}, 504},
		{&apiv1.Error{Code: apiv1.CodeInternal}, 500},
	}
	for _, tt := range tests {
		if got := failedOpStatus(apiv1.Operation{Error: tt.err}); got != tt.want {
			t.Errorf("%+v: %d, want %d", tt.err, got, tt.want)
		}
	}
}
