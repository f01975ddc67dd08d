package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/agentproto"
)

// ReleaseTimeout is how long a released listener stays released before it
// listens again by itself, so a release that no trigger follows (the host
// crashed between its checkpoint's steps) cuts the agent off for a bounded
// time only.
const ReleaseTimeout = 30 * time.Second

// relistenPoll is how often a released listener looks for the host's
// trigger (agentproto.RelistenTrigger) in its socket's directory.
const relistenPoll = 5 * time.Millisecond

// ListenOptions configure Listen.
type ListenOptions struct {
	// HostPeersOnly (unix) accepts a connection only from a process
	// outside the agent's PID namespace: one whose pid, as the kernel
	// (or gVisor) reports it to the agent through SO_PEERCRED, is 0. The
	// host's connections come from there (runc, crun: a host process; runsc:
	// through the sentry's host socket); every process of the sandbox has a
	// pid in it, so the workload's connections are closed before a byte
	// is read. An agent that is not in a PID namespace of its own refuses
	// everyone.
	HostPeersOnly bool
	// Logger receives refusals (rate-limited); nil discards them.
	Logger *slog.Logger
}

// Listen returns a listener for addr whose connections Serve serves, one
// HTTP/2 connection each.
//
//   - unix: a Unix socket at addr.Path. The parent directory is created; a
//     stale socket left by an earlier agent is removed (any other kind of
//     file there is an error). Many connections may be open at once. The
//     listener releases its socket on the host's request and takes it
//     again on the host's trigger, for a checkpoint (see unixListener).
//   - serial: a virtio-serial port, by device path or by port name (see
//     listen_serial.go). One connection at a time: Accept returns one
//     once the host has connected to the port, and another once that one
//     is closed (the host disconnected: its Read returned io.EOF) and the
//     host has connected again.
func Listen(addr agentproto.ListenAddr, opts ListenOptions) (net.Listener, error) {
	switch addr.Scheme {
	case agentproto.SchemeUnix:
		return listenUnix(addr.Path, opts)
	case agentproto.SchemeSerial:
		return listenSerial(addr)
	default:
		return nil, fmt.Errorf("listen %s: unsupported scheme %q", addr, addr.Scheme)
	}
}

// unixListener is a Unix socket listener that can let go of its socket
// and take it again while Accept keeps waiting: gVisor (runsc) cannot
// checkpoint a sandbox that holds a host-backed socket, which the agent's
// socket is (the runtime runs runsc with --host-uds=create so the host can
// connect to it), nor the connections accepted on it, which are host
// descriptors. Before `runsc checkpoint` the host asks for a release over
// its connection (POST /v1/listener/release, see Server), waits for the
// socket file to go and checkpoints; after `runsc restore` it creates the
// file agentproto.RelistenTrigger in the socket's directory, which the
// released listener looks for every relistenPoll, removes and then listens
// again. A released listener also listens again by itself after
// ReleaseTimeout.
//
// Nothing a workload does starts either step: it cannot connect (with
// HostPeersOnly), signals do nothing here, and it cannot create the
// trigger, because the directory is sealed read-only for the whole
// sandbox (SealMounts), for the agent too: the listener keeps a descriptor
// of the directory from before the seal, whose /proc/self/fd link reaches
// the writable mount below, and re-creates the socket and removes the
// trigger through it.
type unixListener struct {
	path     string
	dir      *os.File // O_PATH descriptor of path's directory, opened before a seal
	hostOnly bool
	log      *slog.Logger
	// releaseTimeout and releaseGrace are ReleaseTimeout and
	// releaseGrace (shorter in tests).
	releaseTimeout time.Duration
	releaseGrace   time.Duration

	mu       sync.Mutex
	cond     *sync.Cond
	ln       *net.UnixListener // nil while released
	gen      int               // counts releases, so Accept tells a release from a failure
	conns    map[*trackedConn]struct{}
	released chan struct{} // while released: closed to stop awaitRelisten
	// awaiting is the connection a release waits for (ReleaseExcept), and
	// graceTimer closes it after releaseGrace.
	awaiting   *trackedConn
	graceTimer *time.Timer
	wg         sync.WaitGroup
	closed     bool

	refusedMu   sync.Mutex
	refused     int       // peers refused since the last log line
	refusedLast time.Time // when refusals were last logged
}

