package server

import (
	"os"
	"path/filepath"
	"testing"
)

func TestResolveSandboxDir(t *testing.T) {
	if got, err := resolveSandboxDir(""); err != nil || got != "" {
		t.Fatalf(`resolveSandboxDir("") = %q, %v; want "" (the default under the data dir)`, got, err)
	}
	base := t.TempDir()
	real := filepath.Join(base, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	got, err := resolveSandboxDir(filepath.Join(link, "sandboxes"))
	if err != nil {
		t.Fatal(err)
	}
	realBase, _ := filepath.EvalSymlinks(real)
	if got != filepath.Join(realBase, "sandboxes") {
		t.Fatalf("resolveSandboxDir = %q, want %q (created, symlinks resolved)", got, filepath.Join(realBase, "sandboxes"))
	}
	if fi, err := os.Stat(got); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("created dir: %v, %v; want a 0700 directory", fi, err)
	}
}
