package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/airlockdev/airlock/internal/egress"
	"github.com/airlockdev/airlock/internal/egress/decisionlog"
	"github.com/airlockdev/airlock/internal/egress/policy"
)

// clientConn is one connection from a sandbox. It replays the bytes read while peeking at a
// ClientHello, keeps the connection tracked by its sandbox, and closes what belongs to it
// (upstream, tracking, upstream pool) when it closes.
type clientConn struct {
	net.Conn
	p   *Proxy
	src netip.Addr // the source address, counted against Config.MaxConnsPerSource
	sb  *egress.Sandbox
	dst netip.AddrPort // the address the guest dialled
	sni string         // set when the proxy terminates the connection's TLS

	transport *http.Transport // per connection, for HTTP; set before the connection is served

	mu       sync.Mutex
	pending  []byte // read but not yet consumed (the peeked ClientHello)
	upstream net.Conn
	release  func()
	tracked  string
	closed   bool

	closeOnce sync.Once
}

func (c *clientConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	if len(c.pending) > 0 {
		n := copy(b, c.pending)
		c.pending = c.pending[n:]
		c.mu.Unlock()
		return n, nil
	}
	c.mu.Unlock()
	return c.Conn.Read(b)
}

func (c *clientConn) takePending() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.pending
	c.pending = nil
	return b
}

func (c *clientConn) setUpstream(up net.Conn) {
	c.mu.Lock()
	closed := c.closed
	c.upstream = up
	c.mu.Unlock()
	if closed {
		_ = up.Close()
	}
}

// Close closes the connection, its upstream (in a relay), its idle upstream connections (in
// HTTP) and stops tracking it. It is idempotent.
func (c *clientConn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		err = c.Conn.Close()
		c.mu.Lock()
		c.closed = true
		rel, up := c.release, c.upstream
		c.release = nil
		c.mu.Unlock()
		if up != nil {
			_ = up.Close()
		}
		if rel != nil {
			rel()
		}
		if c.transport != nil {
			c.transport.CloseIdleConnections()
		}
		c.p.forget(c)
	})
	return err
}

// track registers the connection with its sandbox under host ("" for a connection by address),
// replacing an earlier registration under another host. False at the sandbox's limit (logged by
// Track) or once closed.
func (c *clientConn) track(host string) bool {
	c.mu.Lock()
	if c.release != nil && c.tracked == host {
		c.mu.Unlock()
		return true
	}
	old := c.release
	c.release = nil
	c.mu.Unlock()
	if old != nil {
		old()
	}
	rel, err := c.sb.Track(egress.Conn{Host: host, Addr: c.dst.Addr(), Port: c.dst.Port(), Close: c.Close})
	if err != nil {
		c.p.log.Info("egress connection refused", "sandbox", c.sb.ID, "host", host, "dst", c.dst, "err", err)
		return false
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		rel()
		return false
	}
	c.release, c.tracked = rel, host
	c.mu.Unlock()
	return true
}

type connKey struct{}

// clientConnOf finds the clientConn under a connection the HTTP server serves.
func clientConnOf(c net.Conn) *clientConn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	cc, _ := c.(*clientConn)
	return cc
}

// handOff gives a connection to the HTTP server.
func (p *Proxy) handOff(cc *clientConn, c net.Conn) {
	cc.transport = p.newTransport(cc)
	if !p.httpLn.push(c) {
		_ = c.Close()
	}
}

// handleTLS judges a connection to port 443 by its SNI: refused without one, relayed when
// exempt, closed without a handshake when the policy denies the name (or it has no binding to
// the dialled address), else terminated and handed to the HTTP server.
func (p *Proxy) handleTLS(cc *clientConn) {
	sb, dst := cc.sb, cc.dst
	_ = cc.SetDeadline(time.Now().Add(p.cfg.HandshakeTimeout))
	hello, prefix, err := peekClientHello(cc.Conn)
	cc.pending = prefix
	switch {
	case err != nil && len(prefix) == 0:
		_ = cc.Close() // closed (or silent) before sending anything: nothing to decide
		return
	case err != nil:
		p.deny(sb, decisionlog.KindTLS, "", dst, "no-client-hello", "the connection to port 443 did not start with a TLS ClientHello the proxy could read")
		_ = cc.Close()
		return
	case hello.serverName == "":
		p.tlsByAddr(cc, "", "no-sni", "TLS without a server name (SNI) is refused unless an address rule allows the address: HTTPS is judged by name")
		return
	}
	if _, err := netip.ParseAddr(hello.serverName); err == nil {
		p.tlsByAddr(cc, hello.serverName, "ip-sni", "TLS with an IP address as server name (SNI) is refused unless an address rule allows the address: HTTPS is judged by name")
		return
	}
	name, err := policy.NormalizeName(hello.serverName)
	if err != nil {
		sb.Decide(decisionlog.KindTLS, hello.serverName, dst.Addr(), dst.Port()) // logs the invalid name
		_ = cc.Close()
		return
	}
	if policy.IsDoHResolver(name) {
		p.deny(sb, decisionlog.KindTLS, name, dst, "doh-resolver", name+" is a DNS-over-HTTPS resolver; the sandbox's only resolver is Airlock's")
		_ = cc.Close()
		return
	}
	if pol := sb.Policy(); pol != nil && pol.Exempt(name, dst.Addr()) {
		p.relayTLS(cc, name)
		return
	}
	// Decided (binding check included, logged) before any leaf is minted: a denied or unbound
	// name costs the proxy no key and no place in the shared leaf cache. Each request inside
	// is judged again.
	if d := sb.Decide(decisionlog.KindTLS, name, dst.Addr(), dst.Port()); !d.Allowed {
		p.log.Info("egress denied", "sandbox", sb.ID, "kind", decisionlog.KindTLS, "host", name, "dst", dst, "rule", d.Rule)
		_ = cc.Close()
		return
	}
	if !cc.track(name) {
		_ = cc.Close()
		return
	}
	cc.sni = name
	tc := tls.Server(cc, &tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return p.cfg.CA.Leaf(name) },
		NextProtos:     []string{"h2", "http/1.1"},
		MinVersion:     tls.VersionTLS12,
	})
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.HandshakeTimeout)
	err = tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		p.log.Info("TLS handshake with the sandbox failed (does it trust the egress CA?)", "sandbox", sb.ID, "sni", name, "err", err)
		_ = tc.Close()
		return
	}
	_ = cc.SetDeadline(time.Time{})
	p.handOff(cc, tc)
}