func listenUnix(path string, opts ListenOptions) (net.Listener, error) {
	dirPath := filepath.Dir(path)
	if err := os.MkdirAll(dirPath, 0o755); err != nil {
		return nil, fmt.Errorf("listen unix:%s: %w", path, err)
	}
	fd, err := unix.Open(dirPath, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("listen unix:%s: open its directory: %w", path, err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &unixListener{path: path, dir: os.NewFile(uintptr(fd), dirPath), hostOnly: opts.HostPeersOnly, log: log, releaseTimeout: ReleaseTimeout, releaseGrace: releaseGrace, conns: map[*trackedConn]struct{}{}}
	l.cond = sync.NewCond(&l.mu)
	// A trigger left from before (a crash) must not end a later release
	// at once.
	if err := unix.Unlinkat(fd, agentproto.RelistenTrigger, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		l.dir.Close()
		return nil, fmt.Errorf("listen unix:%s: remove a stale %s: %w", path, agentproto.RelistenTrigger, err)
	}
	// The first socket at its own path (its address is the path); later
	// ones through the directory's descriptor.
	if l.ln, err = listenAt(path, l.dir, filepath.Base(path)); err != nil {
		l.dir.Close()
		return nil, fmt.Errorf("listen unix:%s: %w", path, err)
	}
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

// Release closes the socket and every connection accepted on it and
// removes the socket file; Accept keeps waiting until the host's trigger
// or ReleaseTimeout. Releasing a released listener changes nothing.
func (l *unixListener) Release() error { return l.ReleaseExcept(nil) }

// ReleaseExcept is Release that leaves keep (an accepted connection: the
// one that asked for the release) open until its peer closes it, or for
// releaseGrace, so that the answer reaches the host; the socket file goes
// last, once every connection is closed, so a host that sees it gone
// knows the agent holds no host socket any more.
func (l *unixListener) ReleaseExcept(keep net.Conn) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return net.ErrClosed
	}
	if l.ln == nil {
		return nil
	}
	_ = l.ln.Close()
	l.ln = nil
	l.gen++
	var kept *trackedConn
	for c := range l.conns {
		if keep != nil && net.Conn(c) == keep {
			kept = c
			continue
		}
		_ = c.Conn.Close() // not c.Close, which takes l.mu
		delete(l.conns, c)
	}
	if kept == nil {
		l.finishReleaseLocked()
		return nil
	}
	l.awaiting = kept
	l.graceTimer = time.AfterFunc(l.releaseGrace, func() { kept.Close() })
	return nil
}

// releaseGrace is how long a release waits for the host to close the
// connection that asked for it.
const releaseGrace = 2 * time.Second

// finishReleaseLocked removes the socket file and waits for the host's
// trigger; l.mu is held.
func (l *unixListener) finishReleaseLocked() {
	if err := unix.Unlinkat(int(l.dir.Fd()), filepath.Base(l.path), 0); err != nil && !errors.Is(err, unix.ENOENT) {
		l.log.Warn("released listener: remove socket", "path", l.path, "err", err)
	}
	l.log.Info("listener released", "path", l.path, "relisten_in", l.releaseTimeout)
	l.released = make(chan struct{})
	l.wg.Add(1)
	go l.awaitRelisten(l.released, time.Now().Add(l.releaseTimeout))
}

// awaitRelisten runs while the listener is released: it listens again
// once the host's trigger appears (removing it) or at deadline, and ends
// when stop is closed (by Close) or the listener listens again.
func (l *unixListener) awaitRelisten(stop <-chan struct{}, deadline time.Time) {
	defer l.wg.Done()
	tick := time.NewTicker(relistenPoll)
	defer tick.Stop()
	failed := false
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		var st unix.Stat_t
		triggered := unix.Fstatat(int(l.dir.Fd()), agentproto.RelistenTrigger, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
		if !triggered && time.Now().Before(deadline) {
			continue
		}
		if triggered {
			if err := unix.Unlinkat(int(l.dir.Fd()), agentproto.RelistenTrigger, 0); err != nil && !errors.Is(err, unix.ENOENT) {
				l.log.Warn("remove the relisten trigger", "err", err)
			}
		}
		err := l.reacquire()
		switch {
		case err == nil:
			return
		case !failed:
			failed = true
			l.log.Error("listen again; retrying", "path", l.path, "err", err, "every", relistenPoll)
		}
	}
}

// reacquire listens again if still released.
func (l *unixListener) reacquire() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.ln != nil || l.released == nil {
		return nil
	}
	viaDir := fmt.Sprintf("/proc/self/fd/%d/%s", l.dir.Fd(), filepath.Base(l.path))
	ln, err := listenAt(viaDir, l.dir, filepath.Base(l.path))
	if err != nil {
		return err
	}
	l.ln = ln
	l.released = nil
	l.log.Info("listening again", "path", l.path)
	l.cond.Broadcast()
	return nil
}

