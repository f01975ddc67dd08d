package agent_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agent"
	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/cgroups"
	"github.com/airlockdev/airlock/internal/model"
)

// TestMain lets the test binary act as the spawn helper (/proc/self/exe
// __spawn …), as the airlock-agent binary does.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == agent.SpawnCommand {
		os.Exit(agent.SpawnMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// tempPidsParent creates a throwaway cgroup to act as the agent's own pids
// cgroup, or skips if this host has no writable pids controller.
func tempPidsParent(t *testing.T) string {
	t.Helper()
	airtest.RequireRoot(t)
	var b [6]byte
	rand.Read(b[:])
	name := "airlock-agent-test-" + hex.EncodeToString(b[:])
	var dir string
	switch {
	case isDir("/sys/fs/cgroup/pids"):
		dir = filepath.Join("/sys/fs/cgroup/pids", name)
	case hasWord("/sys/fs/cgroup/cgroup.subtree_control", "pids"):
		dir = filepath.Join("/sys/fs/cgroup", name)
	default:
		t.Skip("needs a writable pids cgroup controller (cgroup v1 /sys/fs/cgroup/pids or pids enabled in the cgroup v2 root's subtree_control)")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("needs a writable pids cgroup controller: %v", err)
	}
	t.Cleanup(func() { removeCgroupTree(t, dir) })
	return dir
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func hasWord(file, word string) bool {
	data, err := os.ReadFile(file)
	return err == nil && slices.Contains(strings.Fields(string(data)), word)
}

// removeCgroupTree kills whatever is left in dir and its children and
// removes them, deepest first.
func removeCgroupTree(t *testing.T, dir string) {
	var dirs []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	slices.Reverse(dirs)
	for _, d := range dirs {
		deadline := time.Now().Add(10 * time.Second)
		for {
			data, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			err := syscall.Rmdir(d)
			if err == nil || errors.Is(err, syscall.ENOENT) {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("cannot remove cgroup %s: %v", d, err)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestPidsCgroupInProcess starts processes directly in the cgroup (a
// thread that joins it on cgroup v1, CLONE_INTO_CGROUP on v2).
func TestPidsCgroupInProcess(t *testing.T) { testPidsCgroupInProcess(t, false) }

// TestPidsCgroupInProcessHelper starts them through the re-exec helper,
// the fallback.
func TestPidsCgroupInProcessHelper(t *testing.T) { testPidsCgroupInProcess(t, true) }

func testPidsCgroupInProcess(t *testing.T, helperOnly bool) {
	parent := tempPidsParent(t)
	const max = 8
	cg, err := agent.SetupPidsCgroup(agent.PidsCgroupOptions{Max: max, Parent: parent})
	if err != nil {
		t.Fatal(err)
	}
	if cg.Dir != filepath.Join(parent, agent.DefaultWorkloadCgroup) {
		t.Fatalf("cgroup dir %s", cg.Dir)
	}
	if got, _ := os.ReadFile(filepath.Join(cg.Dir, "pids.max")); strings.TrimSpace(string(got)) != strconv.Itoa(max) {
		t.Fatalf("pids.max = %q", got)
	}
	// Reusing an existing cgroup works (an agent restart).
	if _, err := agent.SetupPidsCgroup(agent.PidsCgroupOptions{Max: max, Parent: parent}); err != nil {
		t.Fatalf("second setup: %v", err)
	}
	srv, err := agent.New(agent.Options{CgroupDir: cg.Dir, SpawnHelperOnly: helperOnly, Env: []string{"PATH=/usr/bin:/bin"}, DrainTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	c := pipeClient(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The process is in the cgroup from its first instruction.
	res, err := c.Run(ctx, agentproto.StartRequest{ID: model.NewProcessID().String(), Args: []string{"cat", "/proc/self/cgroup"}})
	if err != nil {
		t.Fatal(err)
	}
	rel := strings.TrimPrefix(cg.Dir, "/sys/fs/cgroup")
	rel = strings.TrimPrefix(rel, "/pids")
	if !strings.Contains(string(res.Stdout), rel+"\n") {
		t.Fatalf("process cgroups:\n%s\nwant %s", res.Stdout, rel)
	}
	// The agent (this test process) is not.
	self, _ := os.ReadFile("/proc/self/cgroup")
	if strings.Contains(string(self), agent.DefaultWorkloadCgroup) {
		t.Fatal("the agent itself joined the workload cgroup")
	}

	// A fork bomb hits pids.max: fork fails inside, the agent keeps serving.
	bomb := model.NewProcessID().String()
	if _, err := c.Start(ctx, agentproto.StartRequest{ID: bomb, Args: []string{"/bin/sh", "-c", "i=0; while [ $i -lt 40 ]; do sleep 3 & i=$((i+1)); done; wait"}}); err != nil {
		t.Fatal(err)
	}
	res2 := collectRun(t, c, bomb)
	t.Logf("fork bomb: exit %d, stderr %q", res2.ExitCode, res2.Stderr)
	if !strings.Contains(strings.ToLower(string(res2.Stderr)), "fork") {
		t.Fatalf("fork bomb stderr %q, exit %d: want a fork failure", res2.Stderr, res2.ExitCode)
	}
	cur, _ := os.ReadFile(filepath.Join(cg.Dir, "pids.current"))
	if n, err := strconv.Atoi(strings.TrimSpace(string(cur))); err != nil || n > max {
		t.Fatalf("pids.current = %q", cur)
	}
	if _, err := c.Info(ctx); err != nil {
		t.Fatalf("agent stopped serving during the fork bomb: %v", err)
	}

	// A process the host starts counts against the limit: while the
	// workload is full a start is refused with a clear error, and nothing
	// joins the cgroup beyond its limit (the helper forks outside and
	// joins, which the kernel does not check against pids.max).
	readCurrent := func() string {
		cur, _ := os.ReadFile(filepath.Join(cg.Dir, "pids.current"))
		return strings.TrimSpace(string(cur))
	}
	var holder string
	waitCurrent := func(want int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for readCurrent() != strconv.Itoa(want) {
			if time.Now().After(deadline) {
				if holder != "" {
					if st, err := c.Status(ctx, holder); err == nil && !st.Running {
						r := collectRun(t, c, holder)
						t.Errorf("the holder exited %d: %q", r.ExitCode, r.Stderr)
					}
				}
				t.Fatalf("pids.current %s, want %d", readCurrent(), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitCurrent(0)
	// The holder fills the cgroup once the start is over: until then the
	// agent's spawning thread (cgroup v1) may still count in it.
	fifo := filepath.Join(t.TempDir(), "go")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	holder = model.NewProcessID().String()
	if _, err := c.Start(ctx, agentproto.StartRequest{ID: holder, Args: []string{"/bin/sh", "-c", "read go < " + fifo + "; i=1; while [ $i -lt " + strconv.Itoa(max) + " ]; do sleep 30 & i=$((i+1)); done; wait"}}); err != nil {
		t.Fatal(err)
	}
	waitCurrent(1)
	if err := os.WriteFile(fifo, []byte("go\n"), 0); err != nil {
		t.Fatal(err)
	}
	waitCurrent(max)
	_, err = c.Start(ctx, agentproto.StartRequest{ID: model.NewProcessID().String(), Args: []string{"true"}})
	var full *agentclient.Error
	if !errors.As(err, &full) || full.Code != agentproto.CodeExecFailed || !strings.Contains(full.Message, "pids limit reached") {
		t.Fatalf("start while the workload is full: %v, want exec_failed \"pids limit reached\"", err)
	}
	if got := readCurrent(); got != strconv.Itoa(max) {
		t.Fatalf("pids.current %s after the refused start, want %d", got, max)
	}
	procs, _ := os.ReadFile(filepath.Join(cg.Dir, "cgroup.procs"))
	for _, f := range strings.Fields(string(procs)) {
		if pid, err := strconv.Atoi(f); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	collectRun(t, c, holder)
	waitCurrent(0)

	// An exec failure inside the helper is a clean exec_failed with no record.
	bad := filepath.Join(t.TempDir(), "badformat")
	if err := os.WriteFile(bad, []byte("\x7fELF nonsense"), 0o755); err != nil {
		t.Fatal(err)
	}
	id := model.NewProcessID().String()
	_, err = c.Start(ctx, agentproto.StartRequest{ID: id, Args: []string{bad}})
	var ae *agentclient.Error
	if !errors.As(err, &ae) || ae.Code != agentproto.CodeExecFailed || !strings.Contains(ae.Message, "exec format error") {
		t.Fatalf("Start of a bad binary via the helper = %v", err)
	}
	if _, err := c.Status(ctx, id); !errors.Is(err, agentclient.ErrProcessNotFound) {
		t.Fatalf("failed start left a record: %v", err)
	}
}

// TestPidsCgroupPreparedByHost plays a sandbox in a user namespace: the
// host prepares the workload cgroup (cgroups.DelegatePids) and gives an
// unprivileged user only what moves processes into it. As that user,
// SetupPidsCgroup reuses it when its limit is the one asked for and
// refuses another; the user can neither create a cgroup nor change the
// limit.
func TestPidsCgroupPreparedByHost(t *testing.T) {
	parent := tempPidsParent(t)
	host, err := cgroups.Detect()
	if err != nil {
		t.Fatal(err)
	}
	const uid, max = 1<<30 + 12345, 8
	p := cgroups.Path("/" + filepath.Base(parent))
	dir, err := host.DelegatePids(p, cgroups.PidsDelegation{Child: agent.DefaultWorkloadCgroup, Leaf: agent.AgentCgroup, Max: max, UID: uid, GID: uid})
	if err != nil {
		t.Fatal(err)
	}
	err = asUser(uid, func() error {
		cg, err := agent.SetupPidsCgroup(agent.PidsCgroupOptions{Max: max, Parent: parent})
		if err != nil {
			return err
		}
		if cg.Dir != dir {
			return fmt.Errorf("cgroup dir %s, want %s", cg.Dir, dir)
		}
		if _, err := agent.SetupPidsCgroup(agent.PidsCgroupOptions{Max: max + 1, Parent: parent}); err == nil || !strings.Contains(err.Error(), `it is "8"`) {
			return fmt.Errorf("another limit than the host's: %v", err)
		}
		if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte("max"), 0); err == nil {
			return errors.New("the delegate raised pids.max")
		}
		for _, d := range []string{parent, dir} {
			if err := os.Mkdir(filepath.Join(d, "escape"), 0o755); err == nil {
				return fmt.Errorf("the delegate created a cgroup in %s", d)
			}
		}
		// It can open what moves processes in (the agent's spawner).
		f, err := os.OpenFile(filepath.Join(dir, "cgroup.procs"), os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		return f.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "pids.max")); strings.TrimSpace(string(got)) != strconv.Itoa(max) {
		t.Fatalf("pids.max = %q", got)
	}
}

// asUser runs fn on an OS thread of its own whose user and group IDs are
// uid (so without capabilities); the thread ends with it.
func asUser(uid int, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		// Never unlocked: the runtime ends the thread when this goroutine
		// returns, and creates no thread from it meanwhile.
		goruntime.LockOSThread()
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESGID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
			done <- fmt.Errorf("setresgid: %w", e)
			return
		}
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
			done <- fmt.Errorf("setresuid: %w", e)
			return
		}
		done <- fn()
	}()
	return <-done
}

func TestPidsCgroupErrors(t *testing.T) {
	if _, err := agent.SetupPidsCgroup(agent.PidsCgroupOptions{Max: 0}); err == nil {
		t.Fatal("Max 0 accepted")
	}
	if _, err := agent.SetupPidsCgroup(agent.PidsCgroupOptions{Max: 5, Parent: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "not a cgroup") {
		t.Fatalf("non-cgroup parent: %v", err)
	}
	if _, err := agent.SetupPidsCgroup(agent.PidsCgroupOptions{Max: 5, Name: "../x", Parent: "/sys/fs/cgroup"}); err == nil {
		t.Fatal("bad name accepted")
	}
	if _, err := agent.New(agent.Options{CgroupDir: "/sys/fs/cgroup", SpawnHelper: "/no/such/helper"}); err == nil {
		t.Fatal("missing spawn helper accepted")
	}
}

func pipeClient(t *testing.T, srv *agent.Server) *agentclient.Client {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := agentclient.New(func(context.Context) (net.Conn, error) {
		a, b := net.Pipe()
		go srv.ServeConn(ctx, b)
		return a, nil
	}, nil)
	t.Cleanup(func() { c.Close() })
	return c
}

func collectRun(t *testing.T, c *agentclient.Client, id string) agentclient.RunResult {
	t.Helper()
	s, err := c.Output(context.Background(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var res agentclient.RunResult
	for {
		ev, err := s.Next()
		if errors.Is(err, io.EOF) {
			return res
		}
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case agentproto.EventStdout:
			res.Stdout = append(res.Stdout, ev.Data...)
		case agentproto.EventStderr:
			res.Stderr = append(res.Stderr, ev.Data...)
		case agentproto.EventExit:
			res.ExitCode = *ev.ExitCode
		}
	}
}
