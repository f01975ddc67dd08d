package runtime

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlockdev/airlock/internal/model"
)

type testManifest struct {
	Format string `json:"format"`
}

func TestWriteAndFindLiveSnapshot(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "snap")
	id := model.NewSandboxID()
	read := func(d string) (testManifest, error) { return ReadSnapshotManifest[testManifest](d, "m.json") }

	if _, found, err := ExistingLiveSnapshot(id, dir, read); err != nil || found {
		t.Fatalf("before: found %v, %v", found, err)
	}
	if _, _, err := ExistingLiveSnapshot(id, "rel/dir", read); err == nil {
		t.Fatal("a relative directory was taken")
	}
	if _, _, err := ExistingLiveSnapshot(model.SandboxID("../x"), dir, read); err == nil {
		t.Fatal("a bad sandbox ID was taken")
	}

	// A crash's leftover is replaced; a failed write leaves nothing.
	if err := os.MkdirAll(filepath.Join(dir+SnapshotTempSuffix, "old"), 0o700); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := WriteLiveSnapshot(dir, func(tmp string) error {
		if _, err := os.Stat(filepath.Join(tmp, "old")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the leftover is still in the temporary directory: %v", err)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("failed write: %v", err)
	}
	for _, d := range []string{dir, dir + SnapshotTempSuffix} {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after a failed write: %v", d, err)
		}
	}

	if err := WriteLiveSnapshot(dir, func(tmp string) error {
		return os.WriteFile(filepath.Join(tmp, "m.json"), []byte(`{"format":"f/1"}`), 0o600)
	}); err != nil {
		t.Fatal(err)
	}
	m, found, err := ExistingLiveSnapshot(id, dir, read)
	if err != nil || !found || m.Format != "f/1" {
		t.Fatalf("after: %+v found %v, %v", m, found, err)
	}
	if _, err := os.Stat(dir + SnapshotTempSuffix); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("temporary directory left: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "m.json"), []byte(`{`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, found, err := ExistingLiveSnapshot(id, dir, read); err == nil || found {
		t.Fatalf("a torn manifest: found %v, %v", found, err)
	}
}