// refuse closes a connection from a peer that is not the host's.
func (l *unixListener) refuse(c net.Conn, pid int32, err error) {
	c.Close()
	l.refusedMu.Lock()
	defer l.refusedMu.Unlock()
	l.refused++
	if now := time.Now(); now.Sub(l.refusedLast) >= refusalLogEvery {
		l.log.Warn("refused connections from inside the sandbox", "count", l.refused, "last_peer_pid", pid, "err", err)
		l.refused, l.refusedLast = 0, now
	}
}

// refusalLogEvery bounds how often refusals are logged: a workload that
// connects in a loop must not flood the agent's log.
const refusalLogEvery = 10 * time.Second

// hostPeer reports whether c's peer is outside the agent's PID namespace
// (its pid as seen here is 0), and the pid it has.
func hostPeer(c net.Conn) (bool, int32, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return false, -1, fmt.Errorf("not a Unix connection: %T", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return false, -1, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return false, -1, err
	}
	if credErr != nil {
		return false, -1, fmt.Errorf("SO_PEERCRED: %w", credErr)
	}
	return cred.Pid == 0, cred.Pid, nil
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
		if l.hostOnly {
			if ok, pid, perr := hostPeer(c); !ok {
				l.mu.Unlock()
				l.refuse(c, pid, perr)
				continue
			}
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
	if l.graceTimer != nil {
		l.graceTimer.Stop()
	}
	if l.released != nil {
		close(l.released)
		l.released = nil
	}
	var err error
	if l.ln != nil {
		err = l.ln.Close()
	}
	// The socket file is there while listening and while a release waits
	// for its asking connection.
	if l.ln != nil || l.awaiting != nil {
		if uerr := unix.Unlinkat(int(l.dir.Fd()), filepath.Base(l.path), 0); uerr != nil && !errors.Is(uerr, unix.ENOENT) {
			err = errors.Join(err, uerr)
		}
		l.awaiting = nil
	}
	l.cond.Broadcast()
	// awaitRelisten takes l.mu: wait for it unlocked.
	l.mu.Unlock()
	l.wg.Wait()
	l.mu.Lock()
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
	err := c.Conn.Close()
	c.once.Do(func() {
		l := c.l
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.conns, c)
		if l.awaiting == c {
			l.awaiting = nil
			l.graceTimer.Stop()
			if !l.closed {
				l.finishReleaseLocked()
			}
		}
	})
	return err
}
