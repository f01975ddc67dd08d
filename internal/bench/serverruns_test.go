package bench

import (
	"io"
	"os"
	"strings"
	"testing"
)

func TestServerRunsCheck(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the benches' checks end with a root check")
	}
	for _, tc := range []struct {
		name  string
		check func() error
		want  string // error text; "" succeeds
	}{
		{"fork defaults", func() error {
			o := ForkOptions{ServerRuns: ServerRuns{AgentBinary: "/a"}}
			if err := o.check(); err != nil {
				return err
			}
			if o.Runs != 10 || o.Count != 2 || len(o.Runtimes) != 2 || o.TempDir == "" || o.Progress != io.Discard || o.ServerLog != io.Discard {
				t.Errorf("fork defaults: %+v", o)
			}
			return nil
		}, ""},
		{"lifecycle defaults", func() error {
			o := LifecycleOptions{ServerRuns{AgentBinary: "/a"}}
			if err := o.check(); err != nil {
				return err
			}
			if o.Runs != 20 || len(o.Runtimes) != 2 {
				t.Errorf("lifecycle defaults: %+v", o)
			}
			return nil
		}, ""},
		{"unknown runtime", func() error {
			o := LifecycleOptions{ServerRuns{AgentBinary: "/a", Runtimes: []string{"kata"}}}
			return o.check()
		}, `unknown OCI runtime "kata"`},
		{"negative warm-up", func() error {
			o := ForkOptions{ServerRuns: ServerRuns{AgentBinary: "/a", Warmup: -1}}
			return o.check()
		}, "warm-up runs (-1) not negative"},
		{"no agent", func() error {
			o := ForkOptions{}
			return o.check()
		}, "airlock-agent binary is required"},
		{"fork count over the bound", func() error {
			o := ForkOptions{ServerRuns: ServerRuns{AgentBinary: "/a"}, Count: 1000}
			return o.check()
		}, "bench:"},
		{"egress without agent", func() error {
			o := EgressOptions{AirlockBinary: "/x", ProbeBinary: "/y"}
			return o.check()
		}, "airlock-agent binary is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.check()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("check: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("check: %v, want an error with %q", err, tc.want)
			}
		})
	}
}
