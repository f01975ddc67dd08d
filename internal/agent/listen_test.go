package agent

import (
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/airtest"
)

// acceptAll accepts on ln until it fails, handing out what it gets.
func acceptAll(ln net.Listener) (<-chan net.Conn, <-chan error) {
	accepted := make(chan net.Conn, 16)
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
	return accepted, acceptErr
}

// TestListenerReleaseAndRelisten checks what a runsc checkpoint relies
// on: on Release the socket file and every accepted connection go while
// Accept keeps waiting; once the host creates agentproto.RelistenTrigger
// the listener removes it and takes a new socket, and Accept returns its
// connections. Signals do nothing (agents before this released on SIGUSR1,
// which the workload could send).
func TestListenerReleaseAndRelisten(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	path := filepath.Join(dir, "agent.sock")
	ln, err := Listen(agentproto.ListenAddr{Scheme: agentproto.SchemeUnix, Path: path}, ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted, acceptErr := acceptAll(ln)
	client, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server := <-accepted

	if err := ln.(*unixListener).Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket after Release: %v, want it gone", err)
	}
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
	// Still released a while later: nothing but the trigger (or the
	// timeout) ends it.
	time.Sleep(20 * relistenPoll)
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the released listener listened again without the trigger: %v", err)
	}
	select {
	case err := <-acceptErr:
		t.Fatalf("Accept returned during the release: %v", err)
	default:
	}

	trigger := filepath.Join(dir, agentproto.RelistenTrigger)
	if err := os.WriteFile(trigger, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var again net.Conn
	waitUntil(t, "the listener to listen again", func() bool {
		again, err = net.Dial("unix", path)
		return err == nil
	})
	defer again.Close()
	if _, err := os.Lstat(trigger); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("trigger after the listener took it: %v, want it removed", err)
	}
	select {
	case c := <-accepted:
		c.Close()
	case err := <-acceptErr:
		t.Fatalf("Accept after relisten: %v", err)
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

// TestListenerReleaseKeepsAskingConnection: ReleaseExcept leaves the
// asking connection open (and the socket file, which goes last) until its
// peer closes it, or until the grace runs out; Close meanwhile removes the
// socket file too.
func TestListenerReleaseKeepsAskingConnection(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, l *unixListener, client net.Conn)
	}{
		{"peer closes", func(t *testing.T, l *unixListener, client net.Conn) { client.Close() }},
		{"grace runs out", func(t *testing.T, l *unixListener, client net.Conn) {
			client.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadAll(client); err != nil { // the "x" below, then EOF
				t.Errorf("read after the grace = %v, want EOF", err)
			}
		}},
		{"listener closes", func(t *testing.T, l *unixListener, client net.Conn) {
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "agent.sock")
			ln, err := listenUnix(path, ListenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			l := ln.(*unixListener)
			l.releaseGrace = 100 * time.Millisecond
			accepted, _ := acceptAll(ln)
			asking, err := net.Dial("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			defer asking.Close()
			other, err := net.Dial("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			keep := <-accepted
			<-accepted
			if err := l.ReleaseExcept(keep); err != nil {
				t.Fatal(err)
			}
			other.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := other.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
				t.Errorf("the other connection after the release: %v, want EOF", err)
			}
			if _, err := keep.Write([]byte("x")); err != nil {
				t.Errorf("the asking connection was closed at once: %v", err)
			}
			if _, err := os.Lstat(path); err != nil {
				t.Errorf("socket while the asking connection is open: %v", err)
			}
			tc.end(t, l, asking)
			waitUntil(t, "the socket to go", func() bool {
				_, err := os.Lstat(path)
				return errors.Is(err, os.ErrNotExist)
			})
		})
	}
}

// TestListenerRelistensAfterTimeout: a release that no trigger follows
// ends by itself; a stale trigger from before a start is removed, so it
// cannot end a later release at once.
func TestListenerRelistensAfterTimeout(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.sock")
	if err := os.WriteFile(filepath.Join(dir, agentproto.RelistenTrigger), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := listenUnix(path, ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := os.Lstat(filepath.Join(dir, agentproto.RelistenTrigger)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale trigger after Listen: %v", err)
	}
	l := ln.(*unixListener)
	l.releaseTimeout = 100 * time.Millisecond
	released := time.Now()
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the listener to listen again", func() bool {
		c, err := net.Dial("unix", path)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	if d := time.Since(released); d < l.releaseTimeout {
		t.Fatalf("listened again after %v, before the timeout %v", d, l.releaseTimeout)
	}
}

// TestListenerHostPeersOnly: with HostPeersOnly, a peer in the agent's PID
// namespace (here: this test process and its children, on the host) is
// closed unread and Accept goes on waiting; a peer outside it (the host of
// an agent that is PID 1 of a namespace of its own: see
// TestHostPeerAccepted) is accepted.
func TestListenerHostPeersOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := Listen(agentproto.ListenAddr{Scheme: agentproto.SchemeUnix, Path: path}, ListenOptions{HostPeersOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted, _ := acceptAll(ln)
	for range 3 {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Errorf("read from a refused connection = %v, want EOF", err)
		}
		c.Close()
	}
	select {
	case c := <-accepted:
		c.Close()
		t.Fatal("a peer in the agent's PID namespace was accepted")
	case <-time.After(100 * time.Millisecond):
	}
}

// TestHostPeerAccepted runs a HostPeersOnly listener as PID 1 of a new PID
// namespace (this test binary again, TestHelperHostPeerListener) and
// connects from outside: the connection is accepted and served.
func TestHostPeerAccepted(t *testing.T) {
	airtest.RequireRoot(t)
	path := filepath.Join(t.TempDir(), "agent.sock")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHostPeerListener$")
	cmd.Env = append(os.Environ(), "AIRLOCK_TEST_HOST_PEER_SOCKET="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	var c net.Conn
	waitUntil(t, "the helper to listen", func() bool {
		var err error
		c, err = net.Dial("unix", path)
		return err == nil
	})
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "accepted\n" {
		t.Fatalf("from the listener in its own PID namespace: %q, %v\n%s", got, err, out.String())
	}
}

// TestHelperHostPeerListener is TestHostPeerAccepted's listener: it
// answers one accepted connection with "accepted".
func TestHelperHostPeerListener(t *testing.T) {
	path := os.Getenv("AIRLOCK_TEST_HOST_PEER_SOCKET")
	if path == "" {
		t.Skip("a helper of TestHostPeerAccepted")
	}
	if os.Getpid() != 1 {
		t.Fatalf("pid %d, want 1 of a new PID namespace", os.Getpid())
	}
	ln, err := Listen(agentproto.ListenAddr{Scheme: agentproto.SchemeUnix, Path: path}, ListenOptions{HostPeersOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("accepted\n"))
	c.Close()
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
