package resolver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/time/rate"

	"github.com/airlockdev/airlock/internal/egress"
)

// Defaults of Config.
const (
	DefaultAttemptTimeout   = 2 * time.Second
	DefaultQueryTimeout     = 5 * time.Second
	DefaultMaxInflight      = 32
	DefaultMinBindingTTL    = 30 * time.Second
	DefaultMaxTTL           = time.Hour
	DefaultBindingGrace     = 5 * time.Second
	upstreamUDPSize         = 1232 // the DNS flag day 2020 size: no IP fragmentation
	maxChain                = 12   // CNAMEs followed in one answer
	shutdownTimeout         = 5 * time.Second
	tcpIdleTimeout          = 10 * time.Second
	tcpReadTimeout          = 5 * time.Second
	listenAttempts          = 20
	defaultUnknownLogPeriod = time.Minute
)

// Config configures a Resolver.
type Config struct {
	// Listen is the host:port both the UDP and the TCP socket bind ("127.0.0.1:0" in tests; a
	// port of 0 picks one free for both protocols).
	Listen string
	// Upstream is the host:port of the DNS server queries are forwarded to.
	Upstream string
	// Registry finds the sandbox a query comes from by its source address.
	Registry *egress.Registry
	// Limits bound the names a sandbox may ask about (see NameLimits).
	Limits NameLimits
	// AttemptTimeout bounds one exchange with the upstream (DefaultAttemptTimeout);
	// QueryTimeout the whole answer to one query, retries included (DefaultQueryTimeout).
	AttemptTimeout, QueryTimeout time.Duration
	// MaxInflight bounds each sandbox's queries waiting for the upstream at once
	// (DefaultMaxInflight); more wait for a slot until their QueryTimeout, then get SERVFAIL
	// (and beyond four times as many waiting, SERVFAIL at once).
	MaxInflight int
	// MaxTCPPerSource bounds the open TCP connections from one address
	// (DefaultMaxTCPPerSource); more are closed as soon as they are accepted.
	MaxTCPPerSource int
	// MinBindingTTL and MaxTTL clamp how long a DNS binding lives (DefaultMinBindingTTL,
	// DefaultMaxTTL); MaxTTL also caps the TTL handed to the guest. BindingGrace is added to a
	// binding's life so that a guest that uses an answer until its last second still finds the
	// binding (DefaultBindingGrace).
	MinBindingTTL, MaxTTL, BindingGrace time.Duration
	// Now is the clock for bindings (time.Now when nil).
	Now    func() time.Time
	Logger *slog.Logger
}

// Resolver is Airlock's DNS server for sandboxes. Create it with New, run it with Serve.
type Resolver struct {
	cfg  Config
	log  *slog.Logger
	addr netip.AddrPort
	pc   net.PacketConn
	ln   net.Listener

	inflight  inflight
	strangers rate.Sometimes // limits the log of queries from unknown sources

	closeOnce sync.Once
	served    atomic.Bool
}

// New validates cfg and binds the UDP and TCP sockets on one port; the sockets are released by
// Serve's return or, when Serve is never called, by Close.
func New(cfg Config) (*Resolver, error) {
	if cfg.Registry == nil {
		return nil, errors.New("resolver: no registry")
	}
	if _, _, err := net.SplitHostPort(cfg.Upstream); err != nil {
		return nil, fmt.Errorf("resolver: upstream %q: %w", cfg.Upstream, err)
	}
	if cfg.AttemptTimeout <= 0 {
		cfg.AttemptTimeout = DefaultAttemptTimeout
	}
	if cfg.QueryTimeout <= 0 {
		cfg.QueryTimeout = DefaultQueryTimeout
	}
	if cfg.MaxInflight <= 0 {
		cfg.MaxInflight = DefaultMaxInflight
	}
	if cfg.MaxTCPPerSource <= 0 {
		cfg.MaxTCPPerSource = DefaultMaxTCPPerSource
	}
	if cfg.MinBindingTTL <= 0 {
		cfg.MinBindingTTL = DefaultMinBindingTTL
	}
	if cfg.MaxTTL <= 0 {
		cfg.MaxTTL = DefaultMaxTTL
	}
	if cfg.MaxTTL < cfg.MinBindingTTL {
		return nil, fmt.Errorf("resolver: MaxTTL %s is below MinBindingTTL %s", cfg.MaxTTL, cfg.MinBindingTTL)
	}
	if cfg.BindingGrace <= 0 {
		cfg.BindingGrace = DefaultBindingGrace
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Limits = cfg.Limits.withDefaults()
	r := &Resolver{cfg: cfg, log: cfg.Logger.With("component", "egress-resolver"),
		strangers: rate.Sometimes{Interval: defaultUnknownLogPeriod}}
	r.inflight.init(cfg.MaxInflight)
	pc, ln, err := listen(cfg.Listen)
	if err != nil {
		return nil, err
	}
	r.pc, r.ln = pc, ln
	r.addr = pc.LocalAddr().(*net.UDPAddr).AddrPort()
	return r, nil
}

// listen binds UDP then TCP on the same port; with port 0 it retries when the port UDP got is
// taken for TCP.
func listen(addr string) (net.PacketConn, net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("resolver: listen address %q: %w", addr, err)
	}
	var lastErr error
	for range listenAttempts {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("resolver: listen udp %s: %w", addr, err)
		}
		p := pc.LocalAddr().(*net.UDPAddr).Port
		ln, err := net.Listen("tcp", net.JoinHostPort(host, fmt.Sprint(p)))
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
		lastErr = err
		if port != "0" {
			break
		}
	}
	return nil, nil, fmt.Errorf("resolver: listen tcp on the udp port: %w", lastErr)
}

