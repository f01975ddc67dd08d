package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/agentproto"
)

// Serial transport (virtio-serial, virtio_console in the guest kernel).
//
// The port's device can be open only once (a second open is EBUSY), and it
// tells the guest whether the host end (QEMU's chardev socket) has a
// client: while it has none, read returns 0 at once and poll reports
// POLLHUP; writes block until it has one. So the listener opens the device
// once, polls it until the host is connected, and hands out a connection
// over a duplicate of the descriptor, registered with Go's poller
// (O_NONBLOCK), so that closing the connection interrupts its Read and
// Write. When the host disconnects, the connection's Read returns io.EOF,
// the HTTP/2 server closes it, and the next Accept waits for the host to
// connect again (a restarted host re-adopts the VM).
//
// If the host disconnects and reconnects before the old connection has
// read its EOF (virtio_console then never reports the disconnect), the old
// connection reads the new client's preface as frames of the old stream
// and fails; its HTTP/2 server closes it, and Accept hands out a fresh
// connection. Bytes of the dead host connection may still be waiting in
// the port then (or the new client's preface may be half consumed), so a
// new connection discards everything before the HTTP/2 client preface
// (see serialConn.Read). The host's side may likewise receive the old
// connection's last frames and must dial again when its handshake fails.

// serialPollInterval is how often Accept polls for the host's connection.
const serialPollInterval = 15 * time.Millisecond

// serialPortWait is how long Listen waits for a named port to appear
// (the virtio_console module may still be probing).
const serialPortWait = 10 * time.Second

// virtioPortsDir lists the guest's virtio-serial ports (a var for tests).
var virtioPortsDir = "/sys/class/virtio-ports"

// listenSerial opens addr's device (or finds the port it names) and
// returns a listener on it.
//
// A port name serves, besides the port of that name, every port named
// NAME.<n> (the host gives each concurrent connection a port of its own:
// a port carries one connection at a time).
func listenSerial(addr agentproto.ListenAddr) (net.Listener, error) {
	if !addr.IsPortName() {
		return listenSerialPath(addr, addr.Path)
	}
	path, err := findVirtioPort(addr.Path, serialPortWait)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	first, err := listenSerialPath(addr, path)
	if err != nil {
		return nil, err
	}
	lns := []net.Listener{first}
	for _, p := range siblingPorts(addr.Path) {
		ln, err := listenSerialPath(addr, p)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, err
		}
		lns = append(lns, ln)
	}
	if len(lns) == 1 {
		return first, nil
	}
	return newMultiListener(lns), nil
}

// siblingPorts are the devices of the ports named name.<digits>.
func siblingPorts(name string) []string {
	var out []string
	names, _ := filepath.Glob(filepath.Join(virtioPortsDir, "*", "name"))
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			continue
		}
		suffix, ok := strings.CutPrefix(strings.TrimSpace(string(b)), name+".")
		if !ok || suffix == "" || strings.Trim(suffix, "0123456789") != "" {
			continue
		}
		out = append(out, "/dev/"+filepath.Base(filepath.Dir(n)))
	}
	slices.Sort(out)
	return out
}

func listenSerialPath(addr agentproto.ListenAddr, path string) (net.Listener, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("listen %s: open %s: %w", addr, path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
		unix.Close(fd)
		if err == nil {
			err = errors.New("not a character device")
		}
		return nil, fmt.Errorf("listen %s: %s: %w", addr, path, err)
	}
	slog.Debug("serial port opened", "addr", addr.String(), "device", path)
	return newSerialListener(fd, path), nil
}

