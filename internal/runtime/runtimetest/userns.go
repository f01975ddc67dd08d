package runtimetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

// idMapLine is the first line of /proc/PID/uid_map or gid_map.
type idMapLine struct{ inside, host, size uint64 }

func parseIDMap(s string) (idMapLine, error) {
	first, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	f := strings.Fields(first)
	if len(f) != 3 {
		return idMapLine{}, fmt.Errorf("malformed id map %q", s)
	}
	var n [3]uint64
	for i := range f {
		v, err := strconv.ParseUint(f[i], 10, 32)
		if err != nil {
			return idMapLine{}, fmt.Errorf("malformed id map %q: %w", s, err)
		}
		n[i] = v
	}
	return idMapLine{n[0], n[1], n[2]}, nil
}

// identity is the map of the host's initial user namespace.
var identity = idMapLine{0, 0, 1<<32 - 1}

// testUserNamespace checks that a sandbox's root is not host root: from
// inside, /proc/self/uid_map and gid_map map root to an unprivileged host
// id; on the host, the sandbox's first process runs as that id and lives in
// another user namespace; the template's files appear owned by root inside;
// files the sandbox writes land on the host owned by the mapped ids, also
// for a process started as another user. With and without a disk limit
// (the writable layer is then on the sandbox's own loop-mounted
// filesystem, which its root must own).
func testUserNamespace(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	iso, ok := rt.(Isolation)
	if !ok {
		t.Skipf("%T does not implement runtimetest.Isolation", rt)
	}
	if !iso.UserNamespaced() {
		t.Skip("this runtime does not promise that sandbox root is an unprivileged host user (gVisor's sentry runs the guest in a user namespace of its own)")
	}
	for _, disk := range []int64{0, 64 << 20} {
		t.Run("DiskBytes="+strconv.FormatInt(disk, 10), func(t *testing.T) {
			res := defaultResources
			res.DiskBytes = disk
			testUserNamespaceWith(t, s, rt, res)
		})
	}
}

func testUserNamespaceWith(t *testing.T, s *suite, rt runtime.Runtime, resources runtime.Resources) {
	spec := s.spec(resources, nil)
	s.started(t, rt, spec)
	c := client(t, rt, spec.ID)

	maps := map[string]idMapLine{}
	for _, name := range []string{"uid_map", "gid_map"} {
		out := sh(t, c, "cat /proc/self/"+name)
		m, err := parseIDMap(out)
		if err != nil {
			t.Fatal(err)
		}
		if m == identity || m.inside != 0 || m.host == 0 || m.size < 65536 {
			t.Fatalf("/proc/self/%s inside the sandbox = %q: want root (and 65536 ids from it) mapped to an unprivileged host id", name, out)
		}
		if pid1 := sh(t, c, "cat /proc/1/"+name); pid1 != out {
			t.Errorf("/proc/1/%s = %q, /proc/self/%s = %q: the agent and its commands differ", name, pid1, name, out)
		}
		maps[name] = m
	}
	uid, gid := maps["uid_map"].host, maps["gid_map"].host

	// On the host: the sandbox's first process is the mapped user, in a
	// user namespace that is not the host's.
	st := mustState(t, rt, spec.ID, runtime.PhaseRunning)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", st.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines(string(status)) {
		field, rest, _ := strings.Cut(l, ":")
		want := map[string]uint64{"Uid": uid, "Gid": gid}
		if w, ok := want[field]; ok {
			ids := strings.Fields(rest) // real, effective, saved, filesystem
			if len(ids) != 4 || strings.Count(rest, strconv.FormatUint(w, 10)) != 4 {
				t.Errorf("host /proc/%d/status %s:%s, want %d four times", st.Pid, field, rest, w)
			}
		}
	}
	hostNS, err1 := os.Readlink("/proc/self/ns/user")
	sandboxNS, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/user", st.Pid))
	if err1 != nil || err2 != nil || hostNS == sandboxNS {
		t.Errorf("user namespace of the sandbox %q (%v), of the host %q (%v): want another one", sandboxNS, err2, hostNS, err1)
	}

	// The template (owned by host root on disk) appears owned by root.
	if got := sh(t, c, "stat -c %u:%g / /bin/sh /"+markerFile+" && id -u && id -g"); got != "0:0\n0:0\n0:0\n0\n0\n" {
		t.Errorf("owners of /, /bin/sh and the template marker, id -u and id -g inside = %q, want all 0", got)
	}

	// Writes land on the host owned by the mapped ids, also those of a
	// process started as another user (the sandbox has no CAP_CHOWN).
	sh(t, c, "echo root > /userns-root && echo changed > /"+markerFile)
	ctx := ctxFor(t)
	res, err := c.Run(ctx, agentproto.StartRequest{ID: model.NewProcessID().String(), Cwd: "/tmp",
		Args: []string{"sh", "-c", "id -u && id -g && echo user > /tmp/by-1000"},
		User: &agentproto.User{UID: 1000, GID: 1000}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("run as 1000:1000 = %+v, %v (stderr %q)", res, err, res.Stderr)
	}
	if got, want := string(res.Stdout), "1000\n1000\n"; got != want {
		t.Errorf("id -u, id -g as user 1000: %q, want %q", got, want)
	}
	upper := inspector(t, rt).Artifacts(spec.ID).UpperDir
	for _, tt := range []struct {
		name     string
		uid, gid uint64
	}{
		{".", uid, gid}, // the upper directory itself: the sandbox's "/"
		{"userns-root", uid, gid},
		{markerFile, uid, gid}, // copied up from the template
		{"tmp/by-1000", uid + 1000, gid + 1000},
	} {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(upper, tt.name), &st); err != nil {
			t.Errorf("host: %v", err)
			continue
		}
		if uint64(st.Uid) != tt.uid || uint64(st.Gid) != tt.gid {
			t.Errorf("host: /%s owned by %d:%d, want %d:%d", tt.name, st.Uid, st.Gid, tt.uid, tt.gid)
		}
	}
}

