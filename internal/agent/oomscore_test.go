package agent_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agent"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/model"
)

// TestWorkloadOOMScoreAdj: every process the agent starts gets
// WorkloadOOMScoreAdj, as the agent's user or another (whose /proc files
// the agent reaches through setfsuid); 0 leaves it what the agent has.
func TestWorkloadOOMScoreAdj(t *testing.T) {
	airtest.RequireRoot(t)
	for _, tc := range []struct {
		name string
		adj  int
		user *agentproto.User
		want string
	}{
		{"agent's user", 300, nil, "300"},
		{"another user", 300, &agentproto.User{UID: 65534, GID: 65534}, "300"},
		{"off", 0, nil, ""}, // the agent's (this test's) value
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := agent.New(agent.Options{Env: []string{"PATH=/usr/bin:/bin"}, WorkloadOOMScoreAdj: tc.adj})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Close() })
			c := pipeClient(t, srv)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// The value is set right after the start: read it a moment later.
			res, err := c.Run(ctx, agentproto.StartRequest{ID: model.NewProcessID().String(), User: tc.user,
				Args: []string{"sh", "-c", "sleep 0.2; cat /proc/$$/oom_score_adj /proc/" + strconv.Itoa(os.Getpid()) + "/oom_score_adj"}})
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("%+v, %v", res, err)
			}
			got := strings.Fields(string(res.Stdout))
			if len(got) != 2 {
				t.Fatalf("output %q", res.Stdout)
			}
			want := tc.want
			if want == "" {
				want = got[1]
			}
			if got[0] != want {
				t.Fatalf("oom_score_adj = %s, want %s (the agent's: %s)", got[0], want, got[1])
			}
		})
	}
}
