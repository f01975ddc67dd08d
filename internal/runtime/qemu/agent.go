package qemu

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"sync"
	"time"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/unixsock"
)

// agentPorts is how many virtio-serial ports the guest agent serves: QEMU
// gives each port's socket to one host client at a time (a second one
// waits unanswered in the socket's backlog until the first leaves), so
// each concurrent host connection (the worker's, a configuration call,
// a tool's) takes a port of its own.
const agentPorts = 4

// agentPortName is port i's name in the guest (guestinit and the agent
// serve every port whose name starts with the first one's).
func agentPortName(i int) string {
	if i == 0 {
		return "airlock.agent"
	}
	return fmt.Sprintf("airlock.agent.%d", i)
}

func agentSocketName(i int) string {
	if i == 0 {
		return agentSocket
	}
	return fmt.Sprintf("agent.%d.sock", i)
}

// portPool hands out a sandbox's agent ports to host connections.
type portPool struct {
	mu    sync.Mutex
	cond  *sync.Cond
	inUse map[model.SandboxID]*[agentPorts]portUse
}

type portUse struct {
	busy     bool
	released time.Time
}

func newPortPool() *portPool {
	p := &portPool{inUse: map[model.SandboxID]*[agentPorts]portUse{}}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// acquire takes the free port released longest ago (the guest needs a
// moment to see a port's last client leave before it serves the next),
// waiting while all are busy.
func (p *portPool) acquire(ctx context.Context, id model.SandboxID) (int, error) {
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	defer stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		ports, ok := p.inUse[id]
		if !ok {
			ports = &[agentPorts]portUse{}
			p.inUse[id] = ports
		}
		best := -1
		for i := range ports {
			if !ports[i].busy && (best < 0 || ports[i].released.Before(ports[best].released)) {
				best = i
			}
		}
		if best >= 0 {
			ports[best].busy = true
			return best, nil
		}
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("all %d agent ports of %s are in use: %w", agentPorts, id, err)
		}
		p.cond.Wait()
	}
}

func (p *portPool) release(id model.SandboxID, i int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ports, ok := p.inUse[id]; ok {
		ports[i] = portUse{released: time.Now()}
	}
	p.cond.Broadcast()
}

// forget drops a deleted sandbox's ports.
func (p *portPool) forget(id model.SandboxID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.inUse, id)
}

// portConn gives its port back when closed.
type portConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *portConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// DialAgent connects to one of the guest agent's virtio-serial ports and
// waits (until ctx ends) for the agent to answer on it, which it does once
// the guest has booted; what the guest still had for the port's previous
// connection is skipped (dialPort). A stopped sandbox fails at once; an
// unknown or suspended one with ErrNotFound.
func (r *Runtime) DialAgent(ctx context.Context, id model.SandboxID) (net.Conn, error) {
	if _, err := model.ParseSandboxID(id.String()); err != nil {
		return nil, fmt.Errorf("dial agent: %w", err)
	}
	dir := r.dir(id)
	if !exists(dir) {
		return nil, fmt.Errorf("dial agent of %s: %w", id, runtime.ErrNotFound)
	}
	if vmPid(dir, id.String()) == 0 {
		if exists(filepath.Join(dir, snapshotDir, snapshotMeta)) {
			return nil, fmt.Errorf("dial agent of %s: suspended: %w", id, runtime.ErrNotFound)
		}
		// QEMU is gone: say what it and the guest said last.
		r.drainLog(dir)
		return nil, fmt.Errorf("dial agent of %s: %w (qemu: %s; console: %s)", id, errVMStopped, logTail(filepath.Join(dir, qemuLog)), consoleTail(dir))
	}
	if exists(filepath.Join(dir, startedFile)) {
		// A guest that powered off or panicked leaves QEMU running
		// (-no-shutdown): fail now rather than after a handshake timeout.
		unlock := r.lock(id)
		st, err := r.stateLocked(ctx, id)
		unlock()
		if err != nil {
			return nil, fmt.Errorf("dial agent of %s: %w", id, err)
		}
		if st.Phase == runtime.PhaseStopped {
			return nil, fmt.Errorf("dial agent of %s: %w (console: %s)", id, errVMStopped, consoleTail(dir))
		}
	}
	return r.dialLive(ctx, id, dir)
}

// dialLive connects to the agent of a VM known to run (its caller may hold
// the sandbox's lock, which DialAgent takes).
func (r *Runtime) dialLive(ctx context.Context, id model.SandboxID, dir string) (net.Conn, error) {
	port, err := r.ports.acquire(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("dial agent: %w", err)
	}
	conn, err := dialPort(ctx, dir, agentSocketName(port))
	if err != nil {
		r.ports.release(id, port)
		return nil, fmt.Errorf("dial agent of %s: %w", id, err)
	}
	return &portConn{Conn: conn, release: func() { r.ports.release(id, port) }}, nil
}

