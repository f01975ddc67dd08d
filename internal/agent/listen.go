package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/agentproto"
)

// Signals that make a Unix listener let go of its socket and take it again
// (see unixListener).
const (
	// SignalReleaseListener: close the listening socket and every
	// connection accepted on it, and remove the socket file.
	SignalReleaseListener = syscall.SIGUSR1
	// SignalReacquireListener: listen again.
	SignalReacquireListener = syscall.SIGUSR2
)

// ReleaseTimeout is how long a released listener stays released before it
// listens again by itself, so a signal that no SignalReacquireListener
// follows (the host crashed, or the workload sent it) cuts the agent off
// for a bounded time only.
const ReleaseTimeout = 30 * time.Second

// Listen returns a listener for addr whose connections Serve serves, one
// HTTP/2 connection each.
//
//   - unix: a Unix socket at addr.Path. The parent directory is created; a
//     stale socket left by an earlier agent is removed (any other kind of
//     file there is an error). Many connections may be open at once. The
//     listener releases and re-acquires its socket on signals, for a
//     checkpoint (see unixListener).
//   - serial: a virtio-serial port, by device path or by port name (see
//     listen_serial.go). One connection at a time: Accept returns one
//     once the host has connected to the port, and another once that one
//     is closed (the host disconnected: its Read returned io.EOF) and the
//     host has connected again.
func Listen(addr agentproto.ListenAddr) (net.Listener, error) {
	switch addr.Scheme {
	case agentproto.SchemeUnix:
		return listenUnix(addr.Path)
	case agentproto.SchemeSerial:
		return listenSerial(addr)
	default:
		return nil, fmt.Errorf("listen %s: unsupported scheme %q", addr, addr.Scheme)
	}
}

// unixListener is a Unix socket listener that can let go of its socket
// and take it again while Accept keeps waiting, on signals: gVisor (runsc)
// cannot checkpoint a sandbox that holds a host-backed socket, which the
// agent's socket is (the runtime runs runsc with --host-uds=create so the
// host can connect to it), nor the connections accepted on it, which are
// host descriptors. Before `runsc checkpoint` the host sends
// SignalReleaseListener (`runsc kill ID USR1`), waits for the socket file
// to go and checkpoints; after `runsc restore` it sends
// SignalReacquireListener, and the restored agent creates a new socket.
// A released listener also listens again by itself after ReleaseTimeout.
//
// The socket's directory is sealed read-only once the agent listens
// (SealMounts), for the agent too: the listener keeps a descriptor of the
// directory from before the seal, whose /proc/self/fd link reaches the
// writable mount below, and re-creates the socket through it.
type unixListener struct {
	path string
	dir  *os.File // O_PATH descriptor of path's directory, opened before a seal
	sigs chan os.Signal

	mu     sync.Mutex
	cond   *sync.Cond
	ln     *net.UnixListener // nil while released
	gen    int               // counts releases, so Accept tells a release from a failure
	conns  map[*trackedConn]struct{}
	timer  *time.Timer // re-listens after ReleaseTimeout
	closed bool
}

func listenUnix(path string) (net.Listener, error) {
	dirPath := filepath.Dir(path)
	if err := os.MkdirAll(dirPath, 0o755); err != nil {
		return nil, fmt.Errorf("listen unix:%s: %w", path, err)
	}
	fd, err := unix.Open(dirPath, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("listen unix:%s: open its directory: %w", path, err)
	}
	l := &unixListener{path: path, dir: os.NewFile(uintptr(fd), dirPath), sigs: make(chan os.Signal, 4), conns: map[*trackedConn]struct{}{}}
	l.cond = sync.NewCond(&l.mu)
	// The first socket at its own path (its address is the path); later
	// ones through the directory's descriptor.
	if l.ln, err = listenAt(path, l.dir, filepath.Base(path)); err != nil {
		l.dir.Close()
		return nil, fmt.Errorf("listen unix:%s: %w", path, err)
	}
	signal.Notify(l.sigs, SignalReleaseListener, SignalReacquireListener)
	go l.handleSignals()
	return l, nil
}