// testUserNamespacesDistinct checks that two sandboxes never share host
// ids: a sandbox that escaped its user namespace could otherwise read or
// signal another's files and processes.
func testUserNamespacesDistinct(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	if iso, ok := rt.(Isolation); !ok || !iso.UserNamespaced() {
		t.Skip("the runtime does not promise user namespaces")
	}
	var maps []idMapLine
	for range 2 {
		spec := s.spec(defaultResources, nil)
		s.started(t, rt, spec)
		m, err := parseIDMap(sh(t, client(t, rt, spec.ID), "cat /proc/self/uid_map"))
		if err != nil {
			t.Fatal(err)
		}
		maps = append(maps, m)
	}
	a, b := maps[0], maps[1]
	if a.host < b.host+b.size && b.host < a.host+a.size {
		t.Fatalf("two sandboxes' host uid ranges overlap: %+v and %+v", a, b)
	}
}

// testUserKeyringNotShared checks, from the host, that the user keyring of
// a sandbox's root is not host root's, both ways: a key host root adds to
// its user keyring (@u) is not found by the sandbox's root, and one the
// sandbox's root adds is not in host root's. Inside the sandbox keyctl and
// add_key fail with EPERM (SeccompFilter) and /proc/keys is masked, so the
// suite plays the sandbox's root with a helper that enters the sandbox's
// user namespace (nsenter) as uid and gid 0 there — the same credentials,
// without the seccomp filter that would refuse the calls.
func testUserKeyringNotShared(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	if iso, ok := rt.(Isolation); !ok || !iso.UserNamespaced() {
		t.Skip("the runtime does not promise user namespaces")
	}
	nsenter := airtest.RequireBinary(t, "nsenter")
	probe := airtest.BuildBinary(t, "./internal/runtime/runtimetest/testdata/keyringprobe")
	spec := s.spec(defaultResources, nil)
	s.started(t, rt, spec)
	st := mustState(t, rt, spec.ID, runtime.PhaseRunning)
	asSandboxRoot := func(args ...string) map[string]string {
		t.Helper()
		cmd := exec.Command(nsenter, append([]string{"--user=/proc/" + strconv.Itoa(st.Pid) + "/ns/user", "--setuid", "0", "--setgid", "0", "--", probe}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("keyringprobe %q as the sandbox's root: %v\n%s", args, err, out)
		}
		res := map[string]string{}
		for _, l := range lines(string(out)) {
			k, v, _ := strings.Cut(l, " ")
			res[k] = v
		}
		return res
	}

	hostRing, err := unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_USER_KEYRING, 1, 0, 0)
	if err != nil {
		t.Skipf("the host's user keyring: %v", err)
	}
	hostDesc := "airlock-test-host-" + spec.ID.String()
	hostKey, err := unix.AddKey("user", hostDesc, []byte("host root's secret"), unix.KEY_SPEC_USER_KEYRING)
	if err != nil {
		t.Fatalf("add a key to host root's user keyring: %v", err)
	}
	t.Cleanup(func() { _, _ = unix.KeyctlInt(unix.KEYCTL_INVALIDATE, hostKey, 0, 0, 0) })

	got := asSandboxRoot("find", hostDesc)
	if got["user-keyring"] == strconv.Itoa(hostRing) {
		t.Errorf("the sandbox's root has host root's user keyring %d", hostRing)
	}
	if _, absent := got["absent"]; !absent {
		t.Errorf("the sandbox's root finds host root's key %q: %v", hostDesc, got)
	}
	t.Logf("user keyrings: host root's %d, the sandbox root's %s", hostRing, got["user-keyring"])

	sandboxDesc := "airlock-test-sandbox-" + spec.ID.String()
	if _, ok := asSandboxRoot("add", sandboxDesc)["added"]; !ok {
		t.Fatal("the sandbox's root could not add a key to its own user keyring")
	}
	t.Cleanup(func() { asSandboxRoot("invalidate", sandboxDesc) })
	if id, err := unix.KeyctlSearch(unix.KEY_SPEC_USER_KEYRING, "user", sandboxDesc, 0); !errors.Is(err, unix.ENOKEY) {
		t.Errorf("host root's user keyring holds the sandbox root's key (%d, %v)", id, err)
	}
}

