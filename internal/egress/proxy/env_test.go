package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/egress"
	"github.com/airlockdev/airlock/internal/egress/decisionlog"
	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/egress/tlsca"
	"github.com/airlockdev/airlock/internal/model"
)

// The tests' fake internet lives on loopback: upstream servers listen on 127.0.0.1 and are
// known to the sandbox and to the proxy by addresses of the documentation ranges, which the
// fake Dial maps to their loopback ports. The "sandbox" is a client bound to 127.0.0.2; the fake
// OriginalDst tells the proxy which documentation address it meant.

const guestIP = "127.0.0.2"

type env struct {
	t    testing.TB
	reg  *egress.Registry
	sb   *egress.Sandbox
	ca   *tlsca.CA // the deployment CA (the proxy's)
	upCA *tlsca.CA // the fake internet's public CA
	px   *Proxy

	mu        sync.Mutex
	cond      *sync.Cond
	names     map[string][]netip.Addr      // the proxy's (and by default the guest's) DNS
	guestDNS  map[string]netip.Addr        // guest-side overrides (spoofing)
	routes    map[netip.AddrPort]string    // fake address -> loopback address
	orig      map[string]netip.AddrPort    // guest local address -> dialled destination
	secrets   map[model.SandboxID][]Secret // SecretsFor
	onSecrets func()                       // called by SecretsFor, outside mu, when set
	dials     int
}

type envOpts struct {
	policy       string
	maxConns     int
	maxPerSource int // Config.MaxConnsPerSource
	maxTotal     int // Config.MaxConns
}

