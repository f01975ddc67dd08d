package runtimetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agent"
	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

// testAgentOutOfWorkloadReach plays a hostile workload (root, with the
// sandbox's capabilities) against its own agent: it must not be able to
// trace it or read its memory, environment or descriptors, nor remove,
// replace or hide the agent's socket; and a restarted server must still
// reach the agent afterwards.
func testAgentOutOfWorkloadReach(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	spec := s.spec(defaultResources, nil)
	s.started(t, rt, spec)
	c := client(t, rt, spec.ID)

	out := sh(t, c, "/"+syscallProbe+" agent 1")
	var reached []string
	for _, l := range lines(out) {
		if strings.HasSuffix(l, ": ok") {
			reached = append(reached, strings.TrimSuffix(l, ": ok"))
		}
	}
	if len(reached) > 0 || len(lines(out)) < 7 {
		t.Errorf("a workload process reached into the agent (pid 1): %q\n%s", reached, out)
	}

	// Neither the workload nor the agent keeps what the agent needed to
	// seal the sandbox (CAP_SYS_ADMIN 21, CAP_SETPCAP 8), in any set.
	for _, pid := range []string{"self", "1"} {
		res := run(t, c, "grep", "^Cap", "/proc/"+pid+"/status")
		for _, l := range lines(string(res.Stdout)) {
			name, hex, _ := strings.Cut(l, ":")
			v, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			if err != nil {
				t.Errorf("/proc/%s/status: %q: %v", pid, l, err)
				continue
			}
			if v&(1<<21|1<<8) != 0 {
				t.Errorf("/proc/%s/status: %s = %#x holds CAP_SYS_ADMIN or CAP_SETPCAP", pid, name, v)
			}
		}
		if pid == "self" && !strings.Contains(string(res.Stdout), "CapBnd") {
			t.Errorf("/proc/self/status has no CapBnd: %q", res.Stdout)
		}
	}

	for _, script := range []string{
		"rm -f /.airlock/run/agent.sock",
		"mv /.airlock/run/agent.sock /.airlock/run/moved",
		"mv /.airlock/run /.airlock/run-moved",
		"rm -rf /.airlock/run",
		"touch /.airlock/run/planted",
		"ln -s /tmp /.airlock/run/planted-link",
		"chmod 0 /.airlock/run/agent.sock",
		"chmod 0 /.airlock/run",
		"umount -l /.airlock/run",
		"mount -t tmpfs tmpfs /.airlock/run",
		"mkdir /tmp/x && mount --bind /tmp/x /.airlock/run",
		// A new user and mount namespace (gVisor has no seccomp filter to
		// refuse them) gives CAP_SYS_ADMIN over a copy of the mounts: the
		// read-only one must not come off to reveal the writable one below.
		// (Measured on runsc: unshare works, umount and remount get EPERM.)
		"unshare -U -m umount -l /.airlock/run",
		"unshare -U -m mount -o remount,bind,rw /.airlock/run",
	} {
		res := run(t, c, "sh", "-c", script)
		if res.ExitCode == 0 {
			t.Errorf("the workload could %q in the agent's run directory", script)
		}
	}
	// The owner of the directory and the socket (root can become any
	// user with CAP_SETUID) can do no more.
	owners := strings.Fields(sh(t, c, "stat -c '%u:%g' /.airlock/run /.airlock/run/agent.sock"))
	for _, owner := range owners {
		var u agentproto.User
		if _, err := fmt.Sscanf(owner, "%d:%d", &u.UID, &u.GID); err != nil {
			t.Fatalf("owner %q: %v", owner, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout())
		res, err := c.Run(ctx, agentproto.StartRequest{ID: model.NewProcessID().String(), User: &u,
			Args: []string{"sh", "-c", "rm -f /.airlock/run/agent.sock || chmod 0 /.airlock/run/agent.sock"}})
		cancel()
		if err != nil || res.ExitCode == 0 {
			t.Errorf("as %s, the workload could remove or chmod the agent's socket (%v)", owner, err)
		}
	}
	if got := sh(t, c, "ls -la /.airlock/run/"); !strings.Contains(got, "agent.sock") || strings.Contains(got, "planted") {
		t.Errorf("the agent's run directory changed:\n%s", got)
	}

	// A restarted server (a fresh runtime value) dials the socket anew.
	c2 := client(t, newRuntime(t), spec.ID)
	if got := sh(t, c2, "echo reached"); got != "reached\n" {
		t.Fatalf("after the attempts, a new connection to the agent: %q", got)
	}
}

// testPidsLimitCannotBeLifted plays a workload that tries to lift its own
// pids limit (raise every pids.max it can find, move itself into every
// cgroup, create a new one, unmount or remount the cgroup filesystems)
// and then forks far beyond the limit, going on after failures: every
// attempt must fail, no more processes than the limit may run, and the
// agent must stay reachable and start commands.
func testPidsLimitCannotBeLifted(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	res := defaultResources
	res.PidsLimit = 24
	spec := s.spec(res, nil)
	s.started(t, rt, spec)
	c := client(t, rt, spec.ID)

	// The shell ends by exec'ing the forker: it stays in whatever cgroup
	// the shell got itself into.
	attack := `
for f in $(find /sys/fs/cgroup -name pids.max 2>/dev/null); do
	if echo max > "$f" 2>/dev/null; then echo "raised $f"; fi
done
for f in $(find /sys/fs/cgroup -name cgroup.procs -o -name tasks 2>/dev/null | sort); do
	if echo $$ > "$f" 2>/dev/null; then echo "joined $f"; fi
done
for d in $(find /sys/fs/cgroup -type d 2>/dev/null); do
	# A directory on a tmpfs (crun's /sys/fs/cgroup) is harmless; a cgroup is not.
	if mkdir "$d/airlock-escape" 2>/dev/null && [ -e "$d/airlock-escape/cgroup.procs" ]; then echo "created cgroup $d/airlock-escape"; fi
done
for m in /sys/fs/cgroup/pids /sys/fs/cgroup; do
	if umount -l $m 2>/dev/null; then echo "unmounted $m"; fi
	if unshare -U -m umount -l $m 2>/dev/null; then echo "unmounted $m in a new user namespace"; fi
	if unshare -U -m mount -o remount,bind,rw $m 2>/dev/null; then echo "remounted $m in a new user namespace"; fi
done
exec /` + syscallProbe + ` fork 300 hold
`
	// The forker holds its place for 20 s after its forks: the workload
	// stays full meanwhile.
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout())
	defer cancel()
	bombID := model.NewProcessID().String()
	if _, err := c.Start(ctx, agentproto.StartRequest{ID: bombID, Args: []string{"sh", "-c", attack}}); err != nil {
		t.Fatal(err)
	}
	out, err := c.Output(ctx, bombID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var bomb agentclient.RunResult
	for !strings.Contains(string(bomb.Stdout), "started") {
		ev, err := out.Next()
		if err != nil {
			t.Fatalf("the fork bomb's output: %v (stdout %q, stderr %q)", err, bomb.Stdout, bomb.Stderr)
		}
		switch ev.Type {
		case agentproto.EventStdout:
			bomb.Stdout = append(bomb.Stdout, ev.Data...)
		case agentproto.EventStderr:
			bomb.Stderr = append(bomb.Stderr, ev.Data...)
		case agentproto.EventExit:
			t.Fatalf("the fork bomb exited early: %+v (stdout %q, stderr %q)", ev, bomb.Stdout, bomb.Stderr)
		}
	}
	out.Close()
	var started, failed int
	for _, l := range lines(string(bomb.Stdout)) {
		if _, err := fmt.Sscanf(l, "started %d failed %d", &started, &failed); err != nil {
			t.Errorf("the workload could lift its limit: %s", l)
		}
	}
	t.Logf("fork bomb: %d sleeps started, %d forks failed, with a pids limit of %d", started, failed, res.PidsLimit)
	// The forker itself (its threads) is part of the limit.
	if failed == 0 || int64(started) >= res.PidsLimit {
		t.Errorf("forks beyond the limit did not fail inside: %d started, %d failed, limit %d\nstdout: %s\nstderr: %.2000s",
			started, failed, res.PidsLimit, bomb.Stdout, bomb.Stderr)
	}
	mustState(t, rt, spec.ID, runtime.PhaseRunning)

	// The workload is full (for 20 s): a new connection must reach the
	// agent at once (it is outside the workload's limit), and a command
	// the host starts counts against the limit like any other: refused
	// with a clear error, not started beside the workload (a move into a
	// cgroup is not checked against its pids.max: before, the agent's
	// helper forked outside and joined, and the workload went over).
	start := time.Now()
	ictx, icancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer icancel()
	if _, err := client(t, newRuntime(t), spec.ID).Info(ictx); err != nil {
		t.Fatalf("a new connection to the agent beside the full workload: %v", err)
	}
	t.Logf("a new connection reached the agent in %v", time.Since(start))
	start = time.Now()
	echo, err := tryRun(t, c, "echo", "beside")
	t.Logf("a command beside the full workload: %q, %v (%v)", echo.Stdout, err, time.Since(start))
	var aerr *agentclient.Error
	if !errors.As(err, &aerr) || aerr.Code != agentproto.CodeExecFailed || !strings.Contains(aerr.Message, "pids limit reached") {
		t.Errorf("a command started beside the full workload: %+v, %v; want exec_failed \"pids limit reached\"", echo, err)
	}
	if cg := inspector(t, rt).Artifacts(spec.ID).Cgroup; cg != "" && rt.Info().Isolation == environment.IsolationSharedKernel {
		workload, jerr := cg.Join(agent.DefaultWorkloadCgroup)
		if jerr != nil {
			t.Fatal(jerr)
		}
		cur, cerr := s.cgroups.PidsCurrent(workload)
		t.Logf("the workload cgroup after the refused command: pids.current %d (%v)", cur, cerr)
		if cerr == nil && cur > res.PidsLimit {
			t.Errorf("the workload cgroup holds %d tasks with a limit of %d", cur, res.PidsLimit)
		}
	}
	// The agent starts commands once the forker is gone (it would hold its
	// place for 20 s: it is killed now that the full workload's checks are
	// done; the sleeps it started, in its place in the limit, run on), and
	// the sleeps stayed within the limit. Only shell built-ins count them:
	// no fork.
	if err := c.Signal(ctx, bombID, "KILL"); err != nil {
		t.Fatalf("kill the forker: %v", err)
	}
	count := `n=0; for f in /proc/[0-9]*/comm; do read c < "$f" 2>/dev/null && [ "$c" = sleep ] && n=$((n+1)); done; echo $n`
	var sleeps int
	waitFor(t, 60*time.Second, "the agent to start a command after the fork bomb", func() (bool, string) {
		r, err := tryRun(t, c, "sh", "-c", count)
		if err != nil || r.ExitCode != 0 {
			return false, fmt.Sprintf("%v %+v %s", err, r, r.Stderr)
		}
		sleeps, err = strconv.Atoi(strings.TrimSpace(string(r.Stdout)))
		return err == nil, string(r.Stdout)
	})
	t.Logf("%d sleeps running; the agent started a command after %v", sleeps, time.Since(start))
	if int64(sleeps) >= res.PidsLimit {
		t.Errorf("%d sleeps running with a pids limit of %d", sleeps, res.PidsLimit)
	}
	mustState(t, rt, spec.ID, runtime.PhaseRunning)
}
