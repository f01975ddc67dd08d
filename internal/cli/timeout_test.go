package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

func TestTimeoutFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		timeout int64
		on      string
		idle    *int64
		bad     bool
	}{
		{name: "none"},
		{name: "deadline", args: []string{"--sandbox-timeout", "2h"}, timeout: 7200},
		{name: "deadline and suspend", args: []string{"--sandbox-timeout", "90s", "--on-timeout", "suspend"}, timeout: 90, on: "suspend"},
		{name: "idle", args: []string{"--idle-timeout", "30m"}, idle: ptr(int64(1800))},
		{name: "idle never", args: []string{"--idle-timeout", "0"}, idle: ptr(int64(0))},
		{name: "fractional seconds", args: []string{"--sandbox-timeout", "1500ms"}, bad: true},
		{name: "negative idle", args: []string{"--idle-timeout", "-1s"}, bad: true},
		{name: "unknown action", args: []string{"--sandbox-timeout", "1m", "--on-timeout", "hibernate"}, bad: true},
		{name: "action without deadline", args: []string{"--on-timeout", "suspend"}, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f timeoutFlags
			fs := pflag.NewFlagSet("create", pflag.ContinueOnError)
			f.register(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			var req apiv1.CreateSandboxRequest
			err := f.apply(&req)
			if tc.bad {
				if err == nil {
					t.Fatalf("accepted: %+v", req)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if req.Timeout != tc.timeout || req.OnTimeout != tc.on || (req.IdleTimeout == nil) != (tc.idle == nil) ||
				req.IdleTimeout != nil && *req.IdleTimeout != *tc.idle {
				t.Fatalf("request %+v (idle %v), want timeout %d on %q idle %v", req, req.IdleTimeout, tc.timeout, tc.on, tc.idle)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestSandboxTimeoutCommand: `airlock sandbox timeout` sends the deadline in
// seconds and on_timeout only when given, and prints the sandbox.
func TestSandboxTimeoutCommand(t *testing.T) {
	id := model.NewSandboxID().String()
	var got []apiv1.SetTimeoutRequest
	var raw []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/sandboxes/"+id+"/timeout" {
			writeJSON(w, 404, apiv1.Error{Code: apiv1.CodeNotFound, Message: "no route"})
			return
		}
		b, _ := io.ReadAll(r.Body)
		raw = append(raw, string(b))
		var req apiv1.SetTimeoutRequest
		if err := json.Unmarshal(b, &req); err != nil {
			writeJSON(w, 400, apiv1.Error{Code: apiv1.CodeInvalidRequest, Message: err.Error()})
			return
		}
		got = append(got, req)
		at := fixedTime.Add(time.Duration(req.Timeout) * time.Second)
		writeJSON(w, 200, apiv1.Sandbox{ID: id, State: "running", TimeoutAt: &at, OnTimeout: cmp.Or(req.OnTimeout, "delete"), IdleTimeout: 60})
	}))
	t.Cleanup(srv.Close)
	cli := func(args ...string) (int, string, string) {
		return runCLI(context.Background(), nil, append([]string{"--url", srv.URL, "--api-key", "k"}, args...)...)
	}
	code, stdout, stderr := cli("sandbox", "timeout", id, "90m")
	if code != 0 || !strings.Contains(stdout, "Deadline:") || !strings.Contains(stdout, "(then delete)") || !strings.Contains(stdout, "Idle:      1m0s") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, _, stderr = cli("sandbox", "timeout", "--on-timeout", "suspend", id, "0")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if len(got) != 2 || got[0].Timeout != 5400 || got[0].OnTimeout != "" || got[1].Timeout != 0 || got[1].OnTimeout != "suspend" ||
		strings.Contains(raw[0], "on_timeout") || !strings.Contains(raw[1], `"timeout":0`) {
		t.Fatalf("requests %+v (%q)", got, raw)
	}
	for _, bad := range [][]string{
		{"sandbox", "timeout", id, "1.5s"},
		{"sandbox", "timeout", id, "-1m"},
		{"sandbox", "timeout", id, "soon"},
		{"sandbox", "timeout", "--on-timeout", "later", id, "1m"},
		{"sandbox", "timeout", "sbx_nope", "1m"},
	} {
		if code, _, _ := cli(bad...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage)", bad, code)
		}
	}
	if len(got) != 2 {
		t.Fatalf("a refused command reached the server: %+v", got)
	}
}
