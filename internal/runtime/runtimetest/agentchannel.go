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
//     virtio-serial ports (a VM, where each port opens once and the agent
//     holds them: EBUSY): every attempt must fail. (In a VM the workload
//     is root of its own kernel and can still trace the agent and take its
//     descriptors: what it learns or fakes there stays in its VM.);
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

	// A workload that connects in a loop (each connection refused) does
	// not keep the host out, though it slows the host's new connections
	// (they queue behind its own in the socket's backlog: measured 0.3 s
	// on runc and crun, up to 5 s under runsc, with 8 connecting loops).
	if !isVM(rt) {
		floodID := model.NewProcessID().String()
		if _, err := c.Start(ctx, agentproto.StartRequest{ID: floodID, Args: []string{"/" + syscallProbe, "agentflood", "/.airlock/run/agent.sock", "5"}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		var slowest time.Duration
		for range 5 {
			start := time.Now()
			fctx, fcancel := context.WithTimeout(context.Background(), scaled(20*time.Second))
			_, err := client(t, newRuntime(t), spec.ID).Info(fctx)
			fcancel()
			if err != nil {
				t.Errorf("a new host connection during the workload's connection flood: %v", err)
			}
			slowest = max(slowest, time.Since(start))
			time.Sleep(200 * time.Millisecond)
		}
		var flood []byte
		if out, err := c.Output(ctx, floodID, 0); err == nil {
			for {
				ev, err := out.Next()
				if err != nil || ev.Type == agentproto.EventExit {
					break
				}
				flood = append(flood, ev.Data...)
			}
			out.Close()
		}
		logs, _ := c.Logs(ctx)
		t.Logf("the workload %s; meanwhile the slowest new host connection took %v; agent log lines about the refusals: %d",
			strings.TrimSpace(string(flood)), slowest, strings.Count(string(logs), "refused connections"))
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
	// The agent sets a process's value right after its start: read it a
	// moment later, from the shell's own entry.
	scores := strings.Fields(sh(t, c, "sleep 0.2; cat /proc/1/oom_score_adj /proc/$$/oom_score_adj"))
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
	// A process started as another user gets it too (its /proc files
	// are that user's, which the agent reaches without CAP_DAC_OVERRIDE).
	uctx, ucancel := context.WithTimeout(context.Background(), opTimeout())
	defer ucancel()
	asUser, err := c.Run(uctx, agentproto.StartRequest{ID: model.NewProcessID().String(), User: &agentproto.User{UID: 1000, GID: 1000},
		Args: []string{"sh", "-c", "sleep 0.2; cat /proc/$$/oom_score_adj"}})
	if rtEmulatesOOMScore(rt) {
		t.Logf("oom_score_adj of a process started as uid 1000: %q (gVisor has no setfsuid; the value decides nothing there)", asUser.Stdout)
	} else if err != nil || strings.TrimSpace(string(asUser.Stdout)) != scores[1] {
		if logs, lerr := c.Logs(uctx); lerr == nil {
			for _, l := range lines(string(logs)) {
				if strings.Contains(l, "oom_score_adj") {
					t.Log(l)
				}
			}
		}
		t.Errorf("oom_score_adj of a process started as uid 1000: %q %q, %v; want %s", asUser.Stdout, asUser.Stderr, err, scores[1])
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

// testKernelMemoryOOMSparesAgent fills the sandbox's memory with kernel
// memory that no process's size shows (full pipes, like socket buffers):
// the OOM killer, which picks by size plus oom_score_adj, must take the
// workload process, not the agent (larger, so the choice before the
// workload's processes were started above the agent), and the sandbox must
// go on.
func testKernelMemoryOOMSparesAgent(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	if scope := rt.Info().OOMScope; scope != environment.OOMKillsProcess {
		t.Skipf("the OOM killer takes the whole sandbox here (%s), never the agent alone", scope)
	}
	res := defaultResources
	// Full pipes hold 64 KiB each up to the user's pipe-user-pages-soft
	// (64 MiB by default), one page each beyond: 96 MiB fills up (a VM
	// takes 128 MiB at least; its kernel uses more of it).
	res.MemoryBytes = 96 << 20
	if isVM(rt) {
		res.MemoryBytes = 128 << 20
	}
	spec := s.spec(res, nil)
	s.started(t, rt, spec)
	c := client(t, rt, spec.ID)
	sh(t, c, "echo warm")
	start := time.Now()
	got, err := tryRun(t, c, "/"+syscallProbe, "pipes")
	t.Logf("pipes: %+v, %v (%v)", got, err, time.Since(start))
	if err != nil {
		t.Fatalf("the agent did not survive the OOM kill: %v (state %+v)", err, mustStateAny(t, rt, spec.ID))
	}
	if got.Signal != "KILL" {
		t.Errorf("the pipe filler = %+v, want it OOM-killed", got)
	}
	mustState(t, rt, spec.ID, runtime.PhaseRunning)
	if out := sh(t, c, "echo still here"); out != "still here\n" {
		t.Fatalf("after the OOM kill: %q", out)
	}
}

// mustStateAny returns the sandbox's state, whatever it is.
func mustStateAny(t *testing.T, rt runtime.Runtime, id model.SandboxID) runtime.Status {
	t.Helper()
	st, err := rt.State(ctxFor(t), id)
	if err != nil {
		t.Logf("state: %v", err)
	}
	return st
}
