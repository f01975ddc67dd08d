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
	const create = `{"templateID":"base","timeout":3,"autoPause":true,"autoPauseMemory":false}`
	t.Run("onTimeout pause keepMemory false on runsc: refused", func(t *testing.T) {
		f := &fakeNative{id: model.NewSandboxID(), script: []model.SandboxState{model.StateRunning}, snapshot: "memory"}
		rec := send(t, f, "POST", "/sandboxes", create)
		if rec.Code != 501 || !strings.Contains(rec.Body.String(), "keepMemory: false is not supported") || !strings.Contains(rec.Body.String(), "runsc") {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		if len(f.calls) != 0 {
			t.Errorf("native calls %v after the refusal, want none", f.calls)
		}
	})
	t.Run("onTimeout pause keepMemory false on runc: created", func(t *testing.T) {
		f := &fakeNative{id: model.NewSandboxID(), script: []model.SandboxState{model.StateRunning}, snapshot: "filesystem"}
		send(t, f, "POST", "/sandboxes", create)
		if len(f.calls) == 0 {
			t.Errorf("no native create")
		}
	})
}
