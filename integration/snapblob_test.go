package integration

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// TestSnapshotThroughBlobStore: a cluster of two nodes (one database, one
// file:// blob store) on runc and runsc. A saved snapshot of a sandbox on
// node A is pushed to the blob store (storage saving → stored); A loses
// its copy and dies; a create from the snapshot lands on node B, which
// pulls it: the file written before the snapshot is there and, on runsc,
// the counting process continues. A tampered chunk makes a later pull fail
// clearly (the create fails, nothing is left of the pull). Deleting the
// snapshot (its node dead) removes its record and every blob of it.
func TestSnapshotThroughBlobStore(t *testing.T) {
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) { testSnapshotThroughBlobStore(t, rt) })
	}
}

func testSnapshotThroughBlobStore(t *testing.T, rt string) {
	blobDir := shortTempDir(t)
	c := newClusterOf(t, clusterSpec{runtime: rt, nodes: 2, apis: 1, extraArgs: []string{"--blob-store", "file://" + blobDir}})
	ctx := ctxFor(t, 8*time.Minute)
	a, b := c.nodes[0], c.nodes[1]
	cl := c.apis[0].client()
	var ids []model.SandboxID
	t.Cleanup(func() {
		// A comes back (its lost sandbox is removed by its resync) for
		// the check that nothing is left anywhere.
		c.use(t)
		c.deleteAll(ctxFor(t, 2*time.Minute), t, ids)
	})
	memory := rt == "runsc"

	src := createSandbox(ctx, t, cl, apiv1.CreateSandboxRequest{NodeSelector: nodeSelector(a)})
	srcID := model.SandboxID(src.ID)
	ids = append(ids, srcID)
	if src.NodeID != string(a.nodeID()) {
		t.Fatalf("source on %s, want node A %s", src.NodeID, a.nodeID())
	}
	if out := execIn(ctx, t, cl, srcID, "sh", "-c", "echo before > /keep.txt"); out.exitCode != 0 {
		t.Fatalf("write /keep.txt: %+v", out)
	}
	counterAt := 0 // read before the snapshot: the restored counter starts at or above it
	if memory {
		startCounter(ctx, t, cl, srcID)
		counterAt = readCounter(ctx, t, cl, srcID)
	}

	res, err := cl.SnapshotSandbox(ctx, srcID, apiv1.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	snapID := model.SnapshotID(res.Snapshot.ID)
	if op, err := cl.WaitOperation(ctx, model.OperationID(res.Operation.ID)); err != nil || op.State != string(model.OpSucceeded) {
		t.Fatalf("snapshot operation: %+v, %v", op, err)
	}
	readyAt := time.Now()
	snap := waitSnapshot(ctx, t, cl, snapID, func(s apiv1.SavedSnapshot) bool { return s.Storage == "stored" })
	t.Logf("%s: stored %v after ready (size %d bytes); A's log: %s", rt, time.Since(readyAt).Round(time.Millisecond), snap.SizeBytes,
		logLine(a.log.String(), "snapshot pushed"))
	if snap.NodeID != string(a.nodeID()) || snap.State != "ready" {
		t.Fatalf("snapshot %+v", snap)
	}
	if n := snapshotBlobs(t, blobDir); n < 2 {
		t.Fatalf("%d snapshot blobs in the blob store, want a manifest and chunks", n)
	}

	// Node A loses its copy, then dies.
	aCopy := snapshotCopies(t, a.dataDir, snapID)
	if len(aCopy) != 1 {
		t.Fatalf("A's copies of the snapshot: %v", aCopy)
	}
	if err := os.RemoveAll(aCopy[0]); err != nil {
		t.Fatal(err)
	}
	a.kill()
	waitNodeState(ctx, t, cl, a.nodeID(), model.NodeDead)

	start := time.Now()
	made := createSandbox(ctx, t, cl, apiv1.CreateSandboxRequest{Snapshot: snapID.String()})
	madeID := model.SandboxID(made.ID)
	ids = append(ids, madeID)
	t.Logf("%s: create from the stored snapshot on B: %v; B's log: %s", rt, time.Since(start).Round(time.Millisecond),
		logLine(b.log.String(), "snapshot pulled"))
	if made.NodeID != string(b.nodeID()) {
		t.Fatalf("made on %s, want node B %s", made.NodeID, b.nodeID())
	}
	if out := execIn(ctx, t, cl, madeID, "cat", "/keep.txt"); out.exitCode != 0 || out.stdout != "before\n" {
		t.Fatalf("cat /keep.txt on B: %+v", out)
	}
	if memory {
		first := readCounter(ctx, t, cl, madeID)
		if first < counterAt {
			t.Fatalf("the restored counter is at %d, below %d read before the snapshot", first, counterAt)
		}
		deadline := time.Now().Add(20 * time.Second)
		for readCounter(ctx, t, cl, madeID) <= first {
			if time.Now().After(deadline) {
				t.Fatal("the restored counter does not count: the process did not continue")
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	if len(snapshotCopies(t, b.dataDir, snapID)) != 1 {
		t.Fatal("B keeps no copy of the snapshot it pulled")
	}

	// A tampered chunk: B, without its copy, cannot pull it; the create
	// fails and leaves nothing of the pull.
	if _, err := cl.DeleteSandbox(ctx, madeID); err != nil {
		t.Fatal(err)
	}
	c.apis[0].waitState(ctx, madeID, model.StateDeleted)
	b.stop()
	for _, p := range snapshotCopies(t, b.dataDir, snapID) {
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
	}
	tamperLargestChunk(t, blobDir)
	b.start()
	waitNodeState(ctx, t, cl, b.nodeID(), model.NodeActive)
	bad, err := cl.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Snapshot: snapID.String()})
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, model.SandboxID(bad.Sandbox.ID))
	_, err = cl.WaitOperation(ctx, model.OperationID(bad.Operation.ID))
	if err == nil || !strings.Contains(err.Error(), "cannot be pulled") || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("create from a tampered snapshot: %v, want it failed: cannot be pulled, corrupt", err)
	}
	if got, err := cl.GetSandbox(ctx, model.SandboxID(bad.Sandbox.ID)); err != nil || got.State != string(model.StateFailed) {
		t.Fatalf("the sandbox of the failed create: %+v, %v", got, err)
	}
	t.Logf("tampered: %v", err)
	if left := snapshotCopies(t, b.dataDir, snapID); len(left) != 0 {
		t.Fatalf("the failed pull left %v", left)
	}

	// Deleted with its node dead: B removes its record and its blobs.
	if _, err := cl.DeleteSnapshot(ctx, snapID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := cl.GetSnapshot(ctx, snapID)
		var apiErr *client.APIError
		if errors.As(err, &apiErr) && apiErr.Code == apiv1.CodeSnapshotNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the deleted snapshot is still there: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := snapshotBlobs(t, blobDir); n != 0 {
		t.Fatalf("%d blobs of the deleted snapshot left in the blob store", n)
	}
}

// startCounter starts the fork tests' counter in the background.
func startCounter(ctx context.Context, t *testing.T, cl *client.Client, id model.SandboxID) {
	t.Helper()
	if _, err := cl.CreateCommand(ctx, id, apiv1.CreateCommandRequest{Args: []string{"sh", "-c", forkCounter}, Background: true}); err != nil {
		t.Fatalf("start the counter: %v", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for readCounter(ctx, t, cl, id) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the counter does not count")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func readCounter(ctx context.Context, t *testing.T, cl *client.Client, id model.SandboxID) int {
	t.Helper()
	out := execIn(ctx, t, cl, id, "cat", "/n")
	n, err := strconv.Atoi(strings.TrimSpace(out.stdout))
	if err != nil {
		return 0 // not written yet
	}
	return n
}

func waitSnapshot(ctx context.Context, t *testing.T, cl *client.Client, id model.SnapshotID, done func(apiv1.SavedSnapshot) bool) apiv1.SavedSnapshot {
	t.Helper()
	for {
		s, err := cl.GetSnapshot(ctx, id)
		if err == nil && done(s) {
			return s
		}
		select {
		case <-ctx.Done():
			t.Fatalf("snapshot %s: %+v, %v", id, s, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func waitNodeState(ctx context.Context, t *testing.T, cl *client.Client, id model.NodeID, state model.NodeState) {
	t.Helper()
	for {
		n, err := cl.GetNode(ctx, id)
		if err == nil && n.State == string(state) && (state != model.NodeActive || n.HeartbeatAgeMS < clusterDeadAfter.Milliseconds()/2) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("node %s never became %s: %+v, %v", id, state, n, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// snapshotCopies lists a node's directories (complete or pulling) of the
// snapshot.
func snapshotCopies(t *testing.T, dataDir string, id model.SnapshotID) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dataDir, "snapshots", "*", id.String()+"*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// snapshotBlobs counts the blob store's blobs that are a snapshot's.
func snapshotBlobs(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(filepath.Join(dir, "blobs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if isSnapshotBlob(t, p) {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func isSnapshotBlob(t *testing.T, path string) bool {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := make([]byte, 32)
	n, _ := f.Read(head)
	return bytes.HasPrefix(head[:n], []byte("airlock-snapshot-"))
}

// tamperLargestChunk flips a byte in the middle of the largest snapshot
// chunk in the blob store.
func tamperLargestChunk(t *testing.T, dir string) {
	t.Helper()
	var best string
	var size int64
	err := filepath.WalkDir(filepath.Join(dir, "blobs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !isSnapshotBlob(t, p) {
			return err
		}
		if fi, err := d.Info(); err == nil && fi.Size() > size {
			best, size = p, fi.Size()
		}
		return nil
	})
	if err != nil || best == "" {
		t.Fatalf("no snapshot chunk to tamper with: %v", err)
	}
	b, err := os.ReadFile(best)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x55
	if err := os.Chmod(best, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(best, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// logLine returns the first log line containing what ("" if none).
func logLine(log, what string) string {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, what) {
			return regexp.MustCompile(`\s+`).ReplaceAllString(l, " ")
		}
	}
	return ""
}