// dialPort connects to the agent's port behind socket name in dir and
// skips what the guest still had for an earlier connection on that port
// (agentclient.SyncSerial): the stream it returns starts clean, ready for
// an HTTP/2 client. It waits for the guest agent until ctx ends,
// connecting again each syncAttempt: a guest that booted after the
// connection was made, or a restored one that missed the connection's
// arrival, answers a new connection (each tells the guest that its host
// end opened).
func dialPort(ctx context.Context, dir, name string) (net.Conn, error) {
	for {
		conn, err := unixsock.DialIn(ctx, dir, name)
		if err != nil {
			return nil, err
		}
		actx, cancel := context.WithTimeout(ctx, syncAttempt)
		err = agentclient.SyncSerial(actx, conn)
		cancel()
		if err == nil {
			return conn, nil
		}
		conn.Close()
		if ctx.Err() != nil || actx.Err() == nil {
			return nil, err
		}
	}
}

// syncAttempt bounds waiting for the agent's answer on one connection.
const syncAttempt = 5 * time.Second

// errVMStopped: nothing runs in the sandbox's VM (QEMU gone, or its
// guest powered off).
var errVMStopped = errors.New("the sandbox is stopped")

// configureTimeout bounds waiting for a booting guest's agent and
// configuring it (a cold boot under TCG takes seconds).
const configureTimeout = 60 * time.Second

// configureGuest hands the guest its settings through its agent: hostname,
// environment, network, fresh entropy (a restored snapshot's clones must
// not share their random state) and the host's time (a restored snapshot
// wakes with its clock), and installs the deployment CA in its trust
// store.
func (r *Runtime) configureGuest(ctx context.Context, id model.SandboxID, g guestSettings) error {
	ctx, cancel := context.WithTimeout(ctx, configureTimeout)
	defer cancel()
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) { return r.DialAgent(ctx, id) }, r.log.With("sandbox", id))
	defer c.Close()
	seed := make([]byte, 64)
	if _, err := rand.Read(seed); err != nil {
		return err
	}
	cfg := agentproto.GuestConfig{
		Hostname:     g.Hostname,
		Env:          g.Env,
		Entropy:      seed,
		TimeUnixNano: time.Now().UnixNano(),
		PidsMax:      g.PidsMax,
	}
	if g.Address != "" {
		addr, err := netip.ParsePrefix(g.Address)
		if err != nil {
			return fmt.Errorf("configure guest of %s: %w", id, err)
		}
		n := &agentproto.GuestNetwork{Interface: "eth0", Address: addr.String(), Gateway: g.Gateway}
		if g.DNS != "" {
			n.DNS = []string{g.DNS}
		}
		cfg.Network = n
	}
	if err := retryConfigure(ctx, r.log, func() error { return c.ConfigureGuest(ctx, cfg) }); err != nil {
		return fmt.Errorf("configure guest of %s: %w", id, err)
	}
	if len(g.CACert) > 0 {
		if err := installCA(ctx, c, g.CACert); err != nil {
			return fmt.Errorf("configure guest of %s: %w", id, err)
		}
	}
	return nil
}

// retryConfigure repeats fn while the agent is not answering yet (the
// guest still boots) until ctx ends.
func retryConfigure(ctx context.Context, log *slog.Logger, fn func() error) error {
	var err error
	for {
		if err = fn(); err == nil {
			return nil
		}
		var ae *agentclient.Error
		if errors.As(err, &ae) || errors.Is(err, agentclient.ErrUnsupported) || errors.Is(err, errVMStopped) || errors.Is(err, runtime.ErrNotFound) {
			return err
		}
		log.DebugContext(ctx, "guest agent not answering yet", "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// installCA writes the deployment CA at runtime.GuestCACert and appends it
// to the template's bundle at runtime.GuestCABundle (once).
func installCA(ctx context.Context, c *agentclient.Client, pem []byte) error {
	if _, err := c.Mkdir(ctx, agentproto.MkdirRequest{Path: filepath.Dir(runtime.GuestCACert)}); err != nil {
		return fmt.Errorf("install CA: %w", err)
	}
	if _, err := c.WriteFile(ctx, runtime.GuestCACert, 0o644, bytes.NewReader(pem)); err != nil {
		return fmt.Errorf("install CA: %w", err)
	}
	var bundle []byte
	if body, _, err := c.ReadFile(ctx, runtime.GuestCABundle); err == nil {
		bundle, err = io.ReadAll(io.LimitReader(body, 16<<20))
		body.Close()
		if err != nil {
			return fmt.Errorf("install CA: read %s: %w", runtime.GuestCABundle, err)
		}
	}
	if bytes.Contains(bundle, bytes.TrimSpace(pem)) {
		return nil
	}
	if len(bundle) > 0 && bundle[len(bundle)-1] != '\n' {
		bundle = append(bundle, '\n')
	}
	bundle = append(bundle, pem...)
	if _, err := c.Mkdir(ctx, agentproto.MkdirRequest{Path: filepath.Dir(runtime.GuestCABundle)}); err != nil {
		return fmt.Errorf("install CA: %w", err)
	}
	if _, err := c.WriteFile(ctx, runtime.GuestCABundle, 0o644, bytes.NewReader(bundle)); err != nil {
		return fmt.Errorf("install CA: %w", err)
	}
	return nil
}
