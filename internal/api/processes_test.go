package api

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// The process routes go through the management API to the sandbox's agent:
// a background command runs without an attach, it is listed, waited for,
// signalled; bad input and other projects get clear errors.
func TestProcessRoutes(t *testing.T) {
	t.Parallel()
	f := newFilesEnv(t)
	sb := f.createSandbox(f.keyA, `{}`).Sandbox.ID
	// Not running yet: 409.
	f.do("GET", "/v1/sandboxes/"+sb+"/processes", f.keyA, "").wantError(t, http.StatusConflict, apiv1.CodeSandboxNotRunning)
	f.finishCreate(model.SandboxID(sb))

	var cs apiv1.CommandSession
	f.do("POST", "/v1/sandboxes/"+sb+"/commands", f.keyA, `{"args":["sleep","30"],"background":true}`).want(t, http.StatusCreated).decode(t, &cs)
	if !strings.HasPrefix(cs.WebSocketURL, "ws://") {
		t.Fatalf("websocket_url %q", cs.WebSocketURL)
	}
	var list apiv1.ProcessList
	f.do("GET", "/v1/sandboxes/"+sb+"/processes", f.keyA, "").want(t, http.StatusOK).decode(t, &list)
	if len(list.Processes) != 1 || list.Processes[0].ID != cs.ProcessID || !list.Processes[0].Running {
		t.Fatalf("list %+v", list)
	}
	base := "/v1/sandboxes/" + sb + "/processes/" + cs.ProcessID
	// Waiting on a running process answers its state when the wait elapses.
	start := time.Now()
	var p apiv1.Process
	f.do("GET", base+"?wait=200ms", f.keyA, "").want(t, http.StatusOK).decode(t, &p)
	if !p.Running || time.Since(start) < 150*time.Millisecond {
		t.Fatalf("wait on a running process: %+v after %v", p, time.Since(start))
	}
	// Bad signals and bodies are refused before anything is sent.
	bad := func(method, path, body string) *resp {
		return f.testEnv.send(req{method: method, path: path, key: f.keyA, body: body, invalid: true})
	}
	for _, body := range []string{`{"signal":""}`, `{}`, `{"signal":"KILL","x":1}`} {
		bad("POST", base+"/signal", body).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	}
	for _, body := range []string{`{"signal":"NOPE"}`, `{"signal":"0"}`, `{"signal":"65"}`} {
		f.do("POST", base+"/signal", f.keyA, body).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	}
	bad("GET", base+"?wait=forever", "").wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	bad("GET", "/v1/sandboxes/"+sb+"/processes/proc_x", "").wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	// Another project sees no such sandbox.
	f.do("GET", base, f.keyB, "").wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
	f.do("POST", base+"/signal", f.keyB, `{"signal":"KILL"}`).wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
	// An unknown process of this sandbox.
	f.do("GET", "/v1/sandboxes/"+sb+"/processes/"+model.NewProcessID().String(), f.keyA, "").wantError(t, http.StatusNotFound, apiv1.CodeProcessNotFound)

	f.do("POST", base+"/signal", f.keyA, `{"signal":"SIGTERM"}`).want(t, http.StatusOK).decode(t, &p)
	f.do("GET", base+"?wait=10s", f.keyA, "").want(t, http.StatusOK).decode(t, &p)
	if p.Running || p.Signal != "TERM" || p.ExitCode == nil || *p.ExitCode != -1 {
		t.Fatalf("after SIGTERM: %+v", p)
	}
	// Signalling an exited process is a conflict.
	f.do("POST", base+"/signal", f.keyA, `{"signal":"KILL"}`).wantError(t, http.StatusConflict, apiv1.CodeProcessExited)
	// A background command that cannot start gets exec_failed.
	f.do("POST", "/v1/sandboxes/"+sb+"/commands", f.keyA, `{"args":["/no/such/program"],"background":true}`).wantError(t, http.StatusBadRequest, apiv1.CodeExecFailed)
	// Bad process options.
	for _, body := range []string{
		`{"args":["true"],"pty":{"rows":0,"cols":80}}`,
		`{"args":["true"],"user":{"uid":-1,"gid":0}}`,
		`{"args":["true"],"timeout_secs":-1}`,
		`{"args":["true"],"timeout_secs":604801}`,
	} {
		bad("POST", "/v1/sandboxes/"+sb+"/commands", body).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	}
}
