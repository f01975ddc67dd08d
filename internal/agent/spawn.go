package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// SpawnCommand is the first argument with which the agent re-executes itself
// to start a process inside the workload cgroup:
//
//	/proc/self/exe __spawn CGROUP-DIR PATH -- ARGV0 ARGS…
//
// The helper writes its own pid into CGROUP-DIR/cgroup.procs and then
// execve's PATH with ARGV, so the process (and everything it forks) is in
// the cgroup from its first instruction. A program that embeds the agent's
// Server with a cgroup must dispatch this argument to SpawnMain (the
// airlock-agent binary does; tests can in TestMain).
const SpawnCommand = "__spawn"

// spawnStatusFD is the descriptor on which the helper reports a failure
// before execve. It is close-on-exec, so EOF without data means the execve
// succeeded.
const spawnStatusFD = 3

// Prefixes of the helper's failure reports.
const (
	spawnFailCgroup = "cgroup: "
	spawnFailExec   = "exec: "
)

// spawnArgs returns the helper's arguments (after the helper path).
func spawnArgs(cgroupDir, path string, argv []string) []string {
	return append([]string{SpawnCommand, cgroupDir, path, "--"}, argv...)
}

// SpawnMain runs the spawn helper with the arguments that follow
// SpawnCommand. It only returns (with exit status 127) if it fails.
func SpawnMain(args []string) int {
	fail := func(prefix string, err error) int {
		msg := prefix + err.Error()
		if _, werr := unix.Write(spawnStatusFD, []byte(msg)); werr != nil {
			fmt.Fprintln(os.Stderr, "airlock-agent "+SpawnCommand+": "+msg)
		}
		return 127
	}
	if len(args) < 4 || args[2] != "--" {
		return fail(spawnFailExec, fmt.Errorf("usage: %s CGROUP-DIR PATH -- ARGV0 [ARGS…]", SpawnCommand))
	}
	dir, path, argv := args[0], args[1], args[3:]
	unix.CloseOnExec(spawnStatusFD)
	procs := filepath.Join(dir, "cgroup.procs")
	if err := os.WriteFile(procs, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return fail(spawnFailCgroup, fmt.Errorf("join %s: %w", dir, err))
	}
	err := syscall.Exec(path, argv, os.Environ())
	return fail(spawnFailExec, fmt.Errorf("%s: %w", path, err))
}
