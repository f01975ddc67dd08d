package integration

import (
	"context"
	"encoding/json"
	"errors"
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

// forkCounter counts in memory, ten times a second, into /n (on the root
// filesystem, which a snapshot keeps; /tmp may be a tmpfs).
const forkCounter = `i=0; while :; do i=$((i+1)); echo $i > /n.new; mv /n.new /n; sleep 0.1; done`

// TestSnapshotsAndFork drives saved snapshots and forks through the CLI on
// runsc and qemu (memory: processes continue) and runc (filesystem: files
// only),
// as a project's member: `snapshot create` leaves the source running and
// gives a ready snapshot that `snapshot list` shows; `sandbox create
// --snapshot` starts a sandbox from it with the file written before (and,
// on runsc, the counting process running on); `sandbox fork --count 2`
// makes two such sandboxes; a fork the project's quota does not admit
// makes none; another project's snapshot is not found; what a fork writes
// stays its own; `snapshot delete` removes the snapshot, and its files
// (and the fork's snapshot) leave the node.
func TestSnapshotsAndFork(t *testing.T) {
	airtest.RequireRoot(t)
	bins := build(t)
	for _, rt := range []string{"runsc", "runc", "qemu"} {
		t.Run(rt, func(t *testing.T) {
			s := newServer(t, bins, forkServerConfig(t, rt))
			s.start()
			ctx := ctxFor(t, 6*time.Minute)
			memory := rt != "runc"

			var prj apiv1.Project
			s.cliJSON(ctx, &prj, "admin", "project", "create", "fork-e2e")
			var key apiv1.APIKey
			s.cliJSON(ctx, &key, "admin", "key", "create", "--project", prj.ID, "--role", "member")
			mc, err := client.New(s.url, key.Token)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { deleteAllOf(t, mc) })
			m := &lifecycleCLI{t: t, s: s, ctx: ctx}
			member := func(args ...string) string {
				t.Helper()
				return m.ok(append([]string{"--api-key", key.Token}, args...)...)
			}
			memberFail := func(code int, args ...string) string {
				t.Helper()
				_, stderr := m.fail(code, append([]string{"--api-key", key.Token}, args...)...)
				return stderr
			}
			counter := func(id string) int {
				t.Helper()
				out := member("exec", id, "--", "cat", "/n")
				n, err := strconv.Atoi(strings.TrimSpace(out))
				if err != nil {
					t.Fatalf("counter of %s: %q", id, out)
				}
				return n
			}
			counting := func(id string, from int) bool {
				t.Helper()
				deadline := time.Now().Add(20 * time.Second)
				for time.Now().Before(deadline) {
					if counter(id) > from {
						return true
					}
					time.Sleep(300 * time.Millisecond)
				}
				return false
			}

			var src apiv1.SandboxWithOperation
			start := time.Now()
			decode(t, member("-o", "json", "sandbox", "create"), &src)
			t.Logf("cold create on %s: %v (to compare the creates from a snapshot with)", rt, time.Since(start).Round(time.Millisecond))
			srcID := src.Sandbox.ID
			member("exec", "-d", srcID, "--", "sh", "-c", forkCounter)
			member("exec", srcID, "--", "sh", "-c", "echo before > /keep.txt")
			if !counting(srcID, 2) {
				t.Fatal("the source's counter does not count")
			}

			// GET /v1/environments says what a fork keeps here.
			envs, err := mc.ListEnvironments(ctx)
			if err != nil {
				t.Fatal(err)
			}
			wantFork := map[bool]string{true: "memory", false: "filesystem"}[memory]
			for _, e := range envs.Environments {
				if e.Name == rt && e.Enabled && e.Fork != wantFork {
					t.Fatalf("environment %s: fork %q, want %q", rt, e.Fork, wantFork)
				}
			}

			// A saved snapshot; the source runs on.
			start = time.Now()
			var snap apiv1.SavedSnapshot
			decode(t, member("-o", "json", "snapshot", "create", srcID, "--name", "first-"+rt), &snap)
			t.Logf("snapshot create on %s: %v", rt, time.Since(start).Round(time.Millisecond))
			wantKind := apiv1.SnapshotFilesystem
			if memory {
				wantKind = apiv1.SnapshotMemory
			}
			if snap.State != string(model.SnapshotReady) || snap.Kind != wantKind || snap.SourceSandboxID != srcID || snap.SizeBytes <= 0 || snap.Name != "first-"+rt {
				t.Fatalf("snapshot %+v: want ready, kind %s, of %s", snap, wantKind, srcID)
			}
			atSnap := counter(srcID)
			if got := m.stateWith(key.Token, srcID); got != string(model.StateRunning) || !counting(srcID, atSnap) {
				t.Fatalf("the source after the snapshot: %s, counting %v", got, counting(srcID, atSnap))
			}
			member("exec", srcID, "--", "sh", "-c", "echo after > /after.txt")
			if list := member("snapshot", "list"); !strings.Contains(list, snap.ID) || !strings.Contains(list, "ready") {
				t.Fatalf("snapshot list:\n%s", list)
			}
			if list := member("snapshot", "list", "--name", "first-"+rt); !strings.Contains(list, snap.ID) {
				t.Fatalf("snapshot list --name first-%s:\n%s", rt, list)
			}
			if list := member("snapshot", "list", "--name", "other"); strings.Contains(list, snap.ID) {
				t.Fatalf("snapshot list --name other:\n%s", list)
			}

			// Another project's snapshot is not there for it.
			if _, stderr, code := s.cli(ctx, "snapshot", "get", snap.ID); code == 0 || !strings.Contains(stderr, "(snapshot_not_found)") {
				t.Fatalf("another project's snapshot get: exit %d, %s", code, stderr)
			}
			if _, stderr, code := s.cli(ctx, "sandbox", "create", "--snapshot", snap.ID); code == 0 || !strings.Contains(stderr, "(snapshot_not_found)") {
				t.Fatalf("another project's create --snapshot: exit %d, %s", code, stderr)
			}
			if _, stderr, code := s.cli(ctx, "snapshot", "delete", snap.ID); code == 0 || !strings.Contains(stderr, "(snapshot_not_found)") {
				t.Fatalf("another project's snapshot delete: exit %d, %s", code, stderr)
			}

			// A sandbox from the snapshot.
			start = time.Now()
			var made apiv1.SandboxWithOperation
			decode(t, member("-o", "json", "sandbox", "create", "--snapshot", snap.ID), &made)
			t.Logf("create --snapshot on %s: %v", rt, time.Since(start).Round(time.Millisecond))
			checkForked(t, member, made.Sandbox, snap.ID, memory, counter, counting)

			// A fork of two; the quota admits all of them or none.
			if _, stderr, code := s.cli(ctx, "admin", "project", "quota", prj.ID, "--sandboxes", "3"); code != 0 {
				t.Fatalf("set quota: exit %d, %s", code, stderr)
			}
			if stderr := memberFail(1, "sandbox", "fork", srcID, "--count", "2"); !strings.Contains(stderr, "(quota_exceeded)") {
				t.Fatalf("a fork over the quota: %s", stderr)
			}
			if list, err := mc.ListSandboxes(ctx, client.ListSandboxesQuery{}); err != nil || len(list.Sandboxes) != 2 {
				t.Fatalf("after a fork over the quota: %d sandboxes (%v), want the 2 from before", len(list.Sandboxes), err)
			}
			if stderr := memberFail(2, "sandbox", "fork", srcID, "--count", "17"); !strings.Contains(stderr, "--count must be between 1 and 16") {
				t.Fatalf("fork --count 17: %s", stderr)
			}
			if _, err := mc.ForkSandbox(ctx, model.SandboxID(srcID), apiv1.ForkRequest{Count: 17}); !isCode(err, apiv1.CodeInvalidRequest) {
				t.Fatalf("POST fork count 17: %v, want invalid_request", err)
			}
			member("sandbox", "delete", made.Sandbox.ID)
			waitDeleted(ctx, t, mc, model.SandboxID(made.Sandbox.ID))
			before := counter(srcID)
			start = time.Now()
			var forked apiv1.ForkResult
			decode(t, member("-o", "json", "sandbox", "fork", srcID, "--count", "2"), &forked)
			t.Logf("fork --count 2 on %s: %v (until both run)", rt, time.Since(start).Round(time.Millisecond))
			if len(forked.Sandboxes) != 2 {
				t.Fatalf("fork made %d sandboxes", len(forked.Sandboxes))
			}
			for _, f := range forked.Sandboxes {
				if f.Sandbox.ID == srcID || f.Sandbox.State != string(model.StateRunning) {
					t.Fatalf("forked sandbox %+v", f.Sandbox)
				}
				if got := member("exec", f.Sandbox.ID, "--", "sh", "-c", "cat /keep.txt /after.txt"); got != "before\nafter\n" {
					t.Fatalf("files in a fork: %q", got)
				}
				if memory {
					if n := counter(f.Sandbox.ID); n < before || !counting(f.Sandbox.ID, n) {
						t.Fatalf("the fork's counter is %d (the source's was %d before the fork) and does not go on", n, before)
					}
				}
			}
			member("exec", forked.Sandboxes[0].Sandbox.ID, "--", "sh", "-c", "echo fork > /fork-only.txt")
			if got := member("exec", srcID, "--", "sh", "-c", "ls /fork-only.txt 2>/dev/null; cat /keep.txt"); got != "before\n" {
				t.Fatalf("the source after a fork wrote: %q", got)
			}
			if !counting(srcID, counter(srcID)) {
				t.Fatal("the source stopped counting after the fork")
			}

			// Delete: gone, its files and the fork's snapshot's too.
			member("snapshot", "delete", snap.ID)
			snapDir := filepath.Join(s.dataDir, "snapshots", rt)
			waitUntil(ctx, t, "the snapshots and their files to go", func() bool {
				_, err := mc.GetSnapshot(ctx, model.SnapshotID(snap.ID))
				entries, _ := os.ReadDir(snapDir)
				return isCode(err, apiv1.CodeSnapshotNotFound) && len(entries) == 0
			})
			if stderr := memberFail(1, "sandbox", "create", "--snapshot", snap.ID); !strings.Contains(stderr, "(snapshot_not_found)") {
				t.Fatalf("create from a deleted snapshot: %s", stderr)
			}
		})
	}
}

