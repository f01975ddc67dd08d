package filelock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// lockLater starts a Lock of path that waits for the holder (given 20 ms
// to start waiting) and delivers the locked file.
func lockLater(t *testing.T, path string) <-chan *os.File {
	got := make(chan *os.File, 1)
	go func() {
		g, err := Lock(context.Background(), path)
		if err != nil {
			t.Error(err)
		}
		got <- g
	}()
	time.Sleep(20 * time.Millisecond)
	return got
}

func TestLockWaitsForTheHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	f, err := Lock(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := Lock(ctx, path); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Lock while held = %v; want the context's deadline", err)
	}
	got := lockLater(t, path)
	f.Close()
	select {
	case g := <-got:
		g.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("Lock did not get the lock its holder released")
	}
}

// A holder that removes the lock file before releasing it does not let a
// waiter hold the removed file while a third locks the new one.
func TestLockAfterRemoval(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	f, err := Lock(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	got := lockLater(t, path)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	f.Close()
	g := <-got
	defer g.Close()
	var a, b os.FileInfo
	if a, err = g.Stat(); err != nil {
		t.Fatal(err)
	}
	if b, err = os.Stat(path); err != nil {
		t.Fatalf("the lock file is not at its path: %v", err)
	}
	if !os.SameFile(a, b) {
		t.Fatal("Lock holds a file that is no longer at its path")
	}
}
