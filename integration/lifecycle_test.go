package integration

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/guestboot/guestboottest"
	"github.com/airlockdev/airlock/internal/model"
)

// counterScript counts in memory, ten times a second, and writes each
// value to /tmp/n: a process that continues shows a growing number, one
// that was restarted starts again at 1, one that is gone stops it.
const counterScript = `i=0; while :; do i=$((i+1)); echo $i > /tmp/n.new; mv /tmp/n.new /tmp/n; sleep 0.1; done`

// TestLifecycle drives pause, resume, suspend and wake through the CLI on
// runc, runsc and QEMU microVMs, with a counting process in the sandbox.
func TestLifecycle(t *testing.T) {
	airtest.RequireRoot(t)
	bins := build(t)
	for _, rt := range []string{"runc", "runsc", "qemu"} {
		t.Run(rt, func(t *testing.T) {
			if rt == "qemu" {
				requireQEMU(t)
			} else {
				airtest.RequireBinary(t, rt)
			}
			cfg := serverConfig{runtime: rt}
			if rt == "qemu" {
				cfg = serverConfig{runtime: rt, extraArgs: []string{"--guestboot-dir", guestboottest.Cache(t)}}
			}
			s := newServer(t, bins, cfg)
			s.start()
			ctx := ctxFor(t, 5*time.Minute)
			l := &lifecycleCLI{t: t, s: s, ctx: ctx}

			sb := createSandbox(ctx, t, s.client(), apiv1.CreateSandboxRequest{})
			id := model.SandboxID(sb.ID)
			out := l.ok("exec", "-d", sb.ID, "--", "sh", "-c", counterScript)
			if !strings.HasPrefix(strings.TrimSpace(out), "proc_") {
				t.Fatalf("exec -d printed %q, want a process ID", out)
			}
			l.ok("exec", sb.ID, "--", "sh", "-c", "echo kept > /keep.txt")
			l.waitCounter(id, 3)

			t.Run("pause and resume", func(t *testing.T) {
				l := l.in(t)
				// The counter's pace over 3 s running, to compare the
				// paused 3 s with.
				start := l.counter(id)
				time.Sleep(3 * time.Second)
				before := l.counter(id)
				tBefore := time.Now()
				running := before - start
				if running < 6 {
					t.Fatalf("the counter went from %d to %d in 3 s running: too slow to tell a frozen one from it", start, before)
				}
				l.timed("pause", "sandbox", "pause", sb.ID)
				tPaused := time.Now()
				if got := l.state(id); got.State != string(model.StatePaused) {
					t.Fatalf("after pause: %s", got.State)
				}
				_, stderr := l.fail(1, "exec", sb.ID, "--", "cat", "/tmp/n")
				if !strings.Contains(stderr, "(sandbox_paused)") || !strings.Contains(stderr, "resume") {
					t.Fatalf("a command in a paused sandbox: %q, want sandbox_paused saying how to resume", stderr)
				}
				// Frozen: three seconds paused add (almost) nothing.
				time.Sleep(3 * time.Second)
				tResume := time.Now()
				l.timed("resume", "sandbox", "resume", sb.ID)
				after := l.counter(id)
				tAfter := time.Now()
				t.Logf("counter: +%d in 3 s running; %d before the pause, %d after 3 s paused and the resume", running, before, after)
				if after < before {
					t.Fatalf("counter went from %d to %d: the process was restarted", before, after)
				}
				// Paused, it may count only while the pause and the resume
				// (and the reads of the counter) take effect: at the
				// running pace through those, plus half of what it would
				// have counted through the pause had it not been frozen.
				// Measured, not assumed: with slow servers (built with
				// -race, a loaded machine) those latencies are seconds.
				perSec := float64(running) / 3
				unpaused := tPaused.Sub(tBefore) + tAfter.Sub(tResume)
				limit := perSec * (unpaused + tResume.Sub(tPaused)/2).Seconds()
				if paused := after - before; float64(paused) >= limit {
					t.Errorf("counter went from %d to %d across a %v pause (+%d in 3 s running, %v not paused): it was not frozen",
						before, after, tResume.Sub(tPaused).Round(time.Millisecond), running, unpaused.Round(time.Millisecond))
				}
				l.waitCounter(id, after+5) // and it keeps counting

				// A command may ask to resume first.
				l.ok("sandbox", "pause", sb.ID)
				if out := l.ok("exec", "--resume", sb.ID, "--", "cat", "/keep.txt"); out != "kept\n" {
					t.Fatalf("exec --resume: %q", out)
				}
				if got := l.state(id); got.State != string(model.StateRunning) {
					t.Fatalf("after exec --resume: %s", got.State)
				}
				// A resume of a running sandbox is refused and says why.
				if _, stderr := l.fail(1, "sandbox", "resume", sb.ID); !strings.Contains(stderr, "(invalid_transition)") {
					t.Fatalf("resume of a running sandbox: %q", stderr)
				}
			})

			t.Run("suspend and wake", func(t *testing.T) {
				l := l.in(t)
				before := l.counter(id)
				stdout, stderr, code := s.cli(ctx, "-o", "json", "sandbox", "suspend", sb.ID)
				if code != 0 && strings.Contains(stderr, "(not_supported)") {
					// The API refuses what the runtime's declared
					// capabilities (Info().Capabilities) do not include.
					t.Skipf("%s declares no snapshot capability: %s", rt, strings.TrimSpace(stderr))
				}
				if code != 0 {
					t.Fatalf("suspend: exit %d\n%s\n%s", code, stdout, stderr)
				}
				l.logOperation("suspend", stdout)
				got := l.state(id)
				wantKind := apiv1.SnapshotMemory
				if rt == "runc" {
					wantKind = apiv1.SnapshotFilesystem // no memory snapshot without CRIU
				}
				if got.State != string(model.StateSuspended) || got.Snapshot == nil || got.Snapshot.Kind != wantKind || got.Snapshot.SizeBytes <= 0 {
					t.Fatalf("suspended sandbox: state %s, snapshot %+v; want suspended with a %s snapshot", got.State, got.Snapshot, wantKind)
				}
				if table := l.ok("sandbox", "get", sb.ID); !strings.Contains(table, "Snapshot:") || !strings.Contains(table, wantKind) {
					t.Errorf("sandbox get does not show the %s snapshot:\n%s", wantKind, table)
				}
				if _, stderr := l.fail(1, "exec", sb.ID, "--", "true"); !strings.Contains(stderr, "(sandbox_suspended)") || !strings.Contains(stderr, "wake") {
					t.Fatalf("a command in a suspended sandbox: %q", stderr)
				}
				if _, stderr := l.fail(1, "sandbox", "pause", sb.ID); !strings.Contains(stderr, "(invalid_transition)") || !strings.Contains(stderr, "is suspended") {
					t.Fatalf("pause of a suspended sandbox: %q, want 409 invalid_transition", stderr)
				}

				stdout, stderr, code = s.cli(ctx, "-o", "json", "sandbox", "wake", sb.ID)
				if code != 0 {
					t.Fatalf("wake: exit %d\n%s\n%s", code, stdout, stderr)
				}
				l.logOperation("wake", stdout)
				// The wake says what a filesystem-only snapshot means, and
				// only then.
				if said := strings.Contains(stderr, "kept the filesystem only"); said != (wantKind == apiv1.SnapshotFilesystem) {
					t.Errorf("wake of a %s snapshot: stderr %q", wantKind, stderr)
				}
				woken := l.state(id)
				if woken.State != string(model.StateRunning) {
					t.Fatalf("after wake: %s", woken.State)
				}
				if out := l.ok("exec", sb.ID, "--", "cat", "/keep.txt"); out != "kept\n" {
					t.Fatalf("the file written before suspend: %q", out)
				}
				now := l.counter(id)
				switch wantKind {
				case apiv1.SnapshotMemory:
					if now < before {
						t.Fatalf("counter %d after wake, %d before suspend: the process did not continue", now, before)
					}
					l.waitCounter(id, now+5)
				case apiv1.SnapshotFilesystem:
					// Only files were kept: the counter's last value is
					// there, and nothing counts any more.
					if now < before {
						t.Fatalf("counter file %d after wake, %d before suspend", now, before)
					}
					time.Sleep(time.Second)
					if again := l.counter(id); again != now {
						t.Fatalf("counter moved from %d to %d after a filesystem-only wake: a process survived that the snapshot says did not", now, again)
					}
				}

				// A command may ask to wake its suspended sandbox first.
				l.ok("sandbox", "suspend", sb.ID)
				if out := l.ok("exec", "--resume", sb.ID, "--", "cat", "/keep.txt"); out != "kept\n" {
					t.Fatalf("exec --resume of a suspended sandbox: %q", out)
				}
				if got := l.state(id); got.State != string(model.StateRunning) || got.Snapshot != nil {
					t.Fatalf("after exec --resume: %s, snapshot %+v", got.State, got.Snapshot)
				}
			})

			t.Run("delete paused and suspended", func(t *testing.T) {
				l := l.in(t)
				paused := createSandbox(ctx, t, s.client(), apiv1.CreateSandboxRequest{})
				l.ok("exec", "-d", paused.ID, "--", "sh", "-c", counterScript)
				l.ok("sandbox", "pause", paused.ID)
				ids := []model.SandboxID{model.SandboxID(paused.ID)}

				suspended := createSandbox(ctx, t, s.client(), apiv1.CreateSandboxRequest{})
				l.ok("exec", "-d", suspended.ID, "--", "sh", "-c", counterScript)
				_, stderr, code := s.cli(ctx, "sandbox", "suspend", suspended.ID)
				switch {
				case code == 0:
					ids = append(ids, model.SandboxID(suspended.ID))
				case strings.Contains(stderr, "(not_supported)"):
					t.Logf("%s cannot suspend (%s): only the paused sandbox's delete is checked", rt, strings.TrimSpace(stderr))
					l.ok("sandbox", "delete", suspended.ID)
				default:
					t.Fatalf("suspend: exit %d: %s", code, stderr)
				}
				// The first sandbox too (it may be suspended, if the
				// suspend subtest was skipped it runs).
				ids = append(ids, id)
				for _, sid := range ids {
					l.ok("sandbox", "delete", sid.String())
					if got := l.state(sid); got.State != string(model.StateDeleted) {
						t.Fatalf("after delete: %s", got.State)
					}
				}
				list, err := s.client().ListAllSandboxes(ctx, client.ListSandboxesQuery{States: model.AllSandboxStates()})
				if err != nil {
					t.Fatal(err)
				}
				for _, sb := range list.Sandboxes {
					if sb.State != string(model.StateDeleted) {
						t.Fatalf("sandbox %s is still %s", sb.ID, sb.State)
					}
				}
				assertNoLeftovers(t, s.dataDir, ids, false)
				assertNoFilesOf(t, s.dataDir, ids)
			})
		})
	}
}

