package qmp

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// The tests below drive a real qemu-system-x86_64 (Debian's qemu-system-x86):
// a microvm with no devices, no kernel and -S, so it starts paused and runs
// nothing worth running; TCG, 64 MB.

func qemuBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping QEMU test in -short mode")
	}
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI must run the QEMU tests: qemu-system-x86_64 not found (scripts/install-deps.sh installs qemu-system-x86)")
		}
		t.Skip("qemu-system-x86_64 not found (apt-get install qemu-system-x86): skipping the QEMU tests")
	}
	return bin
}

type qemuProc struct {
	cmd    *exec.Cmd
	sock   string
	stderr *bytes.Buffer
	exited chan struct{}
}

// startQEMU starts a paused microvm with its QMP socket in dir; the process
// is killed and reaped at cleanup.
func startQEMU(t *testing.T, bin, dir, name string, extra ...string) *qemuProc {
	t.Helper()
	sock := filepath.Join(dir, name+".qmp")
	args := append([]string{
		"-M", "microvm", "-nodefaults", "-nographic", "-accel", "tcg", "-m", "64",
		"-qmp", "unix:" + sock + ",server=on,wait=off", "-S",
	}, extra...)
	p := &qemuProc{sock: sock, stderr: new(bytes.Buffer), exited: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stderr = p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
			<-p.exited
		}
		os.Remove(sock)
		if t.Failed() && p.stderr.Len() > 0 {
			t.Logf("%s stderr: %s", name, p.stderr)
		}
	})
	return p
}

