package binpath

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindBesideTheExecutable(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Skip(err)
	}
	// The test binary itself is next to itself.
	got, err := Find(filepath.Base(exe))
	if err != nil || got != exe {
		t.Fatalf("Find(%q) = %q, %v; want %q", filepath.Base(exe), got, err, exe)
	}
}

func TestFindInPath(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "airlock-binpath-test")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	got, err := Find("airlock-binpath-test")
	if err != nil || got != p {
		t.Fatalf("Find = %q, %v; want %q", got, err, p)
	}
}

func TestFindMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := Find("airlock-binpath-missing")
	if !errors.Is(err, exec.ErrNotFound) || !strings.Contains(err.Error(), Beside("airlock-binpath-missing")) {
		t.Fatalf("err = %v; want exec.ErrNotFound naming %s", err, Beside("airlock-binpath-missing"))
	}
}
