package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// TestAgentChannelThroughCLI plays, through `airlock exec`, a workload
// against its agent: signals to PID 1 (SIGUSR1 once made the agent let go
// of its socket, SIGTERM stopped the sandbox) must leave exec working, and
// once the workload has filled its pids limit, a command the user starts
// counts against it: refused with "pids limit reached" (before, it started
// beside the workload, above the limit).
func TestAgentChannelThroughCLI(t *testing.T) {
	airtest.RequireRoot(t)
	bins := build(t)
	// runsc: the same holds at a limit of 24 (conformance case
	// PidsLimitCannotBeLifted); at the server's 1,024 the sandbox's agent
	// stops answering while the filler forks (so on the code before this
	// too): not a case for this test.
	for _, rt := range []string{"runc", "crun"} {
		t.Run(rt, func(t *testing.T) {
			airtest.RequireBinary(t, rt)
			s := newServer(t, bins, serverConfig{runtime: rt})
			s.start()
			ctx := ctxFor(t, 4*time.Minute)
			sb := createSandbox(ctx, t, s.client(), apiv1.CreateSandboxRequest{})

			flood := `for i in $(seq 10); do for s in USR1 USR2 TERM INT HUP; do kill -$s 1; done; sleep 0.1; done; echo sent`
			if stdout, stderr, code := s.cli(ctx, "exec", sb.ID, "--", "sh", "-c", flood); code != 0 || stdout != "sent\n" {
				t.Fatalf("signals to PID 1: exit %d, %q, %q", code, stdout, stderr)
			}
			if stdout, stderr, code := s.cli(ctx, "exec", sb.ID, "--", "echo", "still"); code != 0 || stdout != "still\n" {
				t.Fatalf("exec after the signals: exit %d, %q, %q", code, stdout, stderr)
			}

			// The filler forks sleeps until a fork fails (the shell then
			// exits, freeing its slot); the user's background sleeps take
			// what is left, until one is refused.
			stdout, stderr, code := s.cli(ctx, "exec", "-d", sb.ID, "--", "sh", "-c", "while :; do sleep 600 & done")
			if code != 0 {
				t.Fatalf("exec -d the filler: exit %d, %s", code, stderr)
			}
			filler := model.ProcessID(strings.TrimSpace(stdout))
			for {
				p, err := s.client().GetProcess(ctx, model.SandboxID(sb.ID), filler, 30*time.Second)
				if err != nil {
					got, gerr := s.client().GetSandbox(ctx, model.SandboxID(sb.ID))
					t.Fatalf("wait for the filler: %v (sandbox: %+v, %v)", err, got, gerr)
				}
				if !p.Running {
					break
				}
			}
			refused := ""
			for i := 0; i < 50 && refused == ""; i++ {
				_, stderr, code := s.cli(ctx, "exec", "-d", sb.ID, "--", "sleep", "600")
				switch {
				case code != 0 && strings.Contains(stderr, "pids limit reached"):
					refused = stderr
				case code != 0:
					t.Fatalf("exec -d sleep: exit %d, %s", code, stderr)
				}
			}
			if refused == "" {
				t.Fatal("50 commands started beside a workload that had filled its pids limit")
			}
			t.Logf("refused: %s", strings.TrimSpace(refused))
			stdout, stderr, code = s.cli(ctx, "exec", sb.ID, "--", "true")
			if code != 127 || !strings.Contains(stderr, "pids limit reached") {
				t.Fatalf("exec true while the workload is full: exit %d, %q, %q; want 127 and pids limit reached", code, stdout, stderr)
			}
		})
	}
}
