package cli

import (
	"testing"

	"github.com/spf13/pflag"

	"github.com/airlockdev/airlock/internal/apiv1"
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