// tlsByAddr handles TLS that names no host (no SNI, or an IP address as
// SNI): there is no name to judge, so, as on ports other than 80 and 443,
// only an address rule (a CIDR or address the policy allows, never the
// default) lets it through, relayed untouched to the dialled address (no
// interception, so no secret is ever injected into it). Otherwise it is
// refused with rule and reason.
func (p *Proxy) tlsByAddr(cc *clientConn, sni, rule, reason string) {
	sb, dst := cc.sb, cc.dst
	if d := sb.Explain("", dst.Addr(), dst.Port()); !d.Allowed || p.isHostAddr(dst.Addr()) {
		p.deny(sb, decisionlog.KindTLS, sni, dst, rule, reason)
		_ = cc.Close()
		return
	}
	if d := sb.Decide(decisionlog.KindTLS, "", dst.Addr(), dst.Port()); !d.Allowed {
		_ = cc.Close()
		return
	}
	if !cc.track("") {
		_ = cc.Close()
		return
	}
	ctx, cancel := context.WithTimeout(p.ctx, 15*time.Second)
	up, err := p.cfg.Dial(ctx, "tcp", dst.String())
	cancel()
	if err != nil {
		p.log.Info("upstream dial failed", "sandbox", sb.ID, "dst", dst, "err", err)
		_ = cc.Close()
		return
	}
	_ = cc.SetDeadline(time.Time{})
	p.relay(cc, up)
}

// relayTLS relays an exempt TLS connection, untouched, to the proxy's own resolution of its SNI.
func (p *Proxy) relayTLS(cc *clientConn, name string) {
	sb, dst := cc.sb, cc.dst
	if d := sb.Decide(decisionlog.KindConnect, name, dst.Addr(), dst.Port()); !d.Allowed {
		_ = cc.Close()
		return
	}
	if !cc.track(name) {
		_ = cc.Close()
		return
	}
	ctx, cancel := context.WithTimeout(p.ctx, 15*time.Second)
	up, err := p.dialName(ctx, sb, name, dst.Addr(), dst.Port())
	cancel()
	if err != nil {
		p.log.Info("upstream dial failed", "sandbox", sb.ID, "host", name, "err", err)
		_ = cc.Close()
		return
	}
	_ = cc.SetDeadline(time.Time{})
	p.relay(cc, up)
}

// newTransport is the upstream side of one sandbox connection's HTTP: it dials the proxy's own
// resolution of the request's name, or (for a port-80 request by address, already judged) the
// address the guest dialled.
func (p *Proxy) newTransport(cc *clientConn) *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, portStr, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			port, err := strconv.ParseUint(portStr, 10, 16)
			if err != nil {
				return nil, fmt.Errorf("port %q: %w", portStr, err)
			}
			if a, err := netip.ParseAddr(host); err == nil {
				a = a.Unmap()
				if a != cc.dst.Addr() || policy.AlwaysDenied(a) || p.isHostAddr(a) {
					return nil, fmt.Errorf("refusing to dial %s", a)
				}
				return p.cfg.Dial(ctx, "tcp", addr)
			}
			return p.dialName(ctx, cc.sb, host, cc.dst.Addr(), uint16(port))
		},
		TLSClientConfig:     &tls.Config{RootCAs: p.cfg.UpstreamRootCAs, MinVersion: tls.VersionTLS12, ClientSessionCache: p.sessions},
		ForceAttemptHTTP2:   true,
		MaxConnsPerHost:     maxUpstreamConnsPerHost,
		DisableCompression:  true,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
	}
}

// handoffListener is the listener of the proxy's HTTP server: the proxy pushes the connections
// it decided to serve as HTTP (port 80, and terminated TLS).
type handoffListener struct {
	addr net.Addr
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newHandoffListener(addr net.Addr) *handoffListener {
	return &handoffListener{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *handoffListener) push(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }
