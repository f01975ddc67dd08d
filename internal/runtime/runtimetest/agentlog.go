package runtimetest

import (
	"context"
	"strings"
	"testing"
	"time"
)

// testAgentLogOutOfReach: once started, the agent's stdout and stderr (a
// host file the runtime connected) point at /dev/null, so a guest writing
// to /proc/1/fd/2 fills nothing on the host; the agent's log is in memory
// (GET /v1/logs) and never holds command arguments.
func testAgentLogOutOfReach(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	spec := s.spec(defaultResources, nil)
	s.started(t, rt, spec)
	c := client(t, rt, spec.ID)
	for _, fd := range []string{"1", "2"} {
		if got := strings.TrimSpace(sh(t, c, "readlink /proc/1/fd/"+fd)); got != "/dev/null" {
			t.Errorf("the agent's fd %s is %q inside the sandbox, want /dev/null", fd, got)
		}
	}
	if res := run(t, c, "sh", "-c", "head -c 1048576 /dev/zero > /proc/1/fd/2"); res.ExitCode != 0 {
		t.Fatalf("writing to the agent's stderr: %+v", res)
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