// findVirtioPort returns the device (/dev/vportNpM) of the virtio-serial
// port called name, waiting up to wait for it to appear.
func findVirtioPort(name string, wait time.Duration) (string, error) {
	deadline := time.Now().Add(wait)
	for {
		names, _ := filepath.Glob(filepath.Join(virtioPortsDir, "*", "name"))
		for _, n := range names {
			b, err := os.ReadFile(n)
			if err == nil && strings.TrimSpace(string(b)) == name {
				return "/dev/" + filepath.Base(filepath.Dir(n)), nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no virtio-serial port named %q in %s (%d ports)", name, virtioPortsDir, len(names))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serialListener hands out one connection at a time over the device fd.
type serialListener struct {
	path     string
	interval time.Duration
	done     chan struct{} // closed by Close

	mu      sync.Mutex
	fd      int         // the device; -1 once closed
	cur     *serialConn // the connection handed out, until it is closed
	curDone chan struct{}
	carry   []byte // read by the previous connection for the next one
}

// setCarry keeps bytes of the next connection that the current one read.
func (l *serialListener) setCarry(b []byte) {
	l.mu.Lock()
	l.carry = b
	l.mu.Unlock()
}

func newSerialListener(fd int, path string) *serialListener {
	return &serialListener{path: path, interval: serialPollInterval, done: make(chan struct{}), fd: fd}
}

// hostConnected polls the device without waiting: POLLHUP means the host
// end has no client. Called with l.mu held (so the fd stays open).
func (l *serialListener) hostConnected() (bool, error) {
	fds := []unix.PollFd{{Fd: int32(l.fd), Events: unix.POLLIN | unix.POLLOUT}}
	for {
		_, err := unix.Poll(fds, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("poll %s: %w", l.path, err)
		}
		if fds[0].Revents&unix.POLLNVAL != 0 {
			return false, fmt.Errorf("poll %s: invalid descriptor", l.path)
		}
		return fds[0].Revents&unix.POLLHUP == 0, nil
	}
}

// Accept waits until the previous connection is closed and the host is
// connected, and returns a connection over the port.
func (l *serialListener) Accept() (net.Conn, error) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		l.mu.Lock()
		if l.fd < 0 {
			l.mu.Unlock()
			return nil, net.ErrClosed
		}
		if l.cur != nil {
			ch := l.curDone
			l.mu.Unlock()
			select {
			case <-ch:
			case <-l.done:
			}
			continue
		}
		ok, err := l.hostConnected()
		if err != nil {
			l.mu.Unlock()
			return nil, err
		}
		if ok {
			c, err := l.newConn()
			carry := l.carry
			l.carry = nil
			l.mu.Unlock()
			if err != nil {
				return nil, err
			}
			if carry != nil {
				c.scan(carry) // before anyone reads c
			}
			return c, nil
		}
		// The host is gone: what the last connection carried over for the
		// next one belongs to a dead connection.
		l.carry = nil
		l.mu.Unlock()
		timer.Reset(l.interval)
		select {
		case <-l.done:
			return nil, net.ErrClosed
		case <-timer.C:
		}
	}
}

// newConn duplicates the device fd into a connection. l.mu is held.
func (l *serialListener) newConn() (*serialConn, error) {
	fd, err := unix.FcntlInt(uintptr(l.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup %s: %w", l.path, err)
	}
	// The descriptor is non-blocking (O_NONBLOCK is shared by the
	// duplicate), so os.NewFile registers it with the poller.
	c := &serialConn{File: os.NewFile(uintptr(fd), l.path), l: l, done: make(chan struct{})}
	l.cur, l.curDone = c, c.done
	return c, nil
}

// Close ends Accept and closes the device. A connection handed out stays
// open until closed.
func (l *serialListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fd < 0 {
		return net.ErrClosed
	}
	close(l.done)
	err := unix.Close(l.fd)
	l.fd = -1
	if err != nil {
		return fmt.Errorf("close %s: %w", l.path, err)
	}
	return nil
}

// Addr is the device's path.
func (l *serialListener) Addr() net.Addr { return serialAddr(l.path) }

type serialAddr string

func (a serialAddr) Network() string { return agentproto.SchemeSerial }
func (a serialAddr) String() string  { return string(a) }

// serialConn is one connection over the port: a duplicate of the device's
// descriptor. Read returns io.EOF once the host has disconnected, or once
// the HTTP/2 client preface of a new host connection arrives in the middle
// of this one (the host reconnected without the guest seeing it: see the
// top of this file); the bytes from that preface on are carried over to the
// next connection.
//
// Only the HTTP/2 server's reader goroutine reads.
type serialConn struct {
	*os.File
	l    *serialListener
	once sync.Once
	done chan struct{}

	synced  bool   // the preface of this connection has been seen
	ended   bool   // a new connection's preface followed: EOF once pending is read
	pending []byte // scanned, not yet returned
	tail    []byte // before sync: the last len(http2Preface)-1 scanned bytes, to find a preface split across reads
	header  []byte // after sync: the frame header read so far (a new preface's start, or a frame's)
	payload int    // after sync: the current frame's payload bytes still to pass on
	skipped int    // bytes discarded before the preface
	rbuf    [4096]byte
}

// http2Preface starts every HTTP/2 client connection (RFC 9113, 3.4).
var http2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

// Read returns the port's bytes from this connection's HTTP/2 client
// preface up to the next connection's.
func (c *serialConn) Read(p []byte) (int, error) {
	for {
		if len(c.pending) > 0 {
			n := copy(p, c.pending)
			c.pending = c.pending[n:]
			return n, nil
		}
		if c.ended {
			return 0, io.EOF
		}
		n, err := c.File.Read(c.rbuf[:])
		if n == 0 {
			if err == nil {
				err = io.EOF
			}
			return 0, err
		}
		c.scan(c.rbuf[:n])
	}
}

// scan takes newly read bytes: before this connection's preface they are
// discarded; after it they are HTTP/2 frames, followed header by header,
// and a new connection's preface at a frame boundary ends the connection.
// Only there: a frame's payload (an uploaded file, stdin) may hold the
// preface's bytes and is passed on untouched. A frame header cannot look
// like the preface: its first three bytes, "PRI", would declare a frame of
// over 5 MiB, beyond the largest frame either side accepts.
func (c *serialConn) scan(data []byte) {
	if c.synced {
		c.scanFrames(data)
		return
	}
	window := append(slices.Clip(c.tail), data...)
	i := bytes.Index(window, http2Preface)
	if i < 0 {
		c.skipped += len(data)
		c.tail = append(c.tail[:0], window[max(0, len(window)-len(http2Preface)+1):]...)
		return
	}
	c.skipped += max(0, i-len(c.tail)) // new bytes before the preface
	if c.skipped > 0 {
		slog.Warn("serial port: discarded bytes of a previous host connection", "device", c.l.path, "bytes", c.skipped)
	}
	c.synced = true
	c.pending = append(c.pending, http2Preface...)
	c.tail = c.tail[:0]
	c.scanFrames(window[i+len(http2Preface):])
}

// frameHeaderLen is an HTTP/2 frame header's length (RFC 9113, 4.1).
const frameHeaderLen = 9

// scanFrames passes synced bytes on frame by frame.
func (c *serialConn) scanFrames(data []byte) {
	for len(data) > 0 {
		if c.payload > 0 {
			n := min(c.payload, len(data))
			c.pending = append(c.pending, data[:n]...)
			c.payload -= n
			data = data[n:]
			continue
		}
		take := min(frameHeaderLen-len(c.header), len(data))
		c.header = append(c.header, data[:take]...)
		data = data[take:]
		if bytes.HasPrefix(http2Preface, c.header) {
			if len(c.header) < frameHeaderLen {
				continue // not yet told apart
			}
			c.ended = true
			c.l.setCarry(append(slices.Clone(c.header), data...))
			c.header = nil
			slog.Info("serial port: the host reconnected; handing the new connection over", "device", c.l.path)
			return
		}
		if len(c.header) < frameHeaderLen {
			continue
		}
		c.payload = int(c.header[0])<<16 | int(c.header[1])<<8 | int(c.header[2])
		c.pending = append(c.pending, c.header...)
		c.header = c.header[:0]
	}
}

func (c *serialConn) Close() error {
	err := c.File.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		if c.l.cur == c {
			c.l.cur, c.l.curDone = nil, nil
		}
		c.l.mu.Unlock()
		close(c.done)
	})
	return err
}

func (c *serialConn) LocalAddr() net.Addr  { return serialAddr(c.l.path) }
func (c *serialConn) RemoteAddr() net.Addr { return serialAddr("host") }

var _ net.Conn = (*serialConn)(nil)
