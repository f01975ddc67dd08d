package main_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/procfs"
)

// syncBuffer collects a process's stderr for the test log.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type runningAgent struct {
	cmd    *exec.Cmd
	sock   string
	stderr *syncBuffer
	exited chan error
	client *agentclient.Client
}

func shortTempDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "aga")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// startAgent runs the real airlock-agent binary (cmdline built by mk from
// the binary path and the --listen address) and connects a client to it.
func startAgent(t *testing.T, attr *syscall.SysProcAttr, mk func(bin, listen string) []string) *runningAgent {
	t.Helper()
	bin := airtest.BuildAgent(t)
	sock := filepath.Join(shortTempDir(t), "run", "agent.sock")
	args := mk(bin, "unix:"+sock)
	a := &runningAgent{sock: sock, stderr: &syncBuffer{}, exited: make(chan error, 1)}
	a.cmd = exec.Command(args[0], args[1:]...)
	a.cmd.Env = append(os.Environ(), "AGENT_ENV_VAR=from-agent-env")
	a.cmd.Stderr = a.stderr
	a.cmd.SysProcAttr = attr
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.exited <- a.cmd.Wait() }()
	t.Cleanup(func() {
		a.cmd.Process.Kill()
		<-a.exited
		if t.Failed() {
			t.Logf("agent stderr:\n%s", a.stderr.String())
		}
	})
	a.client = agentclient.New(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}, nil)
	t.Cleanup(func() { a.client.Close() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		// The socket file exists from bind(), a moment before listen():
		// wait until it takes a connection, not until it exists.
		if conn, err := net.Dial("unix", sock); err == nil {
			conn.Close()
			break
		}
		select {
		case err := <-a.exited:
			t.Fatalf("agent exited early: %v\n%s", err, a.stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent did not listen on %s\n%s", sock, a.stderr.String())
		}
	}
	return a
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// stop sends SIGTERM and waits for a clean exit.
func (a *runningAgent) stop(t *testing.T) {
	t.Helper()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-a.exited:
		a.exited <- err // for the cleanup
		if err != nil {
			t.Fatalf("agent exited with %v\n%s", err, a.stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("agent did not stop on SIGTERM\n%s", a.stderr.String())
	}
}

func newID() string { return model.NewProcessID().String() }

func TestVersion(t *testing.T) {
	bin := airtest.BuildAgent(t)
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("--version: %v", err)
	}
	if want := fmt.Sprintf("(protocol %d)", agentproto.ProtocolVersion); !strings.HasPrefix(string(out), "airlock-agent ") || !strings.Contains(string(out), want) {
		t.Fatalf("--version printed %q", out)
	}
}

func TestBadInvocations(t *testing.T) {
	bin := airtest.BuildAgent(t)
	dir := shortTempDir(t)
	notSocket := filepath.Join(dir, "file")
	if err := os.WriteFile(notSocket, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no listen", nil, 2, "--listen is required"},
		{"unknown scheme", []string{"--listen", "tcp:/x"}, 2, "unknown scheme"},
		{"relative path", []string{"--listen", "unix:x.sock"}, 2, "absolute"},
		{"serial device missing", []string{"--listen", "serial:/nonexistent/vport0p1"}, 1, "no such file"},
		{"serial not a device", []string{"--listen", "serial:" + notSocket}, 1, "not a character device"},
		{"bad port name", []string{"--listen", "serial:a/b"}, 2, "port name"},
		{"file in the way", []string{"--listen", "unix:" + notSocket}, 1, "not a socket"},
		{"negative pids", []string{"--listen", "unix:" + dir + "/s", "--pids-max", "-1"}, 2, "negative"},
		{"extra args", []string{"--listen", "unix:" + dir + "/s", "extra"}, 2, "unexpected arguments"},
		{"unknown flag", []string{"--nope"}, 2, "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(bin, tt.args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != tt.code || !strings.Contains(stderr.String(), tt.msg) {
				t.Fatalf("exit %v, stderr %q; want code %d and %q", err, stderr.String(), tt.code, tt.msg)
			}
		})
	}
	if data, _ := os.ReadFile(notSocket); string(data) != "keep me" {
		t.Fatal("the agent removed a file that is not a socket")
	}
}

