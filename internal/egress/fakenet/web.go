package fakenet

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlockdev/airlock/internal/egress/netnstest"
)

// Request is one request a fake web or echo server received.
type Request struct {
	Addr  netip.AddrPort // the fake internet's address the client dialled
	From  netip.AddrPort
	Proto string // "http", "https" or "tcp"
	SNI   string // https only
	Host  string // http and https
	Path  string
	// Header holds the request's headers (http and https), as the fake
	// internet received them: what a proxy added or kept.
	Header http.Header
}

// testCA signs the leaf certificates of the fake HTTPS servers.
type testCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

func newTestCA() (*testCA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "fakenet test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &testCA{
		cert: cert, key: key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		leaves:  map[string]*tls.Certificate{},
	}, nil
}

// leaf returns a certificate for name (a DNS name, or an IP literal when the
// client sent no SNI), minted once.
func (ca *testCA) leaf(name string) (*tls.Certificate, error) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c, ok := ca.leaves[name]; ok {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip, err := netip.ParseAddr(name); err == nil {
		tmpl.IPAddresses = []net.IP{ip.AsSlice()}
	} else {
		tmpl.DNSNames = []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	ca.leaves[name] = c
	return c, nil
}

type ctxKey int

const (
	keyLocal ctxKey = iota
	keyRemote
	keySNI
)

// startWeb serves HTTP on 80, HTTPS on 443 and a TCP echo on 22 on every
// address of the internet namespace (one dual-stack listener per port).
func (n *Net) startWeb() error {
	var l80, l443, l22 net.Listener
	err := netnstest.Run(n.inet, func() error {
		var err error
		if l80, err = net.Listen("tcp", "[::]:80"); err != nil {
			return err
		}
		if l443, err = net.Listen("tcp", "[::]:443"); err != nil {
			l80.Close()
			return err
		}
		if l22, err = net.Listen("tcp", fmt.Sprintf("[::]:%d", EchoPort)); err != nil {
			l80.Close()
			l443.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("listen in the internet namespace: %w", err)
	}
	tlsCfg := &tls.Config{
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			name := hello.ServerName
			if name == "" {
				ap, err := netip.ParseAddrPort(hello.Conn.LocalAddr().String())
				if err != nil {
					return nil, err
				}
				name = ap.Addr().Unmap().String()
			}
			return n.ca.leaf(name)
		},
		NextProtos: []string{"h2", "http/1.1"},
	}
	connCtx := func(ctx context.Context, c net.Conn) context.Context {
		ctx = context.WithValue(ctx, keyLocal, addrPort(c.LocalAddr()))
		ctx = context.WithValue(ctx, keyRemote, addrPort(c.RemoteAddr()))
		return ctx
	}
	mk := func(proto string) *http.Server {
		return &http.Server{
			Handler:           n.handler(proto),
			ConnContext:       connCtx,
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          nil,
		}
	}
	h80, h443 := mk("http"), mk("https")
	h443.TLSConfig = tlsCfg
	n.closers = append(n.closers, h80.Close, h443.Close, l22.Close)
	n.wg.Add(3)
	go func() { defer n.wg.Done(); _ = h80.Serve(l80) }()
	go func() { defer n.wg.Done(); _ = h443.ServeTLS(l443, "", "") }()
	go func() { defer n.wg.Done(); n.serveEcho(l22) }()
	return nil
}

func addrPort(a net.Addr) netip.AddrPort {
	ap, _ := netip.ParseAddrPort(a.String())
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// handler answers every path with who served it, except /headers (the
// request's headers, writeHeaders), /bytes?n=N which sends N zero bytes
// (downloads for benchmarks) and /generate_204, answered 204 with no body
// as the connectivity checks of operating systems and browsers expect
// (E2B's SDK tests curl one).
func (n *Net) handler(proto string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local, _ := r.Context().Value(keyLocal).(netip.AddrPort)
		remote, _ := r.Context().Value(keyRemote).(netip.AddrPort)
		req := Request{Addr: local, From: remote, Proto: proto, Host: r.Host, Path: r.URL.Path, Header: r.Header.Clone()}
		if r.TLS != nil {
			req.SNI = r.TLS.ServerName
		}
		n.record(req)
		if r.TLS != nil {
			name := r.TLS.ServerName
			if name == "" {
				name, _, _ = strings.Cut(r.Host, ":")
			}
			if site, ok := n.sites[name]; ok {
				site.ServeHTTP(w, r)
				return
			}
		}
		if r.Method == http.MethodConnect {
			// A web server, not an open proxy: a 200 to CONNECT can only
			// come from whoever sits in between.
			http.Error(w, "fakenet: CONNECT not supported", http.StatusMethodNotAllowed)
			return
		}
		if r.URL.Path == "/headers" {
			writeHeaders(w, r)
			return
		}
		if r.URL.Path == "/bytes" {
			size, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
			if err != nil || size < 0 {
				http.Error(w, "n: want a byte count", http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
			_, _ = io.CopyN(w, zeros{}, size)
			return
		}
		if r.URL.Path == "/generate_204" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintln(w, req.Banner())
	})
}

// writeHeaders answers /headers with the request's headers as JSON,
// {"headers": {"Name": ["value", …]}} (httpbin's shape); with ?digest=1
// each value is "sha256:<hex>" instead, so that a test can check a value
// (a secret a proxy injected) without the client seeing it.
func writeHeaders(w http.ResponseWriter, r *http.Request) {
	digest := r.URL.Query().Get("digest") == "1"
	out := map[string][]string{}
	for k, vs := range r.Header {
		for _, v := range vs {
			if digest {
				sum := sha256.Sum256([]byte(v))
				v = "sha256:" + hex.EncodeToString(sum[:])
			}
			out[k] = append(out[k], v)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"headers": out})
}

// Banner is the line a fake server answers with: tests match on it to tell
// which server answered and what it saw.
func (r Request) Banner() string {
	return fmt.Sprintf("fakenet proto=%s addr=%s host=%s sni=%s path=%s", r.Proto, r.Addr, r.Host, r.SNI, r.Path)
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// serveEcho answers every connection with a banner line naming the address
// it was dialled at, then echoes what it reads.
func (n *Net) serveEcho(ln net.Listener) {
	var wg sync.WaitGroup
	defer wg.Wait()
	conns := map[net.Conn]struct{}{}
	var mu sync.Mutex
	defer func() {
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				n.logf("echo accept: %v", err)
			}
			return
		}
		mu.Lock()
		conns[c] = struct{}{}
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { mu.Lock(); delete(conns, c); mu.Unlock(); c.Close() }()
			req := Request{Addr: addrPort(c.LocalAddr()), From: addrPort(c.RemoteAddr()), Proto: "tcp"}
			n.record(req)
			fmt.Fprintln(c, req.Banner())
			_, _ = io.Copy(c, bufio.NewReader(c))
		}()
	}
}
