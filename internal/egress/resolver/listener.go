package resolver

import (
	"net"
	"net/netip"
	"sync"
)

// DefaultMaxTCPPerSource bounds the open TCP connections of one source address.
const DefaultMaxTCPPerSource = 16

// sourceLimitListener closes at once a connection from a source that is not known (no
// sandbox: it never sees a byte of DNS) and one beyond max open ones from the same source
// address, so that one sandbox cannot exhaust the host's file descriptors through the
// resolver's TCP port.
type sourceLimitListener struct {
	net.Listener
	max   int
	known func(netip.Addr) bool

	mu   sync.Mutex
	open map[netip.Addr]int
}

func newSourceLimitListener(l net.Listener, max int, known func(netip.Addr) bool) *sourceLimitListener {
	return &sourceLimitListener{Listener: l, max: max, known: known, open: map[netip.Addr]int{}}
}

func (l *sourceLimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src, ok := remoteAddr(c.RemoteAddr())
		if !ok || !l.known(src) {
			c.Close()
			continue
		}
		l.mu.Lock()
		if l.open[src] >= l.max {
			l.mu.Unlock()
			c.Close()
			continue
		}
		l.open[src]++
		l.mu.Unlock()
		return &countedConn{Conn: c, done: func() { l.release(src) }}, nil
	}
}

func (l *sourceLimitListener) release(src netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[src]--; l.open[src] <= 0 {
		delete(l.open, src)
	}
}

type countedConn struct {
	net.Conn
	once sync.Once
	done func()
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.done)
	return err
}