// lifecycleCLI runs the CLI for one test.
type lifecycleCLI struct {
	t   *testing.T
	s   *server
	ctx context.Context
}

func (l *lifecycleCLI) in(t *testing.T) *lifecycleCLI { return &lifecycleCLI{t: t, s: l.s, ctx: l.ctx} }

// ok runs the CLI and fails the test unless it exits 0; it returns stdout.
func (l *lifecycleCLI) ok(args ...string) string {
	l.t.Helper()
	stdout, stderr, code := l.s.cli(l.ctx, args...)
	if code != 0 {
		l.t.Fatalf("airlock %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, stdout, stderr)
	}
	return stdout
}

// timed is ok for a lifecycle command, logging how long its operation
// took.
func (l *lifecycleCLI) timed(what string, args ...string) {
	l.t.Helper()
	l.logOperation(what, l.ok(append([]string{"-o", "json"}, args...)...))
}

// logOperation logs how long the operation in out (a SandboxWithOperation
// as JSON) took, from its creation to its end as the server recorded them.
func (l *lifecycleCLI) logOperation(what, out string) {
	l.t.Helper()
	var res apiv1.SandboxWithOperation
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		l.t.Fatalf("%s output: %v\n%s", what, err, out)
	}
	if f := res.Operation.FinishedAt; f != nil {
		l.t.Logf("%s on %s: the operation took %s", what, l.s.cfg.runtime, f.Sub(res.Operation.CreatedAt).Round(time.Millisecond))
	}
}

