package resolver

import (
	"net"
	"net/netip"
	"sync"
)

// DefaultMaxTCPPerSource bounds the open TCP connections of one source address.
const DefaultMaxTCPPerSource = 16

// sourceLimitListener closes at once a connection beyond max open ones from the same source
// address, so that one sandbox cannot exhaust the host's file descriptors through the
// resolver's TCP port.
type sourceLimitListener struct {
	net.Listener
	max int

	mu   sync.Mutex
	open map[netip.Addr]int
}

func newSourceLimitListener(l net.Listener, max int) *sourceLimitListener {
	return &sourceLimitListener{Listener: l, max: max, open: map[netip.Addr]int{}}
}

func (l *sourceLimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src, ok := remoteAddr(c.RemoteAddr())
		if !ok {
			return c, nil
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