// UpstreamFromResolvConf returns host:port of the first nameserver in a resolv.conf file
// (path "" means /etc/resolv.conf): the default upstream of the server's resolver.
func UpstreamFromResolvConf(path string) (string, error) {
	if path == "" {
		path = "/etc/resolv.conf"
	}
	cc, err := dns.ClientConfigFromFile(path)
	if err != nil {
		return "", fmt.Errorf("resolver: read %s: %w", path, err)
	}
	if len(cc.Servers) == 0 {
		return "", fmt.Errorf("resolver: %s names no nameserver", path)
	}
	return net.JoinHostPort(cc.Servers[0], cc.Port), nil
}

// Addr is the bound address; UDP and TCP share it.
func (r *Resolver) Addr() netip.AddrPort { return r.addr }

// Close releases the sockets of a Resolver whose Serve was never called (Serve releases them
// itself). It is safe to call more than once and after Serve.
func (r *Resolver) Close() error {
	var err error
	r.closeOnce.Do(func() {
		err = errors.Join(r.pc.Close(), r.ln.Close())
	})
	return err
}

// Serve answers queries on both sockets until ctx ends or a socket fails, then stops both,
// waits for the queries in flight (whose upstream exchanges are cancelled) and releases the
// sockets. It returns nil after ctx ended, the socket error otherwise. Call it once.
func (r *Resolver) Serve(ctx context.Context) error {
	if !r.served.CompareAndSwap(false, true) {
		return errors.New("resolver: Serve called twice")
	}
	defer r.Close()

	qctx, cancelQueries := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelQueries()
	servers := []*dns.Server{
		{PacketConn: r.pc, Handler: r.handler(qctx, false), UDPSize: dns.MaxMsgSize,
			DecorateReader: func(rd dns.Reader) dns.Reader { return knownReader{Reader: rd, known: r.known} }},
		{Listener: newSourceLimitListener(r.ln, r.cfg.MaxTCPPerSource, r.known), Handler: r.handler(qctx, true), ReadTimeout: tcpReadTimeout,
			IdleTimeout: func() time.Duration { return tcpIdleTimeout }},
	}
	type result struct {
		i   int
		err error
	}
	errc := make(chan result, len(servers))
	started := make(chan int, len(servers))
	for i, s := range servers {
		s.NotifyStartedFunc = func() { started <- i }
		go func() { errc <- result{i, s.ActivateAndServe()} }()
	}
	// Every server either starts or fails before we go on, so that none starts after the
	// shutdown below and outlives Serve.
	var serveErr error
	decided := make([]bool, len(servers))
	exited := 0
	for n := 0; n < len(servers); {
		select {
		case i := <-started:
			if !decided[i] {
				decided[i] = true
				n++
			}
		case res := <-errc:
			exited++
			serveErr = errors.Join(serveErr, fmt.Errorf("resolver: serve: %w", res.err))
			if !decided[res.i] {
				decided[res.i] = true
				n++
			}
		}
	}
	if serveErr == nil {
		r.log.Info("egress resolver listening", "addr", r.addr.String(), "upstream", r.cfg.Upstream)
		select {
		case <-ctx.Done():
		case res := <-errc:
			exited++
			serveErr = fmt.Errorf("resolver: serve: %w", res.err)
		}
	}
	// Stop: cancel upstream exchanges, then shut the servers down, which waits for handlers.
	cancelQueries()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	for _, s := range servers {
		_ = s.ShutdownContext(sctx) // "server not started" for one that failed: nothing to wait for
	}
	for ; exited < len(servers); exited++ {
		if res := <-errc; res.err != nil && serveErr == nil && ctx.Err() == nil {
			serveErr = fmt.Errorf("resolver: serve: %w", res.err)
		}
	}
	return serveErr
}

// handler adapts answer to miekg/dns.
func (r *Resolver) handler(ctx context.Context, tcp bool) dns.Handler {
	return dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		src, ok := remoteAddr(w.RemoteAddr())
		if !ok {
			return
		}
		resp := r.answer(ctx, src, tcp, req)
		if resp == nil {
			return
		}
		_ = w.WriteMsg(resp)
	})
}

func remoteAddr(a net.Addr) (netip.Addr, bool) {
	switch a := a.(type) {
	case *net.UDPAddr:
		return a.AddrPort().Addr().Unmap(), true
	case *net.TCPAddr:
		return a.AddrPort().Addr().Unmap(), true
	}
	return netip.Addr{}, false
}