func newEnv(t testing.TB, o envOpts) *env {
	t.Helper()
	e := &env{
		t:        t,
		names:    map[string][]netip.Addr{},
		guestDNS: map[string]netip.Addr{},
		routes:   map[netip.AddrPort]string{},
		orig:     map[string]netip.AddrPort{},
		secrets:  map[model.SandboxID][]Secret{},
	}
	e.cond = sync.NewCond(&e.mu)
	var err error
	if e.ca, err = tlsca.LoadOrCreate(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if e.upCA, err = tlsca.LoadOrCreate(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	e.reg = egress.NewRegistry(egress.RegistryConfig{MaxConnsPerSandbox: o.maxConns, Logger: quiet})
	e.sb = e.reg.Add(model.SandboxID("sbx_test"), netip.MustParseAddr(guestIP), compile(t, o.policy))
	roots := x509.NewCertPool()
	roots.AddCert(e.upCA.Certificate())
	e.px, err = New(Config{
		Listen:            "127.0.0.1:0",
		Registry:          e.reg,
		CA:                e.ca,
		Resolve:           e.resolve,
		Dial:              e.dial,
		OriginalDst:       e.originalDst,
		Secrets:           e,
		UpstreamRootCAs:   roots,
		Logger:            quiet,
		MaxConnsPerSource: o.maxPerSource,
		MaxConns:          o.maxTotal,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.px.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		e.reg.Remove(e.sb.ID)
	})
	return e
}

func compile(t testing.TB, js string) *policy.Policy {
	t.Helper()
	s, err := policy.ParseSpec([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(s, nil, policy.None)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (e *env) SecretsFor(id model.SandboxID) []Secret {
	e.mu.Lock()
	hook := e.onSecrets
	e.mu.Unlock()
	if hook != nil {
		hook()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.secrets[id]
}

func (e *env) resolve(_ context.Context, host string) ([]netip.Addr, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	a, ok := e.names[host]
	if !ok {
		return nil, fmt.Errorf("fake DNS: %s: no such host", host)
	}
	return a, nil
}

func (e *env) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	real, ok := e.routes[ap]
	e.dials++
	e.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("fake internet: %s unreachable", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, real)
}

func (e *env) originalDst(c net.Conn) (netip.AddrPort, error) {
	key := c.RemoteAddr().String()
	deadline := time.Now().Add(5 * time.Second)
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		if d, ok := e.orig[key]; ok {
			delete(e.orig, key)
			return d, nil
		}
		if time.Now().After(deadline) {
			return netip.AddrPort{}, fmt.Errorf("fake OriginalDst: %s unknown", key)
		}
		e.mu.Unlock()
		time.Sleep(time.Millisecond)
		e.mu.Lock()
	}
}

// route makes fake address ip:port reach the loopback listener real, and names resolve to ip.
func (e *env) route(ip string, port uint16, real string, names ...string) netip.AddrPort {
	a := netip.MustParseAddr(ip)
	ap := netip.AddrPortFrom(a, port)
	e.mu.Lock()
	e.routes[ap] = real
	for _, n := range names {
		if !containsAddr(e.names[n], a) {
			e.names[n] = append(e.names[n], a)
		}
	}
	e.mu.Unlock()
	return ap
}

func containsAddr(as []netip.Addr, a netip.Addr) bool {
	for _, x := range as {
		if x == a {
			return true
		}
	}
	return false
}

// bind records what Airlock's resolver would have: name resolved to ip in the sandbox.
func (e *env) bind(name string, ips ...string) {
	var as []netip.Addr
	for _, ip := range ips {
		as = append(as, netip.MustParseAddr(ip))
	}
	e.sb.Bindings.Record(name, as, time.Hour, time.Now())
}

func (e *env) httpUpstream(ip string, h http.Handler, names ...string) *httptest.Server {
	s := httptest.NewServer(h)
	e.t.Cleanup(s.Close)
	e.route(ip, 80, s.Listener.Addr().String(), names...)
	return s
}

func (e *env) httpsUpstream(ip string, h2 bool, h http.Handler, names ...string) *httptest.Server {
	s := httptest.NewUnstartedServer(h)
	s.EnableHTTP2 = h2
	protos := []string{"http/1.1"}
	if h2 {
		protos = []string{"h2", "http/1.1"}
	}
	s.TLS = &tls.Config{
		GetCertificate: func(hi *tls.ClientHelloInfo) (*tls.Certificate, error) { return e.upCA.Leaf(hi.ServerName) },
		NextProtos:     protos,
	}
	s.StartTLS()
	e.t.Cleanup(s.Close)
	e.route(ip, 443, s.Listener.Addr().String(), names...)
	return s
}

func tcpUpstream(t testing.TB, serve func(net.Conn)) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				serve(c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln
}

func echo(c net.Conn) { _, _ = io.Copy(c, c) }

// dialGuest connects to the proxy as the sandbox would when it dials dst.
func (e *env) dialGuest(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	return e.dialFrom(ctx, guestIP, dst)
}

func (e *env) dialFrom(ctx context.Context, src string, dst netip.AddrPort) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.DialContext(ctx, "tcp", e.px.Addr().String())
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.orig[c.LocalAddr().String()] = dst
	e.mu.Unlock()
	return c, nil
}

// guestLookup is the sandbox's view of DNS: its overrides, else the fake DNS.
func (e *env) guestLookup(host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if a, ok := e.guestDNS[host]; ok {
		return a, nil
	}
	if as := e.names[host]; len(as) > 0 {
		return as[0], nil
	}
	return netip.Addr{}, fmt.Errorf("guest DNS: %s: no such host", host)
}

type clientOpts struct {
	roots     *x509.CertPool // nil: trusts the deployment CA only
	h2        bool
	keepAlive bool
}

// client is an HTTP client in the sandbox: it "resolves" with guestLookup and dials the proxy.
func (e *env) client(o clientOpts) *http.Client {
	roots := o.roots
	if roots == nil {
		roots = x509.NewCertPool()
		roots.AppendCertsFromPEM(e.ca.CertPEM())
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			a, err := e.guestLookup(host)
			if err != nil {
				return nil, err
			}
			p, _ := strconv.Atoi(port)
			return e.dialGuest(ctx, netip.AddrPortFrom(a, uint16(p)))
		},
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		ForceAttemptHTTP2: o.h2,
		DisableKeepAlives: !o.keepAlive,
	}
	if !o.h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	e.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 2 * time.Minute}
}

// event waits for a decision-log event with rule and allowed.
func (e *env) event(rule string, allowed bool) decisionlog.Event {
	e.t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		evs, _ := e.sb.Log.Since(0)
		for _, ev := range evs {
			if ev.Rule == rule && ev.Allowed == allowed {
				return ev
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("no decision event rule=%q allowed=%v in %+v", rule, allowed, evs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (e *env) upstreamDials() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dials
}
