package oci

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

// WritableLayer names the overlay's upper directory and, for a sandbox in
// a user namespace, its id range; a sandbox without one is not found.
func TestWritableLayer(t *testing.T) {
	r := &Runtime{stateRoot: t.TempDir()}
	id := model.NewSandboxID()
	if _, err := r.WritableLayer(id); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("no sandbox: %v, want ErrNotFound", err)
	}
	dirs := r.dirs(id)
	if err := os.MkdirAll(dirs.upper, 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := r.WritableLayer(id)
	if err != nil || l.Dir != dirs.upper || l.IDs != nil {
		t.Fatalf("runsc-like (no range): %+v, %v", l, err)
	}
	if err := os.WriteFile(filepath.Join(dirs.state, rangeFile), []byte("1073741824 65536\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err = r.WritableLayer(id)
	if err != nil || l.IDs == nil || l.IDs.Host != 1<<30 || l.IDs.Size != 65536 {
		t.Fatalf("with a range: %+v, %v", l, err)
	}
}
