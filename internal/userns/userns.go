// Package userns makes user namespaces owned by an unprivileged host user,
// with budgets of their own.
//
// The kernel charges per-user counters (inotify instances and watches,
// fanotify groups, namespaces, pending signals, POSIX message queue bytes,
// RLIMIT_NPROC) along a user namespace's chain: a process's use is counted
// against (its namespace, its uid), then against (the parent namespace, the
// namespace's owner), up to the initial namespace. A namespace created by
// host root (as runc and crun create a container's) is owned by host root,
// so what every sandbox uses is counted against host root in the initial
// namespace and one sandbox can use up root's budget for everyone (128
// inotify instances by default). A namespace of Create is owned by the host
// uid its root maps to: each sandbox is charged to a host user of its own,
// and the initial namespace's per-user limits (fs.inotify.max_user_instances
// …) become per-sandbox limits; the namespace's own limits (Limits) bound
// it further.
//
// The owner of a new user namespace is the effective uid of the process
// that creates it, and Go's runtime is multithreaded (it cannot unshare a
// user namespace), so Create runs a helper: a binary whose main calls Main
// when its argv[0] is HelperName (the guest agent's binary does). The
// helper runs as the owner with CAP_SETUID and CAP_SETGID (ambient: to
// write the new namespace's id maps, which an unprivileged owner may not)
// and clones a child into a new user namespace; that child, root there,
// sets the namespace's limits and waits until the caller has opened its
// namespace.
package userns

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// HelperName is the helper's argv[0].
const HelperName = "airlock-userns"

// The namespace ioctls (linux/nsfs.h): _IO(0xb7, 3) and _IO(0xb7, 4).
const (
	nsGetNSType   = 0xb703
	nsGetOwnerUID = 0xb704
)

// Sysctl names one of a user namespace's own limits, a file of
// /proc/sys/user (which shows the limits of the reader's namespace).
type Sysctl string

// The limits Limits may set.
const (
	MaxInotifyInstances Sysctl = "max_inotify_instances"
	MaxInotifyWatches   Sysctl = "max_inotify_watches"
	MaxFanotifyGroups   Sysctl = "max_fanotify_groups"
	MaxFanotifyMarks    Sysctl = "max_fanotify_marks"
	MaxUserNamespaces   Sysctl = "max_user_namespaces"
	MaxMntNamespaces    Sysctl = "max_mnt_namespaces"
	MaxPidNamespaces    Sysctl = "max_pid_namespaces"
	MaxNetNamespaces    Sysctl = "max_net_namespaces"
	MaxIpcNamespaces    Sysctl = "max_ipc_namespaces"
	MaxUtsNamespaces    Sysctl = "max_uts_namespaces"
	MaxCgroupNamespaces Sysctl = "max_cgroup_namespaces"
	MaxTimeNamespaces   Sysctl = "max_time_namespaces"
)

var sysctls = []Sysctl{
	MaxInotifyInstances, MaxInotifyWatches, MaxFanotifyGroups, MaxFanotifyMarks,
	MaxUserNamespaces, MaxMntNamespaces, MaxPidNamespaces, MaxNetNamespaces,
	MaxIpcNamespaces, MaxUtsNamespaces, MaxCgroupNamespaces, MaxTimeNamespaces,
}

// ParseSysctl parses the name of a /proc/sys/user file.
func ParseSysctl(s string) (Sysctl, error) {
	for _, n := range sysctls {
		if string(n) == s {
			return n, nil
		}
	}
	return "", fmt.Errorf("unknown user namespace limit %q", s)
}

// Path is the file of the limit in /proc/sys.
func (s Sysctl) Path() string { return "/proc/sys/user/" + string(s) }

// Rlimit names a resource limit whose value in the creating process the
// kernel keeps as the new namespace's ceiling: every process of the
// namespace together, whatever its uid there, is charged against it.
type Rlimit string

// The ceilings Limits may set.
const (
	RlimitSigpending Rlimit = "RLIMIT_SIGPENDING"
	RlimitMsgqueue   Rlimit = "RLIMIT_MSGQUEUE"
)

var rlimitResources = map[Rlimit]int{RlimitSigpending: unix.RLIMIT_SIGPENDING, RlimitMsgqueue: unix.RLIMIT_MSGQUEUE}

// ParseRlimit parses RLIMIT_SIGPENDING or RLIMIT_MSGQUEUE.
func ParseRlimit(s string) (Rlimit, error) {
	if _, ok := rlimitResources[Rlimit(s)]; ok {
		return Rlimit(s), nil
	}
	return "", fmt.Errorf("unknown user namespace ceiling %q", s)
}

// Limits are a new namespace's own limits. A limit not given is the
// kernel's default for a new namespace: no limit of its own for a sysctl
// (the parent's per-user limit, charged to the owner, still applies), the
// creating process's limit for an rlimit (Create's caller's).
type Limits struct {
	Sysctls map[Sysctl]int64
	Rlimits map[Rlimit]uint64
}

// args encodes the limits as the helper's arguments, NAME=VALUE each.
func (l Limits) args() []string {
	var out []string
	for _, n := range sysctls {
		if v, ok := l.Sysctls[n]; ok {
			out = append(out, string(n)+"="+strconv.FormatInt(v, 10))
		}
	}
	for _, n := range []Rlimit{RlimitSigpending, RlimitMsgqueue} {
		if v, ok := l.Rlimits[n]; ok {
			out = append(out, string(n)+"="+strconv.FormatUint(v, 10))
		}
	}
	return out
}

