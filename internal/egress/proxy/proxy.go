// Package proxy is the egress proxy: every TCP connection a sandbox makes is redirected to it
// (nftables), and it decides, by the sandbox's policy and DNS bindings, whether and where to
// let it go.
//
//   - Port 80: plain HTTP. Each request is judged by its Host; the proxy dials its own
//     resolution of that name (never the address the guest chose) and forwards the request.
//   - Port 443: TLS, judged by its SNI (a missing or IP-literal SNI is refused). Exempt
//     destinations (policy.Exempt) are relayed untouched to the proxy's own resolution of the
//     SNI; a name the policy denies (or one without a binding) is closed before any
//     handshake, so no leaf is minted for it; the rest is terminated with a leaf of the
//     deployment CA (tlsca), served as HTTP/1.1 or HTTP/2 (at most 32 streams at once), each
//     request is judged again, its Host / :authority must equal the SNI (else 421), secrets are
//     injected, and the request goes on over a new TLS connection that verifies the upstream.
//   - Other ports: allowed by an address rule or by a name bound to the dialled address that
//     the policy allows on that port; relayed raw to the dialled address.
//
// An allowance by name needs a live DNS binding of the name to the address the guest dialled
// (egress.Sandbox.Decide). Every decision lands in the sandbox's decision log, and every
// connection is tracked (egress.Sandbox.Track), so that the per-sandbox limit holds and a
// policy change cuts what it now denies.
//
// Before any of that, every accepted connection counts against Config.MaxConnsPerSource (per
// source address) and Config.MaxConns (in total); one over either is closed at once.
//
// Secrets are injected over HTTPS only: a placeholder in a cleartext (port 80) request is
// refused like one sent to a host the secret does not belong to, and a TRACE or TRACK request
// that would get a secret is refused (it would echo the value back). A sandbox's own header
// rules come through the same SecretSource, after its project's secrets (so they win on the
// same header), with their placeholders already resolved; one that could not be (Secret.Refuse)
// refuses its host's requests rather than send them without the credential.
package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/airlockdev/airlock/internal/egress"
	"github.com/airlockdev/airlock/internal/egress/decisionlog"
	"github.com/airlockdev/airlock/internal/egress/nftrules"
	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/egress/tlsca"
	"github.com/airlockdev/airlock/internal/retry"
)

// Config configures a Proxy.
type Config struct {
	// Listen is the TCP address to listen on ("127.0.0.1:0" style; the redirect target).
	Listen   string
	Registry *egress.Registry
	CA       *tlsca.CA
	// Resolve is the proxy's own resolution of a name (through Airlock's upstream DNS).
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// Dial opens upstream connections (a net.Dialer with a 10 s timeout when nil).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// OriginalDst is the address the guest dialled (nftrules.OriginalDst when nil).
	OriginalDst func(net.Conn) (netip.AddrPort, error)
	// Secrets gives each sandbox's secrets (none when nil).
	Secrets SecretSource
	// UpstreamRootCAs verifies upstream certificates of intercepted connections (the system
	// roots when nil).
	UpstreamRootCAs *x509.CertPool
	// HandshakeTimeout bounds reading the ClientHello and the TLS handshake with the sandbox
	// (10 s when 0).
	HandshakeTimeout time.Duration
	// IdleTimeout closes idle keep-alive connections from sandboxes (2 min when 0).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's header (64 KiB when 0).
	MaxHeaderBytes int
	// BodyScanBytes is how much of a request body is searched for secret placeholders
	// (64 KiB when 0).
	BodyScanBytes int
	// MaxConnsPerSource bounds the open connections from one source address, counted from
	// accept (before the ClientHello or the first request, when the sandbox's own limit starts
	// to count): one over it is closed at once (egress.DefaultMaxConns when 0; give it the
	// registry's MaxConnsPerSandbox when that is set).
	MaxConnsPerSource int
	// MaxConns bounds the proxy's open connections from all sources together; one over it is
	// closed at once (DefaultMaxConns when 0).
	MaxConns int
	Logger   *slog.Logger
}

// DefaultMaxConns is Config.MaxConns when 0.
const DefaultMaxConns = 16384

