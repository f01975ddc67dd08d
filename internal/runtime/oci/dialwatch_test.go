package oci

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/unixsock"
)

// A socket bound in the watched directory ends the wait at once (the hour
// it was given would fail the test by its timeout), and the dial after it
// connects; the watch does not follow a symlinked directory.
func TestRunDirWatchWakesOnSocket(t *testing.T) {
	dir := t.TempDir()
	w, err := watchRunDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ln, err := net.Listen("unix", filepath.Join(dir, socketName))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := w.wait(context.Background(), time.Hour); err != nil {
		t.Fatalf("wait = %v", err)
	}
	conn, err := unixsock.DialIn(context.Background(), dir, socketName)
	if err != nil {
		t.Fatalf("dial after the event: %v", err)
	}
	conn.Close()

	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if _, err := watchRunDir(link); err == nil {
		t.Fatal("watchRunDir followed a symlink")
	}
}

// A wait ends with its context, also one that ends while it waits.
func TestRunDirWatchEndsWithContext(t *testing.T) {
	w, err := watchRunDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.wait(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait with an ended context = %v", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.wait(ctx, time.Hour) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("wait whose context ended = %v", err)
	}
	// The zero watch (none could be made) waits too, and ends with ctx.
	if err := (&runDirWatch{}).wait(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("zero watch = %v", err)
	}
}
