package runtimetest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

// testAgentChannelHostOnly plays a workload (root, with the sandbox's
// capabilities) against its agent's channel, with a command of the host's
// running beside it:
//
//   - it speaks the agent protocol to the agent's socket (runc, crun,
//     runsc) as the host would — info, list (which would show the host's
//     command and its arguments), start, release — or opens the agent's
//     virtio-serial ports (a VM): every attempt must fail;
//   - it sends PID 1 every signal the agent once acted on (USR1 released
//     the socket, TERM and INT stopped the agent), again and again: the
//     host's connection and a new one must still start commands at once;
//   - the agent's oom_score_adj must be lower than a workload process's,
//     which must not be able to go below it (on a shared kernel).
func testAgentChannelHostOnly(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	spec := s.spec(defaultResources, nil)
	s.started(t, rt, spec)
	c := client(t, rt, spec.ID)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout())
	defer cancel()
	hostCmd := model.NewProcessID().String()
	if _, err := c.Start(ctx, agentproto.StartRequest{ID: hostCmd, Args: []string{"sleep", "299"}}); err != nil {
		t.Fatal(err)
	}

	probe := "/" + syscallProbe + " agentsock " + "/.airlock/run/agent.sock"
	if isVM(rt) {
		probe = "/" + syscallProbe + " vports"
	}
	out := sh(t, c, probe)
	t.Logf("%s:\n%s", probe, out)
	for _, l := range lines(out) {
		if strings.HasSuffix(l, ": ok") {
			t.Errorf("the workload reached the agent's channel: %s", l)
		}
	}
	if !isVM(rt) && len(lines(out)) != 4 {
		t.Errorf("the probe reported %d attempts, want 4:\n%s", len(lines(out)), out)
	}

	// Signals to PID 1, as root, repeatedly; the script ends by itself.
	const rounds = 10
	flood := `for i in $(seq ` + strconv.Itoa(rounds) + `); do for s in USR1 USR2 TERM INT HUP; do kill -$s 1; done; sleep 0.1; done; echo sent`
	res, err := tryRun(t, c, "sh", "-c", flood)
	if err != nil || string(res.Stdout) != "sent\n" {
		t.Errorf("signals to PID 1: %q %q, %v", res.Stdout, res.Stderr, err)
	}
	mustState(t, rt, spec.ID, runtime.PhaseRunning)
	if got, err := tryRun(t, c, "echo", "still"); err != nil || string(got.Stdout) != "still\n" {
		t.Errorf("after the signals, the host's connection: %q, %v", got.Stdout, err)
	}
	start := time.Now()
	ictx, icancel := context.WithTimeout(context.Background(), scaled(10*time.Second))
	defer icancel()
	fresh := client(t, newRuntime(t), spec.ID)
	if _, err := fresh.Info(ictx); err != nil {
		t.Errorf("after the signals, a new connection: %v", err)
	} else {
		t.Logf("a new connection after the signals took %v", time.Since(start))
	}
	if st, err := c.Status(ctx, hostCmd); err != nil || !st.Running {
		t.Errorf("the host's command after the signals: %+v, %v", st, err)
	}

	if isVM(rt) {
		// The agent is the VM's init, which the kernel never OOM-kills;
		// the guest's root holds CAP_SYS_RESOURCE in its own kernel.
		return
	}
	scores := strings.Fields(sh(t, c, "cat /proc/1/oom_score_adj /proc/self/oom_score_adj"))
	if len(scores) != 2 {
		t.Fatalf("oom_score_adj of the agent and a workload process: %q", scores)
	}
	agentAdj, err1 := strconv.Atoi(scores[0])
	workAdj, err2 := strconv.Atoi(scores[1])
	if err1 != nil || err2 != nil {
		t.Fatalf("oom_score_adj: %q", scores)
	}
	t.Logf("oom_score_adj: agent %d, workload process %d", agentAdj, workAdj)
	if workAdj <= agentAdj {
		t.Errorf("a workload process's oom_score_adj %d is not above the agent's %d: the OOM killer may take the agent first", workAdj, agentAdj)
	}
	below := strconv.Itoa(agentAdj - 1)
	lower := run(t, c, "sh", "-c", "echo "+below+" > /proc/self/oom_score_adj && cat /proc/self/oom_score_adj")
	t.Logf("lowering a workload process to %s: exit %d, %q %q", below, lower.ExitCode, lower.Stdout, lower.Stderr)
	if lower.ExitCode == 0 && strings.TrimSpace(string(lower.Stdout)) == below && !rtEmulatesOOMScore(rt) {
		t.Errorf("a workload process lowered its oom_score_adj below the agent's (%d): %q", agentAdj, lower.Stdout)
	}
}

// rtEmulatesOOMScore reports whether the runtime's guest kernel is an
// emulation that keeps oom_score_adj as a number only (gVisor: the host
// OOM-kills the whole sandbox, never one guest process), where lowering it
// gives nothing.
func rtEmulatesOOMScore(rt runtime.Runtime) bool {
	return rt.Info().Isolation == environment.IsolationUserSpaceKernel
}
