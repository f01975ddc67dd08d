// Package netnstest gives tests network namespaces of their own, so that network tests touch
// nothing of the machine's: a namespace is held only by an open file, and closing it at
// cleanup lets the kernel destroy it with everything in it (veths, addresses, routes,
// nftables tables).
package netnstest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Netns is a network namespace a test made.
type Netns struct {
	// F holds the namespace (/proc/<tid>/ns/net); pass it to children as an extra file to
	// name the namespace (e.g. `ip link … netns /proc/self/fd/3`).
	F *os.File
}

// New makes a fresh network namespace, closed at the test's cleanup, or skips the test when
// this process may not make one.
func New(t testing.TB) *Netns {
	t.Helper()
	f, err := Make()
	if errors.Is(err, unix.EPERM) {
		t.Skipf("needs CAP_NET_ADMIN (and CAP_SYS_ADMIN) to make a network namespace: %v", err)
	}
	if err != nil {
		t.Fatalf("new network namespace: %v", err)
	}
	ns := &Netns{F: f}
	t.Cleanup(func() { ns.F.Close() })
	return ns
}

// Do runs fn on a thread that has entered the namespace (see Run). Sockets fn opens stay in
// the namespace and may be used from anywhere afterwards.
func (ns *Netns) Do(t testing.TB, fn func()) {
	t.Helper()
	if err := Run(ns.F, func() error { fn(); return nil }); err != nil && !errors.Is(err, ErrGoexit) {
		t.Fatalf("in network namespace: %v", err)
	}
}

// IP runs iproute2's ip inside the namespace (a child forked from a thread inherits its
// namespace); extra files become the child's fd 3, 4, ...
func (ns *Netns) IP(t testing.TB, extra []*os.File, args ...string) {
	t.Helper()
	var out []byte
	var err error
	ns.Do(t, func() {
		cmd := exec.Command("ip", args...)
		cmd.ExtraFiles = extra
		out, err = cmd.CombinedOutput()
	})
	if err != nil {
		t.Fatalf("ip %v: %v: %s", args, err, out)
	}
}

// Conn is an nftables connection bound to the namespace.
func (ns *Netns) Conn(t testing.TB) *nftables.Conn {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns.F.Fd())))
	if err != nil {
		t.Fatalf("nftables conn: %v", err)
	}
	return c
}

// isolatedEnv marks a test binary that already runs in a network namespace of its own;
// hostNetnsEnv names the descriptor through which it still holds the namespace Main was
// started in (the host's), for InHost.
const (
	isolatedEnv  = "AIRLOCK_TEST_ISOLATED_NETNS"
	hostNetnsEnv = "AIRLOCK_TEST_HOST_NETNS_FD"
)

// Main runs a test package in a network namespace of its own, for packages whose tests make
// host-side network objects (veths, nftables tables, Airlock servers, which own their
// namespace's egress): call it from TestMain as os.Exit(netnstest.Main(m)). The test binary
// re-executes itself in a fresh namespace with loopback up, so those objects never meet the
// machine's or another package's running at the same time, and vanish with the process. A
// process that may not make a namespace runs the tests where it is.
func Main(m *testing.M) int { return MainFunc(m.Run) }

// MainFunc is Main for a TestMain that runs its tests through run (e.g.
// pgtest.Run, which stops a shared cluster afterwards): run is called in the
// namespace and returns the exit code.
func MainFunc(run func() int) int {
	if os.Getenv(isolatedEnv) == "" {
		host, err := os.Open("/proc/self/ns/net")
		if err != nil {
			fmt.Fprintf(os.Stderr, "netnstest: open this network namespace: %v\n", err)
			return 2
		}
		defer host.Close()
		cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
		cmd.Args[0] = os.Args[0]
		cmd.Env = append(os.Environ(), isolatedEnv+"=1", hostNetnsEnv+"=3")
		cmd.ExtraFiles = []*os.File{host} // fd 3
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.SysProcAttr = &unix.SysProcAttr{Cloneflags: unix.CLONE_NEWNET, Pdeathsig: unix.SIGKILL}
		err = cmd.Run()
		var exit *exec.ExitError
		switch {
		case err == nil:
			return 0
		case errors.As(err, &exit) && exit.ExitCode() >= 0:
			return exit.ExitCode()
		case errors.Is(err, unix.EPERM):
			fmt.Fprintf(os.Stderr, "netnstest: cannot make a network namespace (%v); running in this one\n", err)
			return run()
		default:
			fmt.Fprintf(os.Stderr, "netnstest: run the tests in a network namespace of their own: %v\n", err)
			return 2
		}
	}
	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "netnstest: bring up loopback: %v\n", err)
		return 2
	}
	return run()
}