// Per sandbox connection, the HTTP/2 streams it may have open at once and the upstream
// connections it may open per upstream host: with the per-source limit, they bound how many
// upstream connections one sandbox can fan out to.
const (
	maxStreamsPerConn       = 32
	maxUpstreamConnsPerHost = 32
)

// Proxy is a running egress proxy.
type Proxy struct {
	cfg    Config
	log    *slog.Logger
	ln     net.Listener
	httpLn *handoffListener
	srv    *http.Server
	ctx    context.Context
	cancel context.CancelFunc
	bufs   *bufferPool
	// sessions resumes upstream TLS sessions across sandbox connections (the upstream sees
	// this host either way), which spares a certificate verification per new connection.
	sessions tls.ClientSessionCache

	mu        sync.Mutex
	closed    bool
	conns     map[*clientConn]struct{}
	perSource map[netip.Addr]int    // open connections by source address
	httpConns map[net.Conn]struct{} // connections the HTTP server serves (counted in wg)
	wg        sync.WaitGroup        // Serve's HTTP server, handlers, relays, HTTP connections

	closeOnce sync.Once
}

// New checks cfg and listens; Serve then accepts.
func New(cfg Config) (*Proxy, error) {
	if cfg.Registry == nil || cfg.CA == nil || cfg.Resolve == nil {
		return nil, errors.New("proxy: Registry, CA and Resolve are required")
	}
	if cfg.Dial == nil {
		d := &net.Dialer{Timeout: 10 * time.Second}
		cfg.Dial = d.DialContext
	}
	if cfg.OriginalDst == nil {
		cfg.OriginalDst = func(c net.Conn) (netip.AddrPort, error) {
			tc, ok := c.(*net.TCPConn)
			if !ok {
				return netip.AddrPort{}, fmt.Errorf("proxy: %T is not a TCP connection", c)
			}
			return nftrules.OriginalDst(tc)
		}
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = 10 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 2 * time.Minute
	}
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = 64 << 10
	}
	if cfg.BodyScanBytes <= 0 {
		cfg.BodyScanBytes = 64 << 10
	}
	if cfg.MaxConnsPerSource <= 0 {
		cfg.MaxConnsPerSource = egress.DefaultMaxConns
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		cfg:       cfg,
		log:       cfg.Logger.With("component", "egress-proxy"),
		ln:        ln,
		httpLn:    newHandoffListener(ln.Addr()),
		ctx:       ctx,
		cancel:    cancel,
		conns:     map[*clientConn]struct{}{},
		perSource: map[netip.Addr]int{},
		httpConns: map[net.Conn]struct{}{},
		bufs:      &bufferPool{},
		sessions:  tls.NewLRUClientSessionCache(4096),
	}
	p.srv = &http.Server{
		Handler: http.HandlerFunc(p.serveRequest),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, clientConnOf(c))
		},
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ConnState:         p.httpConnState,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: maxStreamsPerConn},
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	return p, nil
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() net.Addr { return p.ln.Addr() }

// Serve accepts connections until ctx ends or Close is called, then closes every connection
// and returns once Close has (see Close for what it waits for).
func (p *Proxy) Serve(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return net.ErrClosed
	}
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		_ = p.srv.Serve(p.httpLn)
	}()
	stop := context.AfterFunc(ctx, func() { _ = p.Close() })
	defer stop()
	// Out of descriptors (or a timeout): wait, longer each time, and
	// start again from short after a connection was accepted.
	wait := retry.Policy{Initial: 5 * time.Millisecond, Max: time.Second, Jitter: 0.2}.Start(nil)
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if p.isClosed() {
				return p.Close()
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, errTooManyFiles) {
				d := wait.Next()
				p.log.Warn("accept", "err", err, "retry_in", d)
				_ = wait.Sleep(p.ctx, d) // a closed proxy is noticed above
				continue
			}
			_ = p.Close()
			return fmt.Errorf("proxy: accept: %w", err)
		}
		wait.Reset()
		cc := &clientConn{Conn: c, p: p, src: sourceAddr(c)}
		if !p.adopt(cc) {
			_ = c.Close()
			continue
		}
		go func() {
			defer p.wg.Done()
			p.handle(cc)
		}()
	}
}

