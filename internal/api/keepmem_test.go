package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/sandboxes"
)

// TestTimeoutKeepMemory: timeout_keep_memory is stored with the deadline
// (create, set-timeout) and shown; it is refused with on_timeout delete
// (400) and where the environment's runtime cannot write that kind of
// suspend (501 at create, nothing stored); set-timeout keeps it unless
// on_timeout is given again.
func TestTimeoutKeepMemory(t *testing.T) {
	t.Parallel()
	var te testEnvironments
	e := newEnv(t, withEnvironments(t, &te), func(c *envConfig) {
		// What each environment's runtime declares: runsc as the real one
		// (a checkpoint, the filesystem on request); the fake runc's
		// (pause only: it cannot suspend).
		caps := map[string]runtime.Capabilities{
			"runsc": runtime.NewCapabilities(runtime.CapCheckpoint, runtime.CapFilesystemSnapshot),
			"runc":  te.runcCaps(),
		}
		c.svc.LifecycleSupport = func(sb model.Sandbox) (sandboxes.LifecycleSupport, bool) {
			cs, ok := caps[sb.Runtime]
			return sandboxes.LifecycleSupport{Pause: cs.Has(runtime.CapPause), Suspends: runtime.SuspendKinds(cs)}, ok
		}
	})
	keep := func(sb apiv1.Sandbox) string {
		if sb.TimeoutKeepMemory == nil {
			return "absent"
		}
		if *sb.TimeoutKeepMemory {
			return "true"
		}
		return "false"
	}
	for _, tc := range []struct{ body, want string }{
		{`{"timeout": 60, "on_timeout": "suspend", "timeout_keep_memory": false}`, "false"},
		{`{"timeout": 60, "on_timeout": "suspend", "timeout_keep_memory": true}`, "true"},
		{`{"timeout": 60, "on_timeout": "suspend"}`, "absent"},
	} {
		sb := e.createSandbox(e.keyA, tc.body).Sandbox
		if keep(sb) != tc.want {
			t.Fatalf("%s: timeout_keep_memory %s, want %s", tc.body, keep(sb), tc.want)
		}
		var got apiv1.Sandbox
		e.do("GET", "/v1/sandboxes/"+sb.ID, e.keyA, "").want(t, http.StatusOK).decode(t, &got)
		if keep(got) != tc.want {
			t.Fatalf("%s: GET shows timeout_keep_memory %s, want %s", tc.body, keep(got), tc.want)
		}
	}

	before := e.dump()
	for _, tc := range []struct {
		name, body string
		status     int
		code       string
		invalid    bool
		message    string
	}{
		{"with a delete", `{"timeout": 60, "on_timeout": "delete", "timeout_keep_memory": false}`, 400, apiv1.CodeInvalidRequest, false, "applies to on_timeout suspend"},
		{"with no on_timeout (delete)", `{"timeout": 60, "timeout_keep_memory": false}`, 400, apiv1.CodeInvalidRequest, false, "applies to on_timeout suspend"},
		{"null", `{"timeout": 60, "on_timeout": "suspend", "timeout_keep_memory": null}`, 400, apiv1.CodeInvalidRequest, true, ""},
		{"a runtime that cannot", `{"environment": "runc", "timeout": 60, "on_timeout": "suspend", "timeout_keep_memory": false}`, 501, apiv1.CodeNotSupported, false, "runs on runc, which cannot suspend"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ae apiv1.Error
			e.send(req{method: "POST", path: "/v1/sandboxes", key: e.keyA, body: tc.body, invalid: tc.invalid, t: t}).
				wantError(t, tc.status, tc.code).decode(t, &ae)
			if !strings.Contains(ae.Message, tc.message) {
				t.Errorf("message %q, want it to say %q", ae.Message, tc.message)
			}
		})
	}
	if after := e.dump(); after != before {
		t.Fatal("a refused create changed the store")
	}

	sb := e.createSandbox(e.keyA, `{"timeout": 60, "on_timeout": "suspend", "timeout_keep_memory": false}`).Sandbox
	path := "/v1/sandboxes/" + sb.ID + "/timeout"
	for _, step := range []struct{ body, on, want string }{
		{`{"timeout": 120}`, "suspend", "false"},                               // kept
		{`{"timeout": 120, "timeout_keep_memory": true}`, "suspend", "true"},   // changed
		{`{"timeout": 120, "on_timeout": "suspend"}`, "suspend", "absent"},     // a new on_timeout: the runtime's
		{`{"timeout": 120, "timeout_keep_memory": false}`, "suspend", "false"}, // set alone
		{`{"timeout": 120, "on_timeout": "delete"}`, "delete", "absent"},       // gone with the suspend
	} {
		var got apiv1.Sandbox
		e.do("POST", path, e.keyA, step.body).want(t, http.StatusOK).decode(t, &got)
		if got.OnTimeout != step.on || keep(got) != step.want {
			t.Fatalf("%s: on_timeout %s timeout_keep_memory %s, want %s %s", step.body, got.OnTimeout, keep(got), step.on, step.want)
		}
	}
	e.send(req{method: "POST", path: path, key: e.keyA, body: `{"timeout": 120, "timeout_keep_memory": false}`, t: t}).
		wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
}
