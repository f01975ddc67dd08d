// Package connbudget shares the server's client connections fairly. One
// pool (--max-connections) is split so that no one party can take it:
//
//   - each client address (an IPv4 address, an IPv6 /64) holds at most
//     PerAddress connections;
//   - connections that have not authenticated (no request on them carried
//     a valid credential yet) hold at most Unauthenticated of them
//     together, so the rest stays for clients that authenticate;
//   - the connections of one project hold at most PerProject;
//   - an unauthenticated connection may stay idle (keep-alive, or opened
//     and never used) UnauthenticatedIdle, not the server's long idle
//     timeout.
//
// When a new connection would pass a cap, the unauthenticated connection
// that has been idle the longest (of the address, or of all; a new one
// only after a second without a request) is closed to make room; if none is idle, the new connection is answered 429
// too_many_connections and closed. When the whole pool is full of
// connections that are not idle and unauthenticated, Accept waits until
// one closes (new clients wait in the kernel's backlog), as before.
//
// A connection becomes authenticated when a handler calls Authenticated
// with the request's context (the API after it verified a credential, the
// data plane after it verified a token). Wire a Budget into an
// http.Server with Listener, ConnState and ConnContext.
package connbudget

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Defaults of the caps, as fractions of --max-connections (New applies
// them to a zero field).
const (
	DefaultMaxConnections       = 4096
	DefaultUnauthenticatedIdle  = 5 * time.Second
	defaultPerAddressDivisor    = 4 // a quarter of the pool per address
	defaultUnauthenticatedShare = 2 // half of the pool unauthenticated
	defaultPerProjectDivisor    = 4 // a quarter of the pool per project
)

// newGrace is how long a new connection that has sent no request yet is
// not closed to make room: time for a client to send its first request.
const newGrace = time.Second

// ErrProjectFull is returned by Authenticated when the project already
// holds its cap of connections.
var ErrProjectFull = errors.New("the project has as many connections open as allowed")

// Config sets the caps. A zero field takes its default; a negative
// PerAddress turns the per-address cap off (behind a reverse proxy every
// client has the proxy's address).
type Config struct {
	Max                 int           // all connections; default 4096
	PerAddress          int           // from one client address; default Max/4
	Unauthenticated     int           // not authenticated, all addresses together; default Max/2
	PerProject          int           // authenticated as one project; default Max/4
	UnauthenticatedIdle time.Duration // idle limit of an unauthenticated connection; default 5 s
	Logger              *slog.Logger
}

// withDefaults fills the zero fields and checks the rest.
func (c Config) withDefaults() (Config, error) {
	if c.Max == 0 {
		c.Max = DefaultMaxConnections
	}
	if c.Max < 0 {
		return c, fmt.Errorf("max connections %d is negative", c.Max)
	}
	if c.PerAddress == 0 {
		c.PerAddress = max(1, c.Max/defaultPerAddressDivisor)
	}
	if c.Unauthenticated == 0 {
		c.Unauthenticated = max(1, c.Max/defaultUnauthenticatedShare)
	}
	if c.PerProject == 0 {
		c.PerProject = max(1, c.Max/defaultPerProjectDivisor)
	}
	if c.UnauthenticatedIdle == 0 {
		c.UnauthenticatedIdle = DefaultUnauthenticatedIdle
	}
	switch {
	case c.Unauthenticated < 0 || c.Unauthenticated > c.Max:
		return c, fmt.Errorf("unauthenticated connections %d must be between 1 and max connections %d", c.Unauthenticated, c.Max)
	case c.PerProject < 0:
		return c, fmt.Errorf("connections per project %d is negative", c.PerProject)
	case c.UnauthenticatedIdle < 0:
		return c, fmt.Errorf("unauthenticated idle timeout %s is negative", c.UnauthenticatedIdle)
	}
	if c.PerAddress > c.Max {
		c.PerAddress = c.Max
	}
	if c.PerProject > c.Max {
		c.PerProject = c.Max
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Budget counts the open connections of one listener.
type Budget struct {
	cfg Config

	mu        sync.Mutex
	freed     *sync.Cond // signalled when a connection closes
	total     int
	unauth    int
	byAddress map[string]int
	byProject map[string]int
	idle      list.List             // idle unauthenticated connections, longest idle first
	idleAt    map[string]*list.List // the same, by address
	closed    bool
}

// New returns a Budget with cfg's caps.
func New(cfg Config) (*Budget, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("connection budget: %w", err)
	}
	b := &Budget{cfg: cfg, byAddress: map[string]int{}, byProject: map[string]int{}, idleAt: map[string]*list.List{}}
	b.freed = sync.NewCond(&b.mu)
	return b, nil
}

// Config is the budget's configuration with its defaults applied.
func (b *Budget) Config() Config { return b.cfg }

// conn is one accepted connection.
type conn struct {
	net.Conn
	b    *Budget
	addr string

	// Under b.mu:
	fresh    bool          // no request came on it yet
	since    time.Time     // when it was accepted or last went idle
	project  string        // its owner (Authenticated); "" while unauthenticated
	idle     *list.Element // in b.idle while idle and unauthenticated
	idleAddr *list.Element // in b.idleAt[addr] likewise
	timer    *time.Timer   // closes it after UnauthenticatedIdle
	released bool
}

// Close closes the connection and gives its slot back (once).
func (c *conn) Close() error {
	c.b.release(c)
	return c.Conn.Close()
}

// addressKey is what the per-address cap counts by: the IP, an IPv6
// address by its /64 (one host usually has the whole prefix).
func addressKey(a net.Addr) string {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return a.Network() // a unix socket: one key for all its clients
	}
	ip := ap.Addr().Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// Listener wraps l: its Accept admits connections within the budget.
// Closing it also ends the goroutine that answers refused connections.
func (b *Budget) Listener(l net.Listener) net.Listener {
	ln := &listener{Listener: l, b: b, refused: make(chan refusedConn, refuseQueue), stop: make(chan struct{}), done: make(chan struct{})}
	go ln.refuser()
	return ln
}

type listener struct {
	net.Listener
	b       *Budget
	refused chan refusedConn // to refuser; full: closed at once (never closed itself: Accept may still send)
	stop    chan struct{}    // closed by Close: refuser returns
	done    chan struct{}    // refuser has returned
	once    sync.Once
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		raw, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		c, refusal, err := l.b.admit(raw)
		if err != nil {
			_ = raw.Close()
			return nil, err
		}
		if c != nil {
			return c, nil
		}
		l.b.cfg.Logger.Debug("connection refused", "remote", raw.RemoteAddr().String(), "reason", refusal)
		select {
		case l.refused <- refusedConn{Conn: raw, reason: refusal}:
		default:
			_ = raw.Close() // a flood of refusals: no answer
		}
	}
}

// Close closes the listener, wakes an Accept waiting for a slot and waits
// for the refusals under way.
func (l *listener) Close() error {
	l.b.mu.Lock()
	l.b.closed = true
	l.b.freed.Broadcast()
	l.b.mu.Unlock()
	err := l.Listener.Close()
	l.once.Do(func() { close(l.stop) })
	<-l.done
	return err
}

// errClosed is Accept's error once the listener was closed while it waited.
var errClosed = net.ErrClosed

// admit counts raw in, closing idle unauthenticated connections to make
// room; it returns nil and the reason when raw is refused.
func (b *Budget) admit(raw net.Conn) (*conn, string, error) {
	addr := addressKey(raw.RemoteAddr())
	var evict []*conn
	defer func() {
		for _, e := range evict {
			_ = e.Conn.Close() // outside b.mu; its slot was given back already
		}
	}()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cfg.PerAddress > 0 && b.byAddress[addr] >= b.cfg.PerAddress {
		e := b.oldestIdleLocked(addr)
		if e == nil {
			return nil, fmt.Sprintf("this client address has %d connections open, the most allowed", b.cfg.PerAddress), nil
		}
		evict = append(evict, e)
	}
	if b.unauth >= b.cfg.Unauthenticated {
		e := b.oldestIdleLocked("")
		if e == nil {
			return nil, fmt.Sprintf("the server has %d unauthenticated connections open, the most allowed", b.cfg.Unauthenticated), nil
		}
		evict = append(evict, e)
	}
	for b.total >= b.cfg.Max {
		if e := b.oldestIdleLocked(""); e != nil {
			evict = append(evict, e)
			continue
		}
		if b.closed {
			return nil, "", errClosed
		}
		b.freed.Wait() // a connection closes, or the listener
	}
	if b.closed {
		return nil, "", errClosed
	}
	c := &conn{Conn: raw, b: b, addr: addr, fresh: true}
	b.total++
	b.unauth++
	b.byAddress[addr]++
	return c, "", nil
}

// oldestIdleLocked takes the longest-idle unauthenticated connection (of
// addr, or of all when addr is "") out of the budget, for the caller to
// close; nil if there is none.
func (b *Budget) oldestIdleLocked(addr string) *conn {
	var e *list.Element
	if addr == "" {
		e = b.idle.Front()
	} else if l := b.idleAt[addr]; l != nil {
		e = l.Front()
	}
	now := time.Now()
	for ; e != nil; e = e.Next() {
		c := e.Value.(*conn)
		if !c.fresh || now.Sub(c.since) >= newGrace {
			b.releaseLocked(c)
			return c
		}
	}
	return nil
}

// release gives c's slot back, once.
func (b *Budget) release(c *conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.releaseLocked(c)
}

func (b *Budget) releaseLocked(c *conn) {
	if c.released {
		return
	}
	c.released = true
	b.notIdleLocked(c)
	b.total--
	if c.project == "" {
		b.unauth--
	} else {
		decrement(b.byProject, c.project)
	}
	decrement(b.byAddress, c.addr)
	b.freed.Signal()
}

func decrement(m map[string]int, k string) {
	if m[k] <= 1 {
		delete(m, k)
	} else {
		m[k]--
	}
}

// idleLocked records that unauthenticated c waits for a request, and
// closes it if it still does after UnauthenticatedIdle.
func (b *Budget) idleLocked(c *conn) {
	if c.released || c.project != "" || c.idle != nil {
		return
	}
	c.since = time.Now()
	c.idle = b.idle.PushBack(c)
	l := b.idleAt[c.addr]
	if l == nil {
		l = list.New()
		b.idleAt[c.addr] = l
	}
	c.idleAddr = l.PushBack(c)
	c.timer = time.AfterFunc(b.cfg.UnauthenticatedIdle, func() { b.expire(c) })
}

// notIdleLocked takes c off the idle lists and stops its timer.
func (b *Budget) notIdleLocked(c *conn) {
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	if c.idle == nil {
		return
	}
	b.idle.Remove(c.idle)
	if l := b.idleAt[c.addr]; l != nil {
		l.Remove(c.idleAddr)
		if l.Len() == 0 {
			delete(b.idleAt, c.addr)
		}
	}
	c.idle, c.idleAddr = nil, nil
}

// expire closes c if it is still an idle unauthenticated connection.
func (b *Budget) expire(c *conn) {
	b.mu.Lock()
	if c.idle == nil || c.released {
		b.mu.Unlock()
		return
	}
	b.releaseLocked(c)
	b.mu.Unlock()
	_ = c.Conn.Close()
}

// ConnState is the http.Server's ConnState hook: it tracks which
// connections wait for a request.
func (b *Budget) ConnState(nc net.Conn, s http.ConnState) {
	c, ok := nc.(*conn)
	if !ok {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch s {
	case http.StateNew, http.StateIdle:
		b.idleLocked(c)
	case http.StateActive, http.StateHijacked:
		c.fresh = false
		b.notIdleLocked(c)
	case http.StateClosed:
		b.releaseLocked(c)
	}
}

type connKey struct{}

// ConnContext is the http.Server's ConnContext hook: it puts the
// connection where Authenticated finds it.
func (b *Budget) ConnContext(ctx context.Context, nc net.Conn) context.Context {
	if c, ok := nc.(*conn); ok {
		return context.WithValue(ctx, connKey{}, c)
	}
	return ctx
}

// Carry returns to with from's connection, if from has one: a request
// the server makes in-process for a client is counted on the client's
// connection.
func Carry(from, to context.Context) context.Context {
	if c, ok := from.Value(connKey{}).(*conn); ok {
		return context.WithValue(to, connKey{}, c)
	}
	return to
}

// Authenticated records that a request on ctx's connection carried a valid
// credential of owner (a project, or a trusted peer): the connection
// leaves the unauthenticated share (and its short idle limit) and counts
// against owner's cap (PerProject). It returns ErrProjectFull when owner
// already holds its cap (the caller answers too_many_connections and
// closes the connection). A context of no budgeted connection (a request
// the server made in-process for no client) is left alone.
func Authenticated(ctx context.Context, owner string) error {
	c, ok := ctx.Value(connKey{}).(*conn)
	if !ok || owner == "" {
		return nil
	}
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.released || c.project == owner {
		return nil
	}
	if b.byProject[owner] >= b.cfg.PerProject {
		return fmt.Errorf("%w (%d)", ErrProjectFull, b.cfg.PerProject)
	}
	if c.project == "" {
		b.unauth--
		b.notIdleLocked(c)
	} else {
		decrement(b.byProject, c.project) // a connection a proxy reuses for another project
	}
	c.project = owner
	b.byProject[owner]++
	return nil
}

// Counts is what a budget holds now.
type Counts struct {
	Total, Unauthenticated int
	ByAddress, ByProject   map[string]int
}

// Counts returns the budget's current counts (for tests and metrics).
func (b *Budget) Counts() Counts {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Counts{Total: b.total, Unauthenticated: b.unauth, ByAddress: clone(b.byAddress), ByProject: clone(b.byProject)}
}

func clone(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