// sourceAddr is the unmapped source address of an accepted connection (invalid when unknown).
func sourceAddr(c net.Conn) netip.Addr {
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// adopt registers an accepted connection and a goroutine for it. False once closed, and when
// the connection would exceed the per-source or the global limit: it is then refused before
// any work is spent on it (a refusal from a sandbox is logged in its decision log).
func (p *Proxy) adopt(cc *clientConn) bool {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return false
	}
	total, fromSrc := len(p.conns), p.perSource[cc.src]
	if total >= p.cfg.MaxConns || fromSrc >= p.cfg.MaxConnsPerSource {
		p.mu.Unlock()
		p.refuseAtAccept(cc, total, fromSrc)
		return false
	}
	p.conns[cc] = struct{}{}
	p.perSource[cc.src]++
	p.wg.Add(1)
	p.mu.Unlock()
	return true
}

// refuseAtAccept logs a connection refused by adopt's limits.
func (p *Proxy) refuseAtAccept(cc *clientConn, total, fromSrc int) {
	reason := fmt.Sprintf("the proxy already has %d open connections, its limit", total)
	if fromSrc >= p.cfg.MaxConnsPerSource {
		reason = fmt.Sprintf("the source already has %d open connections to the proxy, its limit", fromSrc)
	}
	sb, ok := p.cfg.Registry.BySource(cc.src)
	if !ok {
		p.log.Debug("connection refused at accept", "src", cc.src, "reason", reason)
		return
	}
	sb.Log.Append(decisionlog.Event{Kind: decisionlog.KindConnect, Rule: "connection-limit", Reason: reason})
	p.log.Debug("connection refused at accept", "sandbox", sb.ID, "src", cc.src, "reason", reason)
}

// forget unregisters a closed connection (once per adopted connection).
func (p *Proxy) forget(cc *clientConn) {
	p.mu.Lock()
	if _, ok := p.conns[cc]; ok {
		delete(p.conns, cc)
		if p.perSource[cc.src]--; p.perSource[cc.src] <= 0 {
			delete(p.perSource, cc.src)
		}
	}
	p.mu.Unlock()
}

// httpConnState counts the HTTP server's connection goroutines in wg. StateNew runs in the
// server's Serve goroutine, itself counted in wg, so the Add never races with Wait at zero.
func (p *Proxy) httpConnState(c net.Conn, st http.ConnState) {
	switch st {
	case http.StateNew:
		p.mu.Lock()
		p.httpConns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
	case http.StateClosed, http.StateHijacked:
		p.mu.Lock()
		_, ok := p.httpConns[c]
		delete(p.httpConns, c)
		p.mu.Unlock()
		if ok {
			p.wg.Done()
		}
	}
}

// enterHandler counts a request handler in wg (false once the proxy is closed: Close may
// already be waiting, and the handler must do nothing).
func (p *Proxy) enterHandler() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.wg.Add(1)
	return true
}

func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// Close stops accepting, closes every connection and waits for the proxy's goroutines: the
// HTTP server's, every connection handler and relay (both directions), every HTTP connection
// the server serves and every request handler (HTTP/2 ones included) that started before Close.
// Not waited for: the goroutines of the upstream HTTP transports' connections, which end as
// those connections close (idle ones are closed with their sandbox connection, active ones
// when their request, cancelled by Close, ends).
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		conns := make([]*clientConn, 0, len(p.conns))
		for c := range p.conns {
			conns = append(conns, c)
		}
		p.mu.Unlock()
		p.cancel()
		_ = p.ln.Close()
		_ = p.httpLn.Close()
		for _, c := range conns {
			_ = c.Close()
		}
		// Close drops the HTTP server's connections; Shutdown then waits until their goroutines
		// have seen it.
		_ = p.srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = p.srv.Shutdown(ctx)
		cancel()
	})
	p.wg.Wait()
	return nil
}

// handle judges one accepted connection by its destination port.
func (p *Proxy) handle(cc *clientConn) {
	src, err := netip.ParseAddrPort(cc.RemoteAddr().String())
	if err != nil {
		_ = cc.Close()
		return
	}
	sb, ok := p.cfg.Registry.BySource(src.Addr())
	if !ok {
		p.log.Warn("connection from an unknown source closed", "src", src)
		_ = cc.Close()
		return
	}
	dst, err := p.cfg.OriginalDst(cc.Conn)
	if err != nil {
		p.log.Warn("original destination unknown; connection closed", "sandbox", sb.ID, "err", err)
		_ = cc.Close()
		return
	}
	cc.sb, cc.dst = sb, netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	switch dst.Port() {
	case 80:
		p.handOff(cc, cc)
	case 443:
		p.handleTLS(cc)
	default:
		p.handleOther(cc)
	}
}

