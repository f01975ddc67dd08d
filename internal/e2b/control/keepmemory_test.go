package control

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/model"
)

// TestKeepMemoryFalse: pause({keepMemory: false}) and lifecycle onTimeout
// pause with keepMemory false are a filesystem-only suspend, passed on
// to the native API or refused, never dropped.
func TestKeepMemoryFalse(t *testing.T) {
	send := func(t *testing.T, f *fakeNative, method, path, body string) *httptest.ResponseRecorder {
		h, _ := newTestHandler(t, f)
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("X-API-Key", "k")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	t.Run("pause memory false", func(t *testing.T) {
		f := &fakeNative{id: model.NewSandboxID(), script: []model.SandboxState{model.StateRunning}}
		if rec := send(t, f, "POST", "/sandboxes/"+f.id.String()+"/pause", `{"memory":false}`); rec.Code != 204 {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		if f.suspendBody != `{"keep_memory":false}` {
			t.Errorf("native suspend body %q, want keep_memory false", f.suspendBody)
		}
	})
	t.Run("pause memory true: what the runtime keeps", func(t *testing.T) {
		f := &fakeNative{id: model.NewSandboxID(), script: []model.SandboxState{model.StateRunning}}
		if rec := send(t, f, "POST", "/sandboxes/"+f.id.String()+"/pause", `{"memory":true}`); rec.Code != 204 {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		if f.suspendBody != "" {
			t.Errorf("native suspend body %q, want none", f.suspendBody)
		}
	})
	// lifecycle onTimeout {action: 'pause', keepMemory}: the native create
	// carries it (the native API refuses, 501, a runtime that cannot).
	for _, tc := range []struct {
		name, body string
		status     int
		native     string // in the native create's body
	}{
		{"keepMemory false", `{"templateID":"base","timeout":3,"autoPause":true,"autoPauseMemory":false}`, 0, `"timeout_keep_memory":false`},
		{"keepMemory true", `{"templateID":"base","timeout":3,"autoPause":true,"autoPauseMemory":true}`, 0, `"timeout_keep_memory":true`},
		{"pause without keepMemory", `{"templateID":"base","timeout":3,"autoPause":true}`, 0, `"on_timeout":"suspend"`},
		{"keepMemory with kill", `{"templateID":"base","timeout":3,"autoPause":false,"autoPauseMemory":false}`, 400, ""},
		{"keepMemory false with autoResume", `{"templateID":"base","timeout":3,"autoPause":true,"autoPauseMemory":false,"autoResume":{"enabled":true}}`, 400, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeNative{id: model.NewSandboxID(), script: []model.SandboxState{model.StateRunning}}
			rec := send(t, f, "POST", "/sandboxes", tc.body)
			if tc.status != 0 {
				if rec.Code != tc.status || len(f.calls) != 0 {
					t.Fatalf("status %d (%s), native calls %v; want %d and none", rec.Code, rec.Body, f.calls, tc.status)
				}
				return
			}
			if !strings.Contains(f.createBody, tc.native) {
				t.Fatalf("native create %q, want %s", f.createBody, tc.native)
			}
			if strings.Contains(tc.body, "autoPauseMemory") != strings.Contains(f.createBody, "timeout_keep_memory") {
				t.Fatalf("native create %q carries timeout_keep_memory when the create did not say it (or not when it did)", f.createBody)
			}
		})
	}
}