// parseLimits parses what args wrote.
func parseLimits(args []string) (Limits, error) {
	l := Limits{Sysctls: map[Sysctl]int64{}, Rlimits: map[Rlimit]uint64{}}
	for _, a := range args {
		name, value, ok := strings.Cut(a, "=")
		if !ok {
			return Limits{}, fmt.Errorf("malformed limit %q (want NAME=VALUE)", a)
		}
		if s, err := ParseSysctl(name); err == nil {
			v, err := strconv.ParseInt(value, 10, 32) // the kernel's are ints
			if err != nil || v < 0 {
				return Limits{}, fmt.Errorf("limit %s: %q is not a count from 0 to 2147483647", name, value)
			}
			l.Sysctls[s] = v
			continue
		}
		r, err := ParseRlimit(name)
		if err != nil {
			return Limits{}, err
		}
		v, err := strconv.ParseUint(value, 10, 64)
		if err != nil {
			return Limits{}, fmt.Errorf("limit %s: %q is not a count", name, value)
		}
		l.Rlimits[r] = v
	}
	return l, nil
}

// Mapping maps the ids [0, Size) of the new namespace, uids and gids alike,
// onto the host ids [Host, Host+Size); Host owns the namespace.
type Mapping struct {
	Host, Size uint32
}

func (m Mapping) valid() bool {
	return m.Host != 0 && m.Size > 0 && uint64(m.Host)+uint64(m.Size) <= 1<<32-1
}

// Create makes a user namespace owned by host uid m.Host, mapping m, with
// the limits lim, and returns a descriptor of it: no process is left in
// it, the descriptor alone keeps it alive (bind-mount /proc/self/fd/N to
// keep it longer). helper is a binary whose main calls Main when its
// argv[0] is HelperName; it must be executable by m.Host. The caller must
// be root.
func Create(ctx context.Context, helper string, m Mapping, lim Limits) (ns *os.File, err error) {
	if !m.valid() {
		return nil, fmt.Errorf("user namespace: invalid mapping 0:%d:%d (the owner must not be host root)", m.Host, m.Size)
	}
	args := append([]string{"create", strconv.FormatUint(uint64(m.Host), 10), strconv.FormatUint(uint64(m.Size), 10)}, lim.args()...)
	cmd := exec.CommandContext(ctx, helper, args...)
	cmd.Args[0] = HelperName
	cmd.Dir = "/"
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential:  &syscall.Credential{Uid: m.Host, Gid: m.Host, Groups: []uint32{}},
		AmbientCaps: []uintptr{unix.CAP_SETUID, unix.CAP_SETGID},
		Pdeathsig:   syscall.SIGKILL,
	}
	// The helper's child in the namespace waits until its standard input
	// closes: until then its namespace stays open for us.
	release, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &limitedWriter{w: &stderr, n: 4096}
	// Pdeathsig fires when the thread that started the helper exits: keep
	// this goroutine on its thread until the helper is done.
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("user namespace: start the helper %s: %w", helper, err)
	}
	defer func() {
		release.Close()
		werr := cmd.Wait()
		switch {
		case err != nil:
			if msg := strings.TrimSpace(stderr.String()); msg != "" {
				err = fmt.Errorf("%w (helper: %s)", err, msg)
			}
		case werr != nil:
			ns.Close()
			ns, err = nil, fmt.Errorf("user namespace: helper: %w: %s", werr, strings.TrimSpace(stderr.String()))
		}
	}()
	line, rerr := bufio.NewReader(out).ReadString('\n')
	pid, perr := parseReady(line)
	if rerr != nil || perr != nil {
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("user namespace: helper: %w", errors.Join(rerr, perr))
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", pid))
	if err != nil {
		return nil, fmt.Errorf("user namespace: %w", err)
	}
	if err := Check(f, m.Host); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Check verifies that f is a user namespace owned by host uid owner.
func Check(f *os.File, owner uint32) error {
	typ, err := unix.IoctlRetInt(int(f.Fd()), nsGetNSType)
	if err != nil {
		return fmt.Errorf("%s: not a namespace: %w", f.Name(), err)
	}
	if typ != unix.CLONE_NEWUSER {
		return fmt.Errorf("%s: not a user namespace (type %#x)", f.Name(), typ)
	}
	got, err := Owner(f)
	if err != nil {
		return err
	}
	if got != owner {
		return fmt.Errorf("%s: user namespace owned by host uid %d, want %d", f.Name(), got, owner)
	}
	return nil
}

// Owner returns the host uid that owns the user namespace f (as seen from
// the caller's namespace).
func Owner(f *os.File) (uint32, error) {
	uid, err := unix.IoctlGetUint32(int(f.Fd()), nsGetOwnerUID)
	if err != nil {
		return 0, fmt.Errorf("%s: owner of the user namespace: %w", f.Name(), err)
	}
	return uid, nil
}

// parseReady parses the helper's "ready PID" line.
func parseReady(line string) (int, error) {
	word, pid, ok := strings.Cut(strings.TrimSpace(line), " ")
	n, err := strconv.Atoi(pid)
	if !ok || word != "ready" || err != nil || n <= 0 {
		return 0, fmt.Errorf("unexpected answer %q", line)
	}
	return n, nil
}

// limitedWriter keeps the first n bytes written to it.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.n -= k
		_, _ = l.w.Write(p[:k])
	}
	return len(p), nil
}
