package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/model"
)

// serialPair returns a serial listener on one end of a socket pair (which,
// like a virtio-serial port, reports POLLHUP once the other end is gone)
// and the other end as the host's connection.
func serialPair(t *testing.T) (*serialListener, net.Conn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		t.Fatal(err)
	}
	hf := os.NewFile(uintptr(fds[1]), "host")
	host, err := net.FileConn(hf)
	hf.Close()
	if err != nil {
		t.Fatal(err)
	}
	l := newSerialListener(fds[0], "test-port")
	l.interval = 2 * time.Millisecond
	t.Cleanup(func() { l.Close(); host.Close() })
	return l, host
}

func TestSerialListenerServesUntilHostLeaves(t *testing.T) {
	l, host := serialPair(t)
	srv, err := New(Options{Env: []string{"PATH=/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, l) }()

	dials := 0
	c := agentclient.New(func(context.Context) (net.Conn, error) {
		dials++
		if dials > 1 {
			return nil, errors.New("the pair has one connection only")
		}
		return host, nil
	}, nil)
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Protocol == 0 {
		t.Fatalf("info %+v", info)
	}
	// The host goes: the agent's connection reads EOF and is dropped, and
	// Accept waits for a host again.
	c.Close()
	host.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		l.mu.Lock()
		cur := l.cur
		l.mu.Unlock()
		if cur == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the connection was not dropped after the host left")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return")
	}
}

func TestSerialListenerAcceptWaitsForHostAndClose(t *testing.T) {
	l, host := serialPair(t)
	c, err := l.Accept() // the host end is connected
	if err != nil {
		t.Fatal(err)
	}
	// One connection at a time: Accept waits until c is closed.
	accepted := make(chan error, 1)
	go func() {
		c2, err := l.Accept()
		if c2 != nil {
			c2.Close()
		}
		accepted <- err
	}()
	host.Close()
	buf := make([]byte, 8)
	if _, err := c.Read(buf); !errors.Is(err, io.EOF) {
		t.Fatalf("Read after the host left: %v, want EOF", err)
	}
	c.Close()
	// The host is gone (POLLHUP): Accept keeps waiting …
	select {
	case err := <-accepted:
		t.Fatalf("Accept returned %v without a host", err)
	case <-time.After(50 * time.Millisecond):
	}
	// … until Close.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-accepted:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end Accept")
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept on a closed listener: %v", err)
	}
}

func TestSerialConnCloseInterruptsRead(t *testing.T) {
	l, _ := serialPair(t)
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 8))
		read <- err
	}()
	time.Sleep(20 * time.Millisecond)
	c.Close()
	select {
	case err := <-read:
		if err == nil {
			t.Fatal("Read succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not interrupt Read")
	}
	// The next connection comes while the host is still there.
	c2, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c2.Close()
}