// handleOther relays a connection to a port other than 80 and 443 to the dialled address, when
// an address rule or an allowed name bound to the address allows it.
func (p *Proxy) handleOther(cc *clientConn) {
	sb, dst := cc.sb, cc.dst
	if dst.Port() == 853 {
		p.deny(sb, decisionlog.KindConnect, "", dst, "dns-over-tls", "port 853 is DNS over TLS; the sandbox's only resolver is Airlock's")
		_ = cc.Close()
		return
	}
	d, name := sb.DecideAddr(decisionlog.KindConnect, dst.Addr(), dst.Port())
	if !d.Allowed {
		_ = cc.Close()
		return
	}
	if p.isHostAddr(dst.Addr()) {
		p.deny(sb, decisionlog.KindConnect, name, dst, "always-denied", fmt.Sprintf("%s is an address of this host", dst.Addr()))
		_ = cc.Close()
		return
	}
	if !cc.track(name) {
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
	p.relay(cc, up)
}

// deny logs a denial that no policy question produced (a protocol refusal).
func (p *Proxy) deny(sb *egress.Sandbox, kind, host string, dst netip.AddrPort, rule, reason string) {
	sb.Log.Append(decisionlog.Event{Kind: kind, Host: host, Addr: dst.Addr().String(), Port: dst.Port(), Rule: rule, Reason: reason})
	p.log.Info("egress denied", "sandbox", sb.ID, "kind", kind, "host", host, "dst", dst, "rule", rule, "reason", reason)
}

// isHostAddr reports an address of this host or of a sandbox (the registry's Denied).
func (p *Proxy) isHostAddr(a netip.Addr) bool { return p.cfg.Registry.Denied(a) }

// dialName dials the proxy's own resolution of name on port for the sandbox: the address the
// guest dialled when the resolution agrees with it (so the guest meets the server it expects),
// else the first resolved address the policy allows for name; never a host or always-denied one.
func (p *Proxy) dialName(ctx context.Context, sb *egress.Sandbox, name string, dialled netip.Addr, port uint16) (net.Conn, error) {
	addrs, err := p.cfg.Resolve(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", name, err)
	}
	pol := sb.Policy()
	ok := func(a netip.Addr) bool {
		return pol != nil && !p.isHostAddr(a) && !policy.AlwaysDenied(a) && pol.Dest(name, a, port).Allowed
	}
	var pick netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		if a == dialled && ok(a) {
			pick = a
			break
		}
		if !pick.IsValid() && ok(a) {
			pick = a
		}
	}
	if !pick.IsValid() {
		return nil, fmt.Errorf("%s resolved to no address the sandbox may reach (%v)", name, addrs)
	}
	return p.cfg.Dial(ctx, "tcp", netip.AddrPortFrom(pick, port).String())
}

// relay copies bytes both ways, half-closing each direction at its end; an error in either
// direction closes both connections. It returns once both directions are done.
func (p *Proxy) relay(cc *clientConn, up net.Conn) {
	cc.setUpstream(up)
	defer func() {
		_ = up.Close()
		_ = cc.Close()
	}()
	if pending := cc.takePending(); len(pending) > 0 {
		if _, err := up.Write(pending); err != nil {
			return
		}
	}
	// From here on the raw connections are copied, which lets the kernel splice TCP to TCP.
	done := make(chan struct{})
	go func() {
		defer close(done)
		pipe(up, cc.Conn, cc.Close)
	}()
	pipe(cc.Conn, up, cc.Close)
	<-done
}

// pipe copies src to dst, then half-closes dst; on an error it calls abort.
func pipe(dst, src net.Conn, abort func() error) {
	if _, err := io.Copy(dst, src); err != nil {
		_ = abort()
		return
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = abort()
}

var errTooManyFiles = syscall.EMFILE
