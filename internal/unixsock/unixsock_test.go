package unixsock

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// listen serves one echo of a byte on dir/name.
func listen(t *testing.T, dir, name string) {
	t.Helper()
	old, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	// Bound by a relative name: dir may be longer than a socket address.
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", name)
	if cerr := os.Chdir(old); cerr != nil {
		t.Fatal(cerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b := make([]byte, 1)
		if _, err := c.Read(b); err == nil {
			_, _ = c.Write(b)
		}
	}()
}

func TestDialInLongDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 100), strings.Repeat("e", 100))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	listen(t, dir, "s.sock")
	c, err := DialIn(context.Background(), dir, "s.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte{7}); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := c.Read(b); err != nil || b[0] != 7 {
		t.Fatalf("read %v, %v", b, err)
	}
}

func TestDialInRefusesLinksAndFiles(t *testing.T) {
	real := t.TempDir()
	listen(t, real, "s.sock")
	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(real, "s.sock"), filepath.Join(dir, "link.sock")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "file.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(dir, "linkdir")); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := DialIn(ctx, dir, "link.sock"); err == nil {
		t.Error("DialIn followed a symlinked socket name")
	}
	if _, err := DialIn(ctx, dir, "file.sock"); !errors.Is(err, ErrNotSocket) {
		t.Errorf("a regular file: %v; want ErrNotSocket", err)
	}
	if _, err := DialIn(ctx, filepath.Join(dir, "linkdir"), "s.sock"); err == nil {
		t.Error("DialIn followed a symlinked directory")
	}
	if _, err := DialIn(ctx, dir, "missing.sock"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing socket: %v; want os.ErrNotExist", err)
	}
}
