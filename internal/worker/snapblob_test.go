package worker

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlockdev/airlock/internal/blobstore/diskstore"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/snapblob"
)

// A stored snapshot missing here is pulled into the snapshot directory; a
// local one that is not here is refused for good; a pull that does not
// verify leaves nothing; a crashed pull's directory goes at start.
func TestLocalSnapshotPulls(t *testing.T) {
	ctx := context.Background()
	blobs, err := diskstore.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "snapshot.json"), []byte(`{"format":"f/1"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	md, _, err := snapblob.Push(ctx, blobs, src, func(context.Context, []model.BlobDigest) error { return nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	snapDir := filepath.Join(t.TempDir(), "snapshots")
	stale := filepath.Join(snapDir, "snp_aaaaaaaaaaaaaaaaaaaaaaaaaa"+pullSuffix)
	if err := os.MkdirAll(stale, 0o700); err != nil {
		t.Fatal(err)
	}
	w, err := New(Config{
		Runtime: &fakeRuntime{}, AgentBinary: "/bin/true", SnapshotDir: snapDir, Blobs: blobs,
		TemplateDir: func(model.TemplateDigest) (string, error) { return "/tpl", nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a crashed pull's directory survived the start: %v", err)
	}

	stored := model.SnapshotRecord{ID: model.NewSnapshotID(), NodeID: "node_other", Storage: model.SnapshotStored, BlobManifest: model.BlobDigest(md.String())}
	dir, err := w.localSnapshot(ctx, stored)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "snapshot.json")); err != nil || string(b) != `{"format":"f/1"}` {
		t.Fatalf("pulled snapshot.json: %q, %v", b, err)
	}
	if ids, err := w.ListSnapshots(ctx); err != nil || len(ids) != 1 || ids[0] != stored.ID {
		t.Fatalf("ListSnapshots after the pull = %v, %v", ids, err)
	}
	if again, err := w.localSnapshot(ctx, stored); err != nil || again != dir {
		t.Fatalf("second use: %s, %v (want the copy, no pull)", again, err)
	}

	local := model.SnapshotRecord{ID: model.NewSnapshotID(), NodeID: "node_other", Storage: model.SnapshotSaving}
	if _, err := w.localSnapshot(ctx, local); !errors.Is(err, ErrPermanent) {
		t.Fatalf("a snapshot that is not stored and not here: %v, want ErrPermanent", err)
	}

	missing := model.SnapshotRecord{ID: model.NewSnapshotID(), Storage: model.SnapshotStored,
		BlobManifest: "sha256:0000000000000000000000000000000000000000000000000000000000000000"}
	if _, err := w.localSnapshot(ctx, missing); !errors.Is(err, ErrPermanent) {
		t.Fatalf("a manifest the blob store lacks: %v, want ErrPermanent", err)
	}
	left, _ := os.ReadDir(snapDir)
	if len(left) != 1 {
		t.Fatalf("snapshot directory after a failed pull: %v, want the one pulled copy", left)
	}
}
