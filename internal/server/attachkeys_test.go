package server

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

func TestOpenAttachKeys(t *testing.T) {
	dd, err := openDataDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dd.close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ring, err := openAttachKeys(dd, DefaultAttachKeyMaxAge, log)
	if err != nil {
		t.Fatal(err)
	}
	keys := ring.Keys()
	if len(keys) != 1 || !keys[0].Active {
		t.Fatalf("keys %+v", keys)
	}
	for _, d := range []string{"keys", attachKeysDir} {
		if fi, err := os.Stat(dd.join(d)); err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s: %v, %v; want a 0700 directory", d, fi, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dd.join(attachKeysDir), keys[0].ID+".key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v; want 0600", fi, err)
	}
	// A restart keeps the key.
	again, err := openAttachKeys(dd, DefaultAttachKeyMaxAge, log)
	if err != nil || again.Keys()[0].ID != keys[0].ID {
		t.Fatalf("reopened: %+v, %v", again.Keys(), err)
	}
}
