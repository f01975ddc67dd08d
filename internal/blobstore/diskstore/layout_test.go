package diskstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/blobstore"
	"github.com/airlockdev/airlock/internal/blobstore/diskstore"
)

func TestLayout(t *testing.T) {
	dir := t.TempDir()
	s, err := diskstore.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("layout")
	d := blobstore.FromBytes(data)
	if err := s.Put(context.Background(), d, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, "blobs", "sha256", d.Hex()[:2], d.Hex())
	fi, err := os.Stat(want)
	if err != nil || s.Path(d) != want {
		t.Fatalf("blob at %s (%v), Path says %s", want, err, s.Path(d))
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("blob mode %v, want 0600 (snapshots hold sandbox memory)", fi.Mode().Perm())
	}
}

// A blob found corrupt is moved to quarantine/ and not served again.
func TestCorruptBlobQuarantined(t *testing.T) {
	dir := t.TempDir()
	s, err := diskstore.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("q"), 10_000)
	d := blobstore.FromBytes(data)
	if err := s.Put(context.Background(), d, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.Path(d), bytes.Repeat([]byte("Q"), 10_000), 0o600); err != nil {
		t.Fatal(err)
	}
	rc, _, err := s.Open(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(io.Discard, rc)
	rc.Close()
	if !errors.Is(err, blobstore.ErrCorrupt) {
		t.Fatalf("read: %v", err)
	}
	if _, err := s.Stat(context.Background(), d); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("corrupt blob still in service: %v", err)
	}
	q, _ := os.ReadDir(filepath.Join(dir, "quarantine"))
	if len(q) != 1 {
		t.Fatalf("quarantine holds %v", q)
	}
	// A fresh Put restores it.
	if err := s.Put(context.Background(), d, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
}

// Open removes temporary files of Puts that crashed long ago, not those of
// Puts that may be running.
func TestStaleTempsRemovedOnOpen(t *testing.T) {
	dir := t.TempDir()
	if _, err := diskstore.Open(dir, nil); err != nil {
		t.Fatal(err)
	}
	old, fresh := filepath.Join(dir, "tmp", "put-old"), filepath.Join(dir, "tmp", "put-fresh")
	for _, p := range []string{old, fresh} {
		if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	long := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(old, long, long); err != nil {
		t.Fatal(err)
	}
	s, err := diskstore.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	names, err := s.Temps()
	if err != nil || len(names) != 1 || names[0] != "put-fresh" {
		t.Fatalf("temps after Open: %v, %v", names, err)
	}
}

// Files that are not blobs (wrong name, wrong fan-out directory) are not
// listed.
func TestListSkipsStrayFiles(t *testing.T) {
	dir := t.TempDir()
	s, err := diskstore.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("real")
	d := blobstore.FromBytes(data)
	if err := s.Put(context.Background(), d, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	other := blobstore.FromBytes([]byte("misplaced")).Hex()
	wrongFan := "00"
	if other[:2] == wrongFan {
		wrongFan = "01"
	}
	for _, p := range []string{
		filepath.Join(dir, "blobs", "sha256", d.Hex()[:2], "README"),
		filepath.Join(dir, "blobs", "sha256", wrongFan, other),
	} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var got []blobstore.Digest
	for info, err := range s.List(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, info.Digest)
	}
	if len(got) != 1 || got[0] != d {
		t.Fatalf("List: %v", got)
	}
}