func TestFindVirtioPort(t *testing.T) {
	dir := t.TempDir()
	for port, name := range map[string]string{"vport0p0": "other\n", "vport0p1": "airlock.agent\n"} {
		if err := os.MkdirAll(filepath.Join(dir, port), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, port, "name"), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := virtioPortsDir
	virtioPortsDir = dir
	defer func() { virtioPortsDir = old }()
	got, err := findVirtioPort("airlock.agent", time.Second)
	if err != nil || got != "/dev/vport0p1" {
		t.Fatalf("findVirtioPort = %q, %v", got, err)
	}
	if _, err := findVirtioPort("missing", 30*time.Millisecond); err == nil {
		t.Fatal("found a missing port")
	}
}

func TestListenSerialRefusesNonDevices(t *testing.T) {
	p := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := listenSerial(mustAddr(t, "serial:"+p)); err == nil {
		t.Fatal("listened on a regular file")
	}
}

func mustAddr(t *testing.T, s string) agentproto.ListenAddr {
	t.Helper()
	a, err := agentproto.ParseListenAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestSerialConnSkipsToPreface(t *testing.T) {
	l, host := serialPair(t)
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stale := bytes.Repeat([]byte("old frames PRI * HTTP/2.0\r\n"), 400) // longer than a read, with a false start
	go func() {
		host.Write(stale)
		host.Write(http2Preface[:5])
		time.Sleep(10 * time.Millisecond)
		host.Write(http2Preface[5:])
		host.Write(testFrame("settings"))
		host.Close()
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if want := string(http2Preface) + string(testFrame("settings")); string(got) != want {
		t.Fatalf("read %q, want %q", got, want)
	}
}

func TestSerialConnHandsOverOnNewPreface(t *testing.T) {
	l, host := serialPair(t)
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	// The first connection's frames — one whose payload holds the preface
	// (an uploaded file may: it must pass untouched) — then, split across
	// writes, a new connection's preface at a frame boundary: the host
	// reconnected unseen.
	frame1 := testFrame("frames-1 " + string(http2Preface) + " PRI * HTTP")
	frame2 := testFrame("frames-2")
	go func() {
		host.Write(append(slices.Clone(http2Preface), frame1[:5]...))
		time.Sleep(10 * time.Millisecond)
		host.Write(append(slices.Clone(frame1[5:]), http2Preface[:5]...))
		time.Sleep(10 * time.Millisecond)
		host.Write(http2Preface[5:10])
		time.Sleep(10 * time.Millisecond)
		host.Write(append(slices.Clone(http2Preface[10:]), frame2...))
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if want := string(http2Preface) + string(frame1); string(got) != want {
		t.Fatalf("first connection read %q, want %q", got, want)
	}
	c.Close()
	c2, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	buf := make([]byte, 100)
	n, err := io.ReadAtLeast(c2, buf, len(http2Preface)+len(frame2))
	if err != nil || string(buf[:n]) != string(http2Preface)+string(frame2) {
		t.Fatalf("second connection read %q, %v", buf[:n], err)
	}
}

// testFrame is an HTTP/2 DATA frame on stream 1 carrying payload.
func testFrame(payload string) []byte {
	n := len(payload)
	return append([]byte{byte(n >> 16), byte(n >> 8), byte(n), 0, 0, 0, 0, 0, 1}, payload...)
}

// hostPort plays QEMU's chardev socket for host connections made one after
// another over one serial pair: a host connection that closes does not
// close the pair (the guest is not told), and what the guest wrote for it
// that it did not read goes to the next one.
type hostPort struct {
	conn    net.Conn
	mu      sync.Mutex
	last    *hostSession
	pending []byte // read for a session after it closed: the next one's
}

func (p *hostPort) dial() *hostSession {
	p.mu.Lock()
	last := p.last
	p.mu.Unlock()
	if last != nil {
		last.Close()
		last.reading.Lock() // its last Read has returned
		last.reading.Unlock()
	}
	p.conn.SetReadDeadline(time.Time{})
	s := &hostSession{p: p}
	p.mu.Lock()
	p.last = s
	p.mu.Unlock()
	return s
}

// hostSession is one host connection over a hostPort.
type hostSession struct {
	p       *hostPort
	closed  atomic.Bool
	reading sync.Mutex // held by a Read in progress
}

func (s *hostSession) Read(b []byte) (int, error) {
	s.reading.Lock()
	defer s.reading.Unlock()
	if s.closed.Load() {
		return 0, net.ErrClosed
	}
	s.p.mu.Lock()
	if len(s.p.pending) > 0 {
		n := copy(b, s.p.pending)
		s.p.pending = s.p.pending[n:]
		s.p.mu.Unlock()
		return n, nil
	}
	s.p.mu.Unlock()
	n, err := s.p.conn.Read(b)
	if s.closed.Load() {
		s.p.mu.Lock()
		s.p.pending = append(s.p.pending, b[:n]...)
		s.p.mu.Unlock()
		return 0, net.ErrClosed
	}
	return n, err
}

func (s *hostSession) Write(b []byte) (int, error) {
	if s.closed.Load() {
		return 0, net.ErrClosed
	}
	return s.p.conn.Write(b)
}

func (s *hostSession) Close() error {
	if !s.closed.Swap(true) {
		s.p.conn.SetReadDeadline(time.Now()) // interrupts a Read in progress
	}
	return nil
}

func (s *hostSession) LocalAddr() net.Addr                { return serialAddr("host") }
func (s *hostSession) RemoteAddr() net.Addr               { return serialAddr("guest") }
func (s *hostSession) SetDeadline(t time.Time) error      { return s.p.conn.SetDeadline(t) }
func (s *hostSession) SetReadDeadline(t time.Time) error  { return s.p.conn.SetReadDeadline(t) }
func (s *hostSession) SetWriteDeadline(t time.Time) error { return s.p.conn.SetWriteDeadline(t) }

// TestSerialReconnectAfterAbandonedStream: a host connection that goes
// in the middle of a download leaves the guest's next frames for the next
// host connection, which agentclient.SyncSerial skips; without it the next
// client reads them as its own (seen in the TCG boot test: a request after
// a reconnect failed with a connection error).
func TestSerialReconnectAfterAbandonedStream(t *testing.T) {
	l, host := serialPair(t)
	srv, err := New(Options{Env: []string{"PATH=/bin:/usr/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, l) }()
	defer func() {
		cancel()
		<-served
	}()

	big := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(big, bytes.Repeat([]byte("0123456789abcdef"), 1<<16), 0o644); err != nil {
		t.Fatal(err)
	}
	port := &hostPort{conn: host}
	newClient := func() *agentclient.Client {
		return agentclient.New(func(ctx context.Context) (net.Conn, error) {
			s := port.dial()
			if err := agentclient.SyncSerial(ctx, s); err != nil {
				s.Close()
				return nil, err
			}
			return s, nil
		}, nil)
	}
	for round := range 5 {
		c := newClient()
		// The handshake and a request must succeed on the first
		// connection: no dialling again.
		if _, err := c.Info(ctx); err != nil {
			t.Fatalf("round %d: info: %v", round, err)
		}
		res, err := c.Run(ctx, agentproto.StartRequest{ID: model.NewProcessID().String(), Args: []string{"/bin/sh", "-c", "echo ok"}})
		if err != nil || string(res.Stdout) != "ok\n" {
			t.Fatalf("round %d: run: %v, stdout %q", round, err, res.Stdout)
		}
		// A download abandoned after its first bytes: the guest goes on
		// writing until the stream's flow-control window is full.
		body, _, err := c.ReadFile(ctx, big)
		if err != nil {
			t.Fatalf("round %d: read file: %v", round, err)
		}
		if _, err := io.ReadFull(body, make([]byte, 100)); err != nil {
			t.Fatalf("round %d: read file: %v", round, err)
		}
		c.Close()
	}
}