// The agent as a plain child (not PID 1): child subreaper, central reaper.
func TestAgentBinary(t *testing.T) {
	a := startAgent(t, nil, func(bin, listen string) []string { return []string{bin, "--listen", listen} })
	ctx := ctxT(t)
	c := a.client
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Pid != a.cmd.Process.Pid || info.Protocol != agentproto.ProtocolVersion || info.AgentVersion == "" {
		t.Fatalf("Info = %+v, agent pid %d", info, a.cmd.Process.Pid)
	}
	res, err := c.Run(ctx, agentproto.StartRequest{ID: newID(), Args: []string{"sh", "-c", "echo $AGENT_ENV_VAR $X; echo e >&2; exit 5"}, Env: []string{"X=y"}})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "from-agent-env y\n" || string(res.Stderr) != "e\n" || res.ExitCode != 5 {
		t.Fatalf("Run = %q %q %d", res.Stdout, res.Stderr, res.ExitCode)
	}
	// SIGHUP does not stop the agent.
	if err := a.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := c.Info(ctx); err != nil {
		t.Fatalf("Info after SIGHUP: %v", err)
	}
	// Orphans are reparented to the agent (subreaper) and reaped by it.
	res, err = c.Run(ctx, agentproto.StartRequest{ID: newID(), Args: []string{"sh", "-c", "sleep 0.5 & echo $!"}})
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
	if err != nil {
		t.Fatalf("orphan pid %q", res.Stdout)
	}
	if ppid := parentOf(orphan); ppid != a.cmd.Process.Pid && ppid != 0 {
		t.Fatalf("orphan %d has parent %d, want the agent %d", orphan, ppid, a.cmd.Process.Pid)
	}
	waitGone(t, orphan)
	if z := zombieChildren(a.cmd.Process.Pid); len(z) > 0 {
		t.Fatalf("zombie children of the agent: %v", z)
	}
	// Signals reach processes started by the binary too.
	id := newID()
	if _, err := c.Start(ctx, agentproto.StartRequest{ID: id, Args: []string{"sleep", "100"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Signal(ctx, id, "INT"); err != nil {
		t.Fatal(err)
	}
	s, err := c.Output(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ev := lastEvent(t, s); ev.Signal != "INT" {
		t.Fatalf("exit event %+v", ev)
	}

	// SIGTERM: running processes are stopped, readers get the exit, the agent exits 0.
	long := newID()
	st, err := c.Start(ctx, agentproto.StartRequest{ID: long, Args: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	s, err = c.Output(ctx, long, 0)
	if err != nil {
		t.Fatal(err)
	}
	evCh := make(chan agentproto.Event, 1)
	go func() { evCh <- lastEvent(t, s) }()
	time.Sleep(50 * time.Millisecond) // the stream is open
	a.stop(t)
	if ev := <-evCh; ev.Type != agentproto.EventExit || ev.Signal != "TERM" {
		t.Fatalf("exit event at shutdown = %+v", ev)
	}
	waitGone(t, st.Pid)
	if _, err := os.Stat(a.sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left behind: %v", err)
	}
}

// The agent as PID 1 of a new PID namespace, as in a container, accepting
// only peers from outside it (this test, as the host).
func TestAgentAsPID1(t *testing.T) {
	airtest.RequireRoot(t)
	a := startAgent(t, &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}, func(bin, listen string) []string {
		return []string{bin, "--listen", listen, "--host-peers-only"}
	})
	ctx := ctxT(t)
	c := a.client
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Pid != 1 {
		t.Fatalf("Info.Pid = %d, want 1", info.Pid)
	}
	// Make orphans that exit soon, many times over.
	for range 5 {
		res, err := c.Run(ctx, agentproto.StartRequest{ID: newID(), Args: []string{"sh", "-c", "(sleep 0.2; exit 3) & (sleep 0.1) & echo started"}})
		if err != nil || string(res.Stdout) != "started\n" {
			t.Fatalf("Run = %q, %v", res.Stdout, err)
		}
	}
	host := a.cmd.Process.Pid
	deadline := time.Now().Add(10 * time.Second)
	for {
		kids := childrenOf(host)
		z := zombieChildren(host)
		if len(kids) == 0 && len(z) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent as PID 1 still has children %v, zombies %v", kids, z)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A process that started before SIGTERM dies with it.
	st, err := c.Start(ctx, agentproto.StartRequest{ID: newID(), Args: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	// st.Pid is the pid inside the agent's namespace; on the host it is
	// the agent's only child.
	if st.Pid < 2 {
		t.Fatalf("pid in the namespace = %d", st.Pid)
	}
	kids := childrenOf(host)
	if len(kids) != 1 {
		t.Fatalf("children of the agent: %v", kids)
	}
	// As PID 1 it cannot tell the host's signals from its sandbox's:
	// none stops it or makes it let go of its socket (older agents
	// released it on SIGUSR1). The host stops it with SIGKILL.
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGHUP} {
		if err := a.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := os.Stat(a.sock); err != nil {
		t.Fatalf("the agent's socket after signals: %v", err)
	}
	if res, err := c.Run(ctx, agentproto.StartRequest{ID: newID(), Args: []string{"echo", "serving"}}); err != nil || string(res.Stdout) != "serving\n" {
		t.Fatalf("after SIGTERM, SIGINT, SIGUSR1, SIGUSR2 and SIGHUP: %q, %v\n%s", res.Stdout, err, a.stderr.String())
	}
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	waitGone(t, kids[0])
}

// --pids-max: the agent puts its processes in a child cgroup of its own
// pids cgroup, so a fork bomb fails inside while the agent keeps serving.
func TestPidsMax(t *testing.T) {
	airtest.RequireRoot(t)
	var b [6]byte
	rand.Read(b[:])
	name := "airlock-agent-test-" + hex.EncodeToString(b[:])
	var parent string
	switch {
	case isDir("/sys/fs/cgroup/pids"):
		parent = filepath.Join("/sys/fs/cgroup/pids", name)
	case hasWord("/sys/fs/cgroup/cgroup.subtree_control", "pids"):
		parent = filepath.Join("/sys/fs/cgroup", name)
	default:
		t.Skip("needs a writable pids cgroup controller (cgroup v1 /sys/fs/cgroup/pids or pids enabled in the cgroup v2 root's subtree_control)")
	}
	if err := os.Mkdir(parent, 0o755); err != nil {
		t.Skipf("needs a writable pids cgroup controller: %v", err)
	}
	t.Cleanup(func() { removeCgroupTree(t, parent) })
	const max = 10
	// The agent starts inside parent, which thus is its own pids cgroup.
	a := startAgent(t, nil, func(bin, listen string) []string {
		return []string{"/bin/sh", "-c", `echo $$ > "$1/cgroup.procs" && exec "$2" --listen "$3" --pids-max ` + strconv.Itoa(max), "sh", parent, bin, listen}
	})
	ctx := ctxT(t)
	c := a.client
	workload := filepath.Join(parent, "airlock-workload")
	if got, err := os.ReadFile(filepath.Join(workload, "pids.max")); err != nil || strings.TrimSpace(string(got)) != strconv.Itoa(max) {
		t.Fatalf("workload pids.max = %q, %v\n%s", got, err, a.stderr.String())
	}
	id := newID()
	if _, err := c.Start(ctx, agentproto.StartRequest{ID: id, Args: []string{"sh", "-c", "i=0; while [ $i -lt 50 ]; do sleep 3 & i=$((i+1)); done; wait"}}); err != nil {
		t.Fatal(err)
	}
	s, err := c.Output(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	var stderr []byte
	for {
		ev, err := s.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		stderr = append(stderr, ev.Data...)
	}
	if !strings.Contains(strings.ToLower(string(stderr)), "fork") {
		t.Fatalf("fork bomb output %q: want a fork failure", stderr)
	}
	procs, _ := os.ReadFile(filepath.Join(workload, "cgroup.procs"))
	if n := len(strings.Fields(string(procs))); n == 0 || n > max {
		t.Fatalf("%d processes in the workload cgroup", n)
	}
	if slices.Contains(strings.Fields(string(procs)), strconv.Itoa(a.cmd.Process.Pid)) {
		t.Fatal("the agent is in its own workload cgroup")
	}
	if _, err := c.Info(ctx); err != nil {
		t.Fatalf("agent not serving: %v", err)
	}
	// A process the host starts counts against the limit: while the
	// cgroup is full, a start is refused with a clear error, and nothing
	// joins the cgroup beyond its limit (joining is not checked against
	// pids.max by the kernel).
	waitPids := func(want int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			cur, _ := os.ReadFile(filepath.Join(workload, "pids.current"))
			if strings.TrimSpace(string(cur)) == strconv.Itoa(want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("pids.current %q, want %d", cur, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitPids(0) // the fork bomb's sleeps are gone
	if _, err := c.Start(ctx, agentproto.StartRequest{ID: newID(), Args: []string{"sh", "-c", "i=1; while [ $i -lt " + strconv.Itoa(max) + " ]; do sleep 30 & i=$((i+1)); done; wait"}}); err != nil {
		t.Fatal(err)
	}
	waitPids(max) // the shell and max-1 sleeps
	_, err = c.Start(ctx, agentproto.StartRequest{ID: newID(), Args: []string{"true"}})
	var aerr *agentclient.Error
	if !errors.As(err, &aerr) || aerr.Code != agentproto.CodeExecFailed || !strings.Contains(aerr.Message, "pids limit reached") {
		t.Fatalf("start while the cgroup is full: %v, want exec_failed \"pids limit reached\"", err)
	}
	if cur, _ := os.ReadFile(filepath.Join(workload, "pids.current")); strings.TrimSpace(string(cur)) != strconv.Itoa(max) {
		t.Fatalf("pids.current = %q after the refused start, want the limit %d", cur, max)
	}
	removeCgroupProcs(workload)
	a.stop(t)
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func hasWord(file, word string) bool {
	data, err := os.ReadFile(file)
	return err == nil && slices.Contains(strings.Fields(string(data)), word)
}

func removeCgroupProcs(dir string) {
	data, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

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
			removeCgroupProcs(d)
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

func lastEvent(t *testing.T, s *agentclient.OutputStream) agentproto.Event {
	defer s.Close()
	var last agentproto.Event
	for {
		ev, err := s.Next()
		if errors.Is(err, io.EOF) {
			return last
		}
		if err != nil {
			t.Errorf("Next: %v", err)
			return last
		}
		last = ev
	}
}

// parentOf returns the parent pid of pid (0 if gone).
func parentOf(pid int) int {
	st, _ := procfs.ReadStat(pid)
	return st.PPID
}

func childrenOf(parent int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if parentOf(pid) == parent {
			out = append(out, pid)
		}
	}
	return out
}

func zombieChildren(parent int) []int {
	var out []int
	for _, pid := range childrenOf(parent) {
		if st, _ := procfs.ReadStat(pid); st.State == 'Z' {
			out = append(out, pid)
		}
	}
	return out
}

// waitGone waits until pid no longer exists (not even as a zombie).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, ok := procfs.ReadStat(pid)
		if !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d still exists (state %c)", pid, st.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
