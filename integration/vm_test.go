package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/guestboot/guestboottest"
	"github.com/airlockdev/airlock/internal/model"
)

// requireQEMU skips a test that needs QEMU and its tools, except in CI,
// which installs them: there their absence fails the test.
func requireQEMU(t *testing.T) {
	t.Helper()
	for _, b := range []string{"qemu-system-x86_64", "qemu-img", "mkfs.ext4", "apt-get"} {
		if _, err := exec.LookPath(b); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("CI must run the microVM tests: %s is not installed", b)
			}
			t.Skipf("needs %s (scripts/install-deps.sh installs it)", b)
		}
	}
}

// qemuServerArgs make a server's environments runsc (the default) and
// qemu, with the VM boot inputs in the test cache (fetching the kernel
// package once for every test).
func qemuServerArgs(t *testing.T) []string {
	return []string{"--env", "runsc", "--env", "qemu", "--guestboot-dir", guestboottest.Cache(t)}
}

// TestMicroVM is the acceptance test, through the CLI and API as a
// user drives them: `airlock run --env qemu -- uname -r` prints the guest
// kernel's release (Debian 6.1, not the host's); a VM sandbox outlives its
// server (killed with SIGKILL) and is adopted by the next one with its
// processes; the second create of a template × size restores the base
// snapshot the first one made; everything is gone after delete.
func TestMicroVM(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runsc")
	requireQEMU(t)
	bins := build(t)
	s := newServer(t, bins, serverConfig{extraArgs: qemuServerArgs(t)})
	s.start()
	ctx := ctxFor(t, 8*time.Minute)
	l := &lifecycleCLI{t: t, s: s, ctx: ctx}

	host, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	out := l.ok("run", "--env", "qemu", "--", "uname", "-r")
	t.Logf("airlock run --env qemu -- uname -r: %q in %v", strings.TrimSpace(out), time.Since(t0).Round(time.Millisecond))
	if rel := strings.TrimSpace(out); !strings.HasPrefix(rel, "6.1.") || rel == strings.TrimSpace(string(host)) {
		t.Fatalf("uname -r in the VM = %q; want the guest's Debian 6.1 kernel (the host runs %s)", rel, strings.TrimSpace(string(host)))
	}
	// The same template and size again: restored from the base snapshot.
	t0 = time.Now()
	if out := l.ok("run", "--env", "qemu", "--", "echo", "hello"); out != "hello\n" {
		t.Fatalf("second run: %q", out)
	}
	t.Logf("second run (base snapshot): %v", time.Since(t0).Round(time.Millisecond))
	bases, _ := filepath.Glob(filepath.Join(s.dataDir, "runtime", "qemu", ".base", "*", "base.json"))
	if len(bases) == 0 {
		t.Errorf("no base snapshot was made under %s", filepath.Join(s.dataDir, "runtime", "qemu", ".base"))
	}

	sb := createSandbox(ctx, t, s.client(), apiv1.CreateSandboxRequest{Environment: "qemu", Env: map[string]string{"WHO": "vm"}})
	id := model.SandboxID(sb.ID)
	if sb.Source != apiv1.SourceSnapshot {
		t.Errorf("a create with a base snapshot has source %q, want %q", sb.Source, apiv1.SourceSnapshot)
	}
	if got := l.state(id); !strings.HasPrefix(got.Environment, "env:sha256:") {
		t.Fatalf("sandbox environment %q, want qemu's reference", got.Environment)
	}
	if out := l.ok("exec", sb.ID, "--", "sh", "-c", `echo "$WHO"; cat /proc/1/comm; uname -r`); !strings.HasPrefix(out, "vm\nairlock-agent\n6.1.") {
		t.Fatalf("exec in the VM: %q, want the env, the agent as the guest's PID 1 and the guest kernel", out)
	}
	l.ok("exec", "-d", sb.ID, "--", "sh", "-c", counterScript)
	l.waitCounter(id, 3)

	// The VM outlives its server.
	s.kill()
	time.Sleep(time.Second)
	before := qemuPids(t, id)
	if len(before) != 1 {
		t.Fatalf("QEMU of %s after the server was killed: %v, want exactly one", id, before)
	}
	s.start()
	n := l.counter(id)
	l.waitCounter(id, n+3)
	if after := qemuPids(t, id); len(after) != 1 || after[0] != before[0] {
		t.Fatalf("QEMU of %s was %v before the restart and %v after: it must be adopted, not made again", id, before, after)
	}
	l.ok("sandbox", "delete", sb.ID)
	if got := l.state(id); got.State != string(model.StateDeleted) {
		t.Fatalf("after delete: %s", got.State)
	}
	if pids := qemuPids(t, id); len(pids) != 0 {
		t.Fatalf("QEMU of %s still runs after delete: %v", id, pids)
	}
	if _, err := os.Stat(filepath.Join(s.dataDir, "runtime", "qemu", id.String())); !os.IsNotExist(err) {
		t.Fatalf("state dir of %s left after delete (%v)", id, err)
	}
}

// qemuPids are the pids of the QEMU processes of sandbox id.
func qemuPids(t *testing.T, id model.SandboxID) []string {
	t.Helper()
	out, _ := exec.Command("pgrep", "-f", "guest="+id.String()).Output()
	return strings.Fields(string(out))
}