// testInotifyBudget: the kernel's per-user budgets (here inotify
// instances, fs.inotify.max_user_instances in the host's namespace) are per
// sandbox. A sandbox takes every inotify instance it can and holds them;
// another sandbox and host root must still create one. The sandbox's user
// namespace is owned by its own host uid, not by host root: the kernel
// charges what a namespace's processes use to its owner in the parent
// namespace, so with a root-owned namespace one sandbox used up host
// root's budget for every sandbox and for the host.
func testInotifyBudget(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	rt := newRuntime(t)
	if iso, ok := rt.(Isolation); !ok || !iso.UserNamespaced() {
		t.Skip("the runtime does not promise user namespaces (gVisor implements inotify in its sentry: the guest's instances are no host objects)")
	}
	hog, other := s.spec(defaultResources, nil), s.spec(defaultResources, nil)
	s.started(t, rt, hog)
	s.started(t, rt, other)

	// The owner of each sandbox's user namespace is its mapped root.
	for _, spec := range []runtime.Spec{hog, other} {
		st := mustState(t, rt, spec.ID, runtime.PhaseRunning)
		m, err := parseIDMap(sh(t, client(t, rt, spec.ID), "cat /proc/self/uid_map"))
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", st.Pid))
		if err != nil {
			t.Fatal(err)
		}
		owner, err := unix.IoctlGetUint32(int(f.Fd()), 0xb704) // NS_GET_OWNER_UID
		f.Close()
		if err != nil {
			t.Fatalf("NS_GET_OWNER_UID: %v", err)
		}
		if uint64(owner) != m.host {
			t.Errorf("the user namespace of %s is owned by host uid %d, want its mapped root %d (not host root: the kernel charges the namespace's per-user counters to its owner)", spec.ID, owner, m.host)
		}
	}

	c := client(t, rt, hog.ID)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout())
	defer cancel()
	hogID := model.NewProcessID().String()
	if _, err := c.Start(ctx, agentproto.StartRequest{ID: hogID, Args: []string{"/" + syscallProbe, "inotify", "100000", "hold"}}); err != nil {
		t.Fatal(err)
	}
	out, err := c.Output(ctx, hogID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr []byte
	for !strings.Contains(string(stdout), "\n") {
		ev, err := out.Next()
		if err != nil {
			t.Fatalf("the inotify hog's output: %v (stdout %q, stderr %q)", err, stdout, stderr)
		}
		switch ev.Type {
		case agentproto.EventStdout:
			stdout = append(stdout, ev.Data...)
		case agentproto.EventStderr:
			stderr = append(stderr, ev.Data...)
		case agentproto.EventExit:
			t.Fatalf("the inotify hog exited early: %+v (stdout %q, stderr %q)", ev, stdout, stderr)
		}
	}
	out.Close()
	var created int
	var failed string
	if _, err := fmt.Sscanf(string(stdout), "created %d failed %s", &created, &failed); err != nil {
		t.Fatalf("the inotify hog printed %q: %v", stdout, err)
	}
	t.Logf("one sandbox created %d inotify instances, then %s", created, failed)
	if failed != "EMFILE" || created == 0 {
		t.Errorf("the sandbox created %d inotify instances, then %s: want some, then EMFILE (a limit)", created, failed)
	}

	// While it holds them: another sandbox, and host root, create one.
	res := run(t, client(t, rt, other.ID), "/"+syscallProbe, "inotify", "1")
	if got := string(res.Stdout); got != "created 1 failed none\n" {
		t.Errorf("another sandbox, while the first holds %d inotify instances: %q (stderr %q), want one created", created, got, res.Stderr)
	}
	if fd, err := unix.InotifyInit1(unix.IN_CLOEXEC); err != nil {
		t.Errorf("host root, while a sandbox holds %d inotify instances: inotify_init1: %v", created, err)
	} else {
		unix.Close(fd)
	}
}
