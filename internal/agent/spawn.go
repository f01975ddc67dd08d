package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/agentproto"
)

// SpawnCommand is the first argument with which the agent re-executes itself
// to start a process inside the workload cgroup:
//
//	/proc/self/exe __spawn CGROUP PATH [UID:GID] -- ARGV0 ARGS…
//
// The helper writes its own pid into the cgroup — CGROUP is "fd:N" for an
// inherited descriptor N of the cgroup's cgroup.procs (the agent's way: its
// cgroup mounts may be read-only for everyone by then), "fd:N:C:M" with
// descriptors C and M of its pids.current and pids.max as well, or a cgroup
// directory. With C and M it then checks that the cgroup is within its
// limit, counting itself (a move is not checked against pids.max, and the
// workload may have forked since the agent looked), and fails if not. It
// takes the user and group IDs if given (after joining: an
// unprivileged user could not) and then execve's PATH with ARGV, so the
// process (and everything it forks) is in the cgroup from its first
// instruction. The descriptor gives nothing to a workload that reopens it
// through /proc: it can only join the workload cgroup. A program that
// embeds the agent's Server with a cgroup must dispatch this argument to
// SpawnMain (the airlock-agent binary does; tests can in TestMain).
const SpawnCommand = "__spawn"

// spawnStatusFD is the descriptor on which the helper reports a failure
// before execve. It is close-on-exec, so EOF without data means the execve
// succeeded.
const spawnStatusFD = 3

// spawnCgroupArg is the CGROUP argument the agent gives the helper: the
// workload cgroup's cgroup.procs is its descriptor 4; spawnCgroupCheckArg
// adds pids.current and pids.max as 5 and 6.
const (
	spawnCgroupArg      = "fd:4"
	spawnCgroupCheckArg = "fd:4:5:6"
)

// Prefixes of the helper's failure reports.
const (
	spawnFailCgroup = "cgroup: "
	spawnFailExec   = "exec: "
	spawnFailPids   = "pids: " // the cgroup was over its limit once joined
)

// spawnArgs returns the helper's arguments (after the helper path).
func spawnArgs(cgroupDir, path string, user *agentproto.User, argv []string) []string {
	args := []string{SpawnCommand, cgroupDir, path}
	if user != nil {
		args = append(args, fmt.Sprintf("%d:%d", user.UID, user.GID))
	}
	return append(append(args, "--"), argv...)
}

// parseSpawnUser parses the helper's UID:GID argument.
func parseSpawnUser(s string) (uid, gid int, err error) {
	u, g, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, fmt.Errorf("user %q: want UID:GID", s)
	}
	uid, err = strconv.Atoi(u)
	if err != nil || uid < 0 {
		return 0, 0, fmt.Errorf("user %q: bad UID", s)
	}
	gid, err = strconv.Atoi(g)
	if err != nil || gid < 0 {
		return 0, 0, fmt.Errorf("user %q: bad GID", s)
	}
	return uid, gid, nil
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
	usage := fmt.Errorf("usage: %s CGROUP-DIR PATH [UID:GID] -- ARGV0 [ARGS…]", SpawnCommand)
	if len(args) < 4 {
		return fail(spawnFailExec, usage)
	}
	dir, path, rest := args[0], args[1], args[2:]
	user := ""
	if rest[0] != "--" {
		user, rest = rest[0], rest[1:]
	}
	if len(rest) < 2 || rest[0] != "--" {
		return fail(spawnFailExec, usage)
	}
	argv := rest[1:]
	unix.CloseOnExec(spawnStatusFD)
	if err := joinCgroup(dir); errors.Is(err, ErrPidsLimit) {
		return fail(spawnFailPids, err)
	} else if err != nil {
		return fail(spawnFailCgroup, err)
	}
	if user != "" {
		uid, gid, err := parseSpawnUser(user)
		if err != nil {
			return fail(spawnFailExec, err)
		}
		if err := syscall.Setgroups(nil); err != nil {
			return fail(spawnFailExec, fmt.Errorf("setgroups: %w", err))
		}
		if err := syscall.Setgid(gid); err != nil {
			return fail(spawnFailExec, fmt.Errorf("setgid %d: %w", gid, err))
		}
		if err := syscall.Setuid(uid); err != nil {
			return fail(spawnFailExec, fmt.Errorf("setuid %d: %w", uid, err))
		}
	}
	err := syscall.Exec(path, argv, os.Environ())
	return fail(spawnFailExec, fmt.Errorf("%s: %w", path, err))
}

// joinCgroup moves this process into the cgroup named by the helper's
// CGROUP argument and closes the descriptors it names; with pids counters
// it fails with ErrPidsLimit if the cgroup, joined, is over its limit.
func joinCgroup(arg string) error {
	pid := []byte(strconv.Itoa(os.Getpid()))
	if n, ok := strings.CutPrefix(arg, "fd:"); ok {
		var fds []int
		for _, f := range strings.Split(n, ":") {
			fd, err := strconv.Atoi(f)
			if err != nil || fd <= spawnStatusFD {
				return fmt.Errorf("bad cgroup descriptor %q", arg)
			}
			fds = append(fds, fd)
		}
		if len(fds) != 1 && len(fds) != 3 {
			return fmt.Errorf("bad cgroup descriptors %q: want fd:PROCS or fd:PROCS:CURRENT:MAX", arg)
		}
		for _, fd := range fds {
			defer unix.Close(fd)
		}
		if _, err := unix.Write(fds[0], pid); err != nil {
			return fmt.Errorf("join the cgroup through descriptor %d: %w", fds[0], err)
		}
		if len(fds) == 3 {
			cur, max, ok := readPidsCounters(fdReaderAt(fds[1]), fdReaderAt(fds[2]))
			if ok && cur > max {
				return pidsLimitError(cur-1, max) // without this helper
			}
		}
		return nil
	}
	if err := os.WriteFile(filepath.Join(arg, "cgroup.procs"), pid, 0o644); err != nil {
		return fmt.Errorf("join %s: %w", arg, err)
	}
	return nil
}