// fail runs the CLI and fails the test unless it exits with code.
func (l *lifecycleCLI) fail(code int, args ...string) (string, string) {
	l.t.Helper()
	stdout, stderr, got := l.s.cli(l.ctx, args...)
	if got != code {
		l.t.Fatalf("airlock %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), got, code, stdout, stderr)
	}
	return stdout, stderr
}

// state returns the sandbox as `airlock -o json sandbox get` shows it.
func (l *lifecycleCLI) state(id model.SandboxID) apiv1.Sandbox {
	l.t.Helper()
	var sb apiv1.Sandbox
	out := l.ok("-o", "json", "sandbox", "get", id.String())
	if err := json.Unmarshal([]byte(out), &sb); err != nil {
		l.t.Fatalf("sandbox get: %v\n%s", err, out)
	}
	return sb
}

// counter reads the counting process's last value.
func (l *lifecycleCLI) counter(id model.SandboxID) int {
	l.t.Helper()
	out := l.ok("exec", id.String(), "--", "cat", "/tmp/n")
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		l.t.Fatalf("counter %q: %v", out, err)
	}
	return n
}

// waitCounter waits until the counter reaches at least n. Right after
// `exec -d` the counter may not have written /tmp/n yet (a TCG guest
// under load starts it seconds later): a missing file is waited for too.
func (l *lifecycleCLI) waitCounter(id model.SandboxID, n int) {
	l.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		stdout, stderr, code := l.s.cli(l.ctx, "exec", id.String(), "--", "cat", "/tmp/n")
		got, err := strconv.Atoi(strings.TrimSpace(stdout))
		switch {
		case code == 0 && err == nil && got >= n:
			return
		case code != 0 && !strings.Contains(stderr, "No such file"):
			l.t.Fatalf("airlock exec %s -- cat /tmp/n: exit %d\nstdout: %s\nstderr: %s", id, code, stdout, stderr)
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("counter %q (exit %d, %s), want at least %d within 30 s: the process does not count", stdout, code, strings.TrimSpace(stderr), n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// assertNoFilesOf checks that nothing under the data dir is named after
// one of the sandboxes (a snapshot, a state dir, a log), whatever runtime
// or component wrote it.
func assertNoFilesOf(t *testing.T, dataDir string, ids []model.SandboxID) {
	t.Helper()
	_ = filepath.WalkDir(dataDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if !os.IsNotExist(err) {
				t.Errorf("walk %s: %v", p, err)
			}
			return nil
		}
		for _, id := range ids {
			if strings.Contains(d.Name(), id.String()) {
				t.Errorf("left after delete: %s", p)
			}
		}
		return nil
	})
}