// checkForked checks a sandbox made from snapshot snap of a source that
// wrote /keep.txt and ran a counter before it.
func checkForked(t *testing.T, member func(...string) string, sb apiv1.Sandbox, snap string, memory bool,
	counter func(string) int, counting func(string, int) bool) {
	t.Helper()
	if sb.State != string(model.StateRunning) || sb.FromSnapshot != snap {
		t.Fatalf("sandbox from a snapshot: %+v", sb)
	}
	if got := member("exec", sb.ID, "--", "sh", "-c", "cat /keep.txt; test -e /after.txt && echo after; true"); got != "before\n" {
		t.Fatalf("files in the sandbox from the snapshot: %q", got)
	}
	n := counter(sb.ID)
	if memory != counting(sb.ID, n) {
		t.Fatalf("the counter in a sandbox from a snapshot counts: %v, want %v (memory snapshot)", !memory, memory)
	}
}

func decode(t *testing.T, out string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
}

// isCode reports whether err is an API error with code.
func isCode(err error, code string) bool {
	var ae *client.APIError
	return errors.As(err, &ae) && ae.Code == code
}

// waitUntil polls cond until it holds or ctx ends.
func waitUntil(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// deleteAllOf deletes every sandbox of the client's project and waits.
func deleteAllOf(t *testing.T, c *client.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := c.ListAllSandboxes(ctx, client.ListSandboxesQuery{})
	if err != nil {
		t.Errorf("list: %v", err)
		return
	}
	for _, sb := range list.Sandboxes {
		if sb.State != string(model.StateDeleting) {
			if _, err := c.DeleteSandbox(ctx, model.SandboxID(sb.ID)); err != nil {
				t.Errorf("delete %s: %v", sb.ID, err)
			}
		}
	}
	for _, sb := range list.Sandboxes {
		waitDeleted(ctx, t, c, model.SandboxID(sb.ID))
	}
}

// stateWith is state as another key sees it.
func (l *lifecycleCLI) stateWith(key, id string) string {
	l.t.Helper()
	var sb apiv1.Sandbox
	decode(l.t, l.ok("--api-key", key, "-o", "json", "sandbox", "get", id), &sb)
	return sb.State
}

// forkServerConfig is a server whose only (so default) environment is rt,
// skipping the test when rt cannot run here.
func forkServerConfig(t *testing.T, rt string) serverConfig {
	t.Helper()
	if rt == "qemu" {
		requireQEMU(t)
		return serverConfig{extraArgs: []string{"--env", "qemu", "--guestboot-dir", guestboottest.Cache(t)}}
	}
	airtest.RequireBinary(t, rt)
	return serverConfig{runtime: rt}
}

// TestCrashDuringSnapshot kills the server before and after the runtime
// writes a saved snapshot, restarts it, and checks the snapshot
// converges: the repeated request (same Idempotency-Key) replays, its
// operation succeeds, the snapshot is ready and a sandbox starts from it;
// a half-written snapshot directory no record wants (what a crash of
// the runtime's copy leaves) is removed by the restarted server; after the
// delete no snapshot file is left.
func TestCrashDuringSnapshot(t *testing.T) {
	airtest.RequireRoot(t)
	bins := build(t)
	for _, rt := range []string{"runc", "runsc", "qemu"} {
		for _, point := range []string{"snapshot.before-runtime", "snapshot.after-runtime"} {
			t.Run(rt+"/"+point, func(t *testing.T) {
				s := newServer(t, bins, forkServerConfig(t, rt))
				s.start()
				ctx := ctxFor(t, 3*time.Minute)
				c := s.client()
				sb := createSandbox(ctx, t, c, apiv1.CreateSandboxRequest{})
				id := model.SandboxID(sb.ID)
				if out := execIn(ctx, t, c, id, "sh", "-c", "echo before > /root/mark"); out.exitCode != 0 {
					t.Fatalf("write a file: %+v", out)
				}
				s.stop()
				// What a crash in the middle of a runtime's copy leaves,
				// for a snapshot whose record is gone.
				snapDir := filepath.Join(s.dataDir, "snapshots", rt)
				orphan := filepath.Join(snapDir, model.NewSnapshotID().String()+".tmp")
				if err := os.MkdirAll(filepath.Join(orphan, "upper"), 0o700); err != nil {
					t.Fatal(err)
				}

				s.cfg.crashAt = point
				s.start()
				keyed := client.WithIdempotencyKey(ctx, model.IdempotencyKey("snapshot-"+id.String()))
				_, firstErr := s.client().SnapshotSandbox(keyed, id, apiv1.SnapshotRequest{}) // may die before it answers
				s.waitExit(60 * time.Second)
				if !strings.Contains(s.log.String(), "fault injection: killing the server") {
					t.Fatalf("the server did not die at %s:\n%s", point, s.log.String())
				}
				s.cfg.crashAt = ""
				s.start()
				c = s.client()
				res, err := c.SnapshotSandbox(keyed, id, apiv1.SnapshotRequest{})
				if err != nil {
					t.Fatalf("repeat the snapshot (first attempt: %v): %v", firstErr, err)
				}
				op, err := c.WaitOperation(ctx, model.OperationID(res.Operation.ID))
				if err != nil || op.State != string(model.OpSucceeded) {
					t.Fatalf("snapshot after a crash at %s: %+v, %v", point, op, err)
				}
				snapID := model.SnapshotID(res.Snapshot.ID)
				snap, err := c.GetSnapshot(ctx, snapID)
				if err != nil || snap.State != string(model.SnapshotReady) {
					t.Fatalf("snapshot after a crash at %s: %+v, %v", point, snap, err)
				}
				if got := s.waitState(ctx, id, model.StateRunning); got.State != string(model.StateRunning) {
					t.Fatalf("source after the snapshot: %s", got.State)
				}
				made := createSandbox(ctx, t, c, apiv1.CreateSandboxRequest{Snapshot: snap.ID})
				if out := execIn(ctx, t, c, model.SandboxID(made.ID), "cat", "/root/mark"); out.stdout != "before\n" {
					t.Fatalf("a sandbox from the snapshot reads %+v", out)
				}
				waitUntil(ctx, t, "the orphaned half-written snapshot to go", func() bool {
					_, err := os.Stat(orphan)
					return errors.Is(err, os.ErrNotExist)
				})
				entries, _ := os.ReadDir(snapDir)
				if len(entries) != 1 || entries[0].Name() != snapID.String() {
					t.Fatalf("snapshot directory holds %v, want only %s", entries, snapID)
				}
				if _, err := c.DeleteSnapshot(ctx, snapID); err != nil {
					t.Fatal(err)
				}
				waitUntil(ctx, t, "the deleted snapshot's files to go", func() bool {
					entries, _ := os.ReadDir(snapDir)
					return len(entries) == 0
				})
			})
		}
	}
}
