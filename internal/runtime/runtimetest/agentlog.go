package runtimetest

import (
	"context"
	"strings"
	"testing"
	"time"
)

// testAgentLogOutOfReach: once started, the agent's stdout and stderr (a
// host file the runtime connected) point at /dev/null, and the agent is
// non-dumpable, so a guest can neither see nor write to /proc/1/fd/2 and
// fills nothing on the host; the agent's log is in memory (GET /v1/logs)
// and never holds command arguments.
func testAgentLogOutOfReach(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	spec := s.spec(defaultResources, nil)
	s.started(t, rt, spec)
	c := client(t, rt, spec.ID)
	for _, fd := range []string{"1", "2"} {
		res := run(t, c, "readlink", "/proc/1/fd/"+fd)
		if got := strings.TrimSpace(string(res.Stdout)); res.ExitCode == 0 && got != "/dev/null" {
			t.Errorf("the agent's fd %s is %q inside the sandbox, want /dev/null or out of reach", fd, got)
		}
	}
	if res := run(t, c, "sh", "-c", "head -c 1048576 /dev/zero > /proc/1/fd/2"); res.ExitCode == 0 {
		t.Errorf("a workload process could write to the agent's stderr")
	}
	run(t, c, "echo", "secret-argument-4711")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	logs, err := c.Logs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logs), "process started") {
		t.Fatalf("agent logs lack process starts:\n%s", logs)
	}
	if strings.Contains(string(logs), "secret-argument-4711") {
		t.Fatalf("agent logs hold a command's arguments:\n%s", logs)
	}
}