// dial waits for the socket (QEMU creates it during start-up) and connects.
func (p *qemuProc) dial(t *testing.T, ctx context.Context) *Client {
	t.Helper()
	for {
		c, err := Dial(ctx, p.sock, Options{})
		if err == nil {
			t.Cleanup(func() { c.Close() })
			return c
		}
		select {
		case <-p.exited:
			t.Fatalf("qemu exited: %v: %s", p.cmd.ProcessState, p.stderr)
		case <-ctx.Done():
			t.Fatalf("dial %s: %v", p.sock, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func tempDir(t *testing.T) string {
	// Unix socket paths are limited to 107 bytes: t.TempDir() can be longer.
	dir, err := os.MkdirTemp("", "qmp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func waitEvent(t *testing.T, c *Client, name string) Event {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-c.Events():
			if !ok {
				t.Fatalf("connection closed waiting for %s: %v", name, c.Err())
			}
			if ev.Name == name {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s event", name)
		}
	}
}

func TestQEMUStatusStopCont(t *testing.T) {
	bin := qemuBinary(t)
	dir := tempDir(t)
	ctx := ctxT(t, 60*time.Second)

	t0 := time.Now()
	p := startQEMU(t, bin, dir, "vm")
	c := p.dial(t, ctx)
	t.Logf("start to QMP ready: %v (QEMU %s)", time.Since(t0), c.Version())

	s, err := c.QueryStatus(ctx)
	if err != nil || s.Running || s.Status != StatusPrelaunch {
		t.Fatalf("status %+v, %v", s, err)
	}
	t1 := time.Now()
	if err := c.Cont(ctx); err != nil {
		t.Fatal(err)
	}
	dCont := time.Since(t1)
	waitEvent(t, c, EventResume)
	if s, err := c.QueryStatus(ctx); err != nil || !s.Running {
		t.Fatalf("after cont: %+v, %v", s, err)
	}
	t1 = time.Now()
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	dStop := time.Since(t1)
	waitEvent(t, c, EventStop)
	t1 = time.Now()
	s, err = c.QueryStatus(ctx)
	dQuery := time.Since(t1)
	if err != nil || s.Running || s.Status != StatusPaused {
		t.Fatalf("after stop: %+v, %v", s, err)
	}
	t.Logf("cont %v, stop %v, query-status %v", dCont, dStop, dQuery)

	// An error from real QEMU carries its class.
	err = c.Execute(ctx, "no-such-command", nil, nil)
	var qe *Error
	if !errors.As(err, &qe) || qe.Class != "CommandNotFound" {
		t.Fatalf("unknown command: %v", err)
	}

	t1 = time.Now()
	if err := c.Quit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
		t.Logf("quit to exit: %v", time.Since(t1))
	case <-time.After(10 * time.Second):
		t.Fatal("qemu did not exit after quit")
	}
}

func TestQEMUMigrateToFileAndRestore(t *testing.T) {
	bin := qemuBinary(t)
	dir := tempDir(t)
	ctx := ctxT(t, 120*time.Second)
	state := filepath.Join(dir, "state.mig")

	src := startQEMU(t, bin, dir, "src")
	c := src.dial(t, ctx)
	if err := c.MigrateSetCapabilities(ctx, MigrationCapability{"events", true}); err != nil {
		t.Fatal(err)
	}
	if err := c.Cont(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	t0 := time.Now()
	if err := c.Migrate(ctx, "exec:cat > "+state); err != nil {
		t.Fatal(err)
	}
	m, err := c.WaitMigration(ctx, 2*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	dSave := time.Since(t0)
	waitEvent(t, c, EventMigration)
	fi, err := os.Stat(state)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("save: %v wall (QEMU total-time %d ms), %d bytes", dSave, m.TotalTime, fi.Size())
	if s, err := c.QueryStatus(ctx); err != nil || s.Status != StatusPostMigrate {
		t.Logf("source after migration: %+v, %v", s, err)
	}
	if err := c.Quit(ctx); err != nil {
		t.Fatal(err)
	}

	// Restore: a new QEMU with -incoming defer (no -S needed: the source was
	// paused, so the restored VM is too).
	t0 = time.Now()
	dst := startQEMU(t, bin, dir, "dst", "-incoming", "defer")
	d := dst.dial(t, ctx)
	dReady := time.Since(t0)
	if s, err := d.QueryStatus(ctx); err != nil || s.Status != StatusInMigrate {
		t.Fatalf("before migrate-incoming: %+v, %v", s, err)
	}
	t1 := time.Now()
	if err := d.MigrateIncoming(ctx, "exec:cat "+state); err != nil {
		t.Fatal(err)
	}
	s, err := d.WaitStatus(ctx, 2*time.Millisecond, func(s Status) bool { return s.Status != StatusInMigrate })
	if err != nil {
		t.Fatal(err)
	}
	dLoad := time.Since(t1)
	if s.Running || s.Status != StatusPaused {
		t.Fatalf("restored VM: %+v", s)
	}
	if mi, err := d.QueryMigrate(ctx); err == nil {
		t.Logf("destination query-migrate: status %q", mi.Status)
	}
	t.Logf("restore: QEMU start to QMP ready %v, migrate-incoming to paused %v, total %v", dReady, dLoad, time.Since(t0))

	t1 = time.Now()
	if err := d.Cont(ctx); err != nil {
		t.Fatal(err)
	}
	if s, err := d.QueryStatus(ctx); err != nil || !s.Running {
		t.Fatalf("after cont: %+v, %v", s, err)
	}
	t.Logf("cont after restore: %v", time.Since(t1))
	if err := d.Quit(ctx); err != nil {
		t.Fatal(err)
	}
}

// A QEMU that stops answering (SIGSTOP here) must not hang the caller; once
// it answers again, its late reply is dropped by id and the next command gets
// its own.
func TestQEMUHungProcess(t *testing.T) {
	bin := qemuBinary(t)
	dir := tempDir(t)
	ctx := ctxT(t, 60*time.Second)
	p := startQEMU(t, bin, dir, "vm")
	c := p.dial(t, ctx)
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer p.cmd.Process.Signal(syscall.SIGCONT)
	t0 := time.Now()
	_, err := c.QueryStatus(ctxT(t, 100*time.Millisecond))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Fatalf("took %v", d)
	}
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := c.Cont(ctx); err != nil {
		t.Fatal(err)
	}
	if s, err := c.QueryStatus(ctx); err != nil || !s.Running {
		t.Fatalf("after SIGCONT: %+v, %v", s, err)
	}
}
