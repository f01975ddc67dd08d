package agent

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agentproto"
)

// TestListenerReleaseAndReacquire checks what a runsc checkpoint relies
// on: on SignalReleaseListener the socket file and every accepted
// connection go while Accept keeps waiting; on SignalReacquireListener
// the listener takes a new socket and Accept returns its connections.
func TestListenerReleaseAndReacquire(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "agent.sock")
	ln, err := Listen(agentproto.ListenAddr{Scheme: agentproto.SchemeUnix, Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	acceptErr := make(chan error, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			accepted <- c
		}
	}()
	client, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server := <-accepted

	if err := syscall.Kill(os.Getpid(), SignalReleaseListener); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the socket to go", func() bool {
		_, err := os.Lstat(path)
		return errors.Is(err, os.ErrNotExist)
	})
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := client.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("read from a connection of the released listener = %v, want EOF", err)
	}
	if _, err := server.Write([]byte("x")); err == nil {
		t.Error("the accepted connection is still open after release")
	}
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		t.Fatal("dial of a released listener succeeded")
	}
	select {
	case err := <-acceptErr:
		t.Fatalf("Accept returned during the release: %v", err)
	default:
	}

	if err := syscall.Kill(os.Getpid(), SignalReacquireListener); err != nil {
		t.Fatal(err)
	}
	var again net.Conn
	waitUntil(t, "the listener to listen again", func() bool {
		again, err = net.Dial("unix", path)
		return err == nil
	})
	defer again.Close()
	select {
	case c := <-accepted:
		c.Close()
	case err := <-acceptErr:
		t.Fatalf("Accept after reacquire: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Accept did not return the new connection")
	}
	if err := ln.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-acceptErr; !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close = %v, want net.ErrClosed", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket after Close: %v, want it removed", err)
	}
}

// TestListenerRelistensAfterTimeout: a release that no reacquire follows
// ends by itself.
func TestListenerRelistensAfterTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := listenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	l := ln.(*unixListener)
	l.release()
	l.mu.Lock()
	l.resetTimer(50 * time.Millisecond) // instead of ReleaseTimeout
	l.mu.Unlock()
	waitUntil(t, "the listener to listen again", func() bool {
		c, err := net.Dial("unix", path)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