// InHost runs fn where the machine's network is: in the namespace Main was started in when
// the package runs isolated by Main, else right here. Tests use it to fetch what they need
// from outside (a package archive, say) before working in their namespace, which has no
// route out; a child process started by fn runs there too.
func InHost(fn func() error) error {
	if os.Getenv(isolatedEnv) == "" {
		return fn()
	}
	fd, err := strconv.Atoi(os.Getenv(hostNetnsEnv))
	if err != nil {
		return fmt.Errorf("netnstest: %s=%q: no descriptor of the host's network namespace", hostNetnsEnv, os.Getenv(hostNetnsEnv))
	}
	return run(fd, fn)
}

// Make makes a fresh network namespace and returns it as an open file.
// The namespace lives as long as the file (and any socket or process in it):
// no bind mount, so nothing of it can outlive a crashed test.
func Make() (*os.File, error) {
	type result struct {
		f   *os.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread goes back to its own namespace afterwards; if it
		// cannot, it stays locked and ends with the goroutine (a main
		// thread would be wedged, never reused).
		runtime.LockOSThread()
		orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer orig.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("unshare network namespace: %w", err)}
			return
		}
		f, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if rerr := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); rerr != nil {
			if f != nil {
				f.Close()
			}
			ch <- result{err: fmt.Errorf("restore network namespace: %w", rerr)}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{f, err}
	}()
	r := <-ch
	return r.f, r.err
}

// ErrGoexit is Run's result when fn ended its goroutine (a test's
// FailNow) instead of returning.
var ErrGoexit = errors.New("netnstest: the function run in the namespace did not return")

// Run runs fn on an OS thread that has entered the namespace ns, and
// brings the thread back to its own namespace afterwards. Sockets fn opens
// stay in ns and may be used from any goroutine. When the thread cannot be
// brought back (or fn ends the goroutine) it stays locked and ends with its
// goroutine.
func Run(ns *os.File, fn func() error) error {
	err := run(int(ns.Fd()), fn)
	runtime.KeepAlive(ns)
	return err
}

// run is Run on a descriptor of the namespace.
func run(ns int, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		result := ErrGoexit
		defer func() { done <- result }()
		runtime.LockOSThread()
		orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			result = err
			return
		}
		defer orig.Close()
		if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			result = fmt.Errorf("setns: %w", err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			result = fmt.Errorf("restore network namespace: %w (after: %v)", err, ferr)
			return // the thread stays locked and is discarded
		}
		runtime.UnlockOSThread()
		result = ferr
	}()
	return <-done
}

// ID is the namespace's identity ("net:[inode]"), as /proc shows it.
func ID(ns *os.File) (string, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(ns.Fd()), &st); err != nil {
		return "", err
	}
	return fmt.Sprintf("net:[%d]", st.Ino), nil
}

// RequireNetAdmin skips the test unless the process holds CAP_NET_ADMIN and CAP_SYS_ADMIN
// (network namespaces, veths, bind mounts of them).
func RequireNetAdmin(t testing.TB) {
	t.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("cannot read capabilities: %v", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			const netAdmin, sysAdmin = 12, 21
			if err == nil && caps&(1<<netAdmin) != 0 && caps&(1<<sysAdmin) != 0 {
				return
			}
		}
	}
	t.Skip("needs CAP_NET_ADMIN and CAP_SYS_ADMIN (network namespaces, veths, bind mounts)")
}