// listenAt removes a stale socket called name in dir and listens at path,
// which names it. The socket file stays when the listener closes: release
// and Close remove it through dir.
func listenAt(path string, dir *os.File, name string) (*net.UnixListener, error) {
	var st unix.Stat_t
	err := unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK:
		if err := unix.Unlinkat(int(dir.Fd()), name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("remove stale socket: %w", err)
		}
	case err == nil:
		return nil, fmt.Errorf("the path exists and is not a socket (mode %s); refusing to remove it", fs.FileMode(st.Mode&0o777))
	case !errors.Is(err, unix.ENOENT):
		return nil, &os.PathError{Op: "stat", Path: name, Err: err}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false)
	return ln, nil
}

func (l *unixListener) handleSignals() {
	for sig := range l.sigs {
		switch sig {
		case SignalReleaseListener:
			l.release()
		case SignalReacquireListener:
			l.reacquire()
		}
	}
}

// release closes the socket and every connection accepted on it and
// removes the socket file; Accept keeps waiting.
func (l *unixListener) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.ln == nil {
		return
	}
	_ = l.ln.Close()
	l.ln = nil
	l.gen++
	for c := range l.conns {
		_ = c.Conn.Close() // not c.Close, which takes l.mu
	}
	clear(l.conns)
	if err := unix.Unlinkat(int(l.dir.Fd()), filepath.Base(l.path), 0); err != nil && !errors.Is(err, unix.ENOENT) {
		slog.Warn("released listener: remove socket", "path", l.path, "err", err)
	}
	slog.Info("listener released", "path", l.path, "relisten_in", ReleaseTimeout)
	l.resetTimer(ReleaseTimeout)
}

// reacquire listens again if released. On failure it tries again a
// second later.
func (l *unixListener) reacquire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.ln != nil {
		return
	}
	viaDir := fmt.Sprintf("/proc/self/fd/%d/%s", l.dir.Fd(), filepath.Base(l.path))
	ln, err := listenAt(viaDir, l.dir, filepath.Base(l.path))
	if err != nil {
		slog.Error("listen again", "path", l.path, "err", err, "retry_in", time.Second)
		l.resetTimer(time.Second)
		return
	}
	l.ln = ln
	if l.timer != nil {
		l.timer.Stop()
	}
	slog.Info("listening again", "path", l.path)
	l.cond.Broadcast()
}

func (l *unixListener) resetTimer(d time.Duration) {
	if l.timer != nil {
		l.timer.Stop()
	}
	l.timer = time.AfterFunc(d, l.reacquire)
}

// Accept waits for a connection, across releases of the socket.
func (l *unixListener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		for l.ln == nil && !l.closed {
			l.cond.Wait()
		}
		if l.closed {
			l.mu.Unlock()
			return nil, net.ErrClosed
		}
		ln, gen := l.ln, l.gen
		l.mu.Unlock()
		c, err := ln.Accept()
		l.mu.Lock()
		switch {
		case l.closed:
			l.mu.Unlock()
			if c != nil {
				c.Close()
			}
			return nil, net.ErrClosed
		case l.gen != gen:
			// Released meanwhile: the connection belongs to the old socket.
			l.mu.Unlock()
			if c != nil {
				c.Close()
			}
			continue
		case err != nil:
			l.mu.Unlock()
			return nil, err
		}
		tc := &trackedConn{Conn: c, l: l}
		l.conns[tc] = struct{}{}
		l.mu.Unlock()
		return tc, nil
	}
}

// Close closes the listener and its socket's descriptor and removes the
// socket file. Accepted connections stay open.
func (l *unixListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return net.ErrClosed
	}
	l.closed = true
	signal.Stop(l.sigs)
	close(l.sigs)
	if l.timer != nil {
		l.timer.Stop()
	}
	var err error
	if l.ln != nil {
		err = l.ln.Close()
		if uerr := unix.Unlinkat(int(l.dir.Fd()), filepath.Base(l.path), 0); uerr != nil && !errors.Is(uerr, unix.ENOENT) {
			err = errors.Join(err, uerr)
		}
	}
	l.cond.Broadcast()
	return errors.Join(err, l.dir.Close())
}

// Addr is the socket's path.
func (l *unixListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

// trackedConn is an accepted connection, which release closes.
type trackedConn struct {
	net.Conn
	l    *unixListener
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
