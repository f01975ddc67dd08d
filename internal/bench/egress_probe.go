package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// EgressProbeConfig is one measurement of `airlock bench egress`, made
// either in this process (the direct baseline) or inside a sandbox by the
// hidden `airlock-bench egress probe` (through Airlock's proxy).
type EgressProbeConfig struct {
	Name     string // the server's name: resolved, then sent as SNI and Host
	Port     int    // 443 (HTTPS) or 80 (HTTP)
	Runs     int    // new connections measured (each: dial, TLS, GET, whole answer)
	Download int64  // then one download of this many bytes (0: none)
	// DNS, when valid, is the DNS server to ask instead of the system's.
	DNS netip.AddrPort
}

// EgressProbeResult is what a probe measured.
type EgressProbeResult struct {
	ConnectNs     []int64 `json:"connect_ns"`
	DownloadBytes int64   `json:"download_bytes"`
	DownloadNs    int64   `json:"download_ns"`
}

// probeNet is how a probe reaches the network.
type probeNet struct {
	dial     func(ctx context.Context, network, address string) (net.Conn, error)
	resolver *net.Resolver
}

// rebindEvery is how often a probe resolves its name again: Airlock only
// lets a connection by name through while the name has a live DNS binding,
// so the address must stay fresh; the lookup is outside the timed part.
const rebindEvery = 5 * time.Second

// RunEgressProbe runs cfg with the system's dialer and resolver (inside a
// sandbox: redirected to Airlock's resolver and proxy).
func RunEgressProbe(ctx context.Context, cfg EgressProbeConfig) (EgressProbeResult, error) {
	var d net.Dialer
	pn := probeNet{dial: d.DialContext, resolver: net.DefaultResolver}
	if cfg.DNS.IsValid() {
		pn.resolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, cfg.DNS.String())
		}}
	}
	return runEgressProbe(ctx, pn, cfg)
}

func runEgressProbe(ctx context.Context, pn probeNet, cfg EgressProbeConfig) (EgressProbeResult, error) {
	var res EgressProbeResult
	if cfg.Port != 80 && cfg.Port != 443 {
		return res, fmt.Errorf("probe: port %d: want 80 or 443", cfg.Port)
	}
	var addr string
	var resolved time.Time
	resolve := func() error {
		if addr != "" && time.Since(resolved) < rebindEvery {
			return nil
		}
		addrs, err := pn.resolver.LookupHost(ctx, cfg.Name)
		if err != nil {
			return fmt.Errorf("probe: resolve %s: %w", cfg.Name, err)
		}
		if len(addrs) == 0 {
			return fmt.Errorf("probe: %s has no address", cfg.Name)
		}
		addr, resolved = net.JoinHostPort(addrs[0], strconv.Itoa(cfg.Port)), time.Now()
		return nil
	}
	for range cfg.Runs {
		if err := resolve(); err != nil {
			return res, err
		}
		start := time.Now()
		n, err := probeGet(ctx, pn, addr, cfg, "/")
		if err != nil {
			return res, err
		}
		if n == 0 {
			return res, errors.New("probe: empty answer")
		}
		res.ConnectNs = append(res.ConnectNs, int64(time.Since(start)))
	}
	if cfg.Download > 0 {
		if err := resolve(); err != nil {
			return res, err
		}
		start := time.Now()
		n, err := probeGet(ctx, pn, addr, cfg, "/bytes?n="+strconv.FormatInt(cfg.Download, 10))
		if err != nil {
			return res, err
		}
		res.DownloadNs = int64(time.Since(start))
		res.DownloadBytes = n
		if n != cfg.Download {
			return res, fmt.Errorf("probe: downloaded %d bytes, want %d", n, cfg.Download)
		}
	}
	return res, nil
}

// probeGet opens a new connection to addr, sends GET path (TLS with SNI
// cfg.Name on 443; certificates are not verified, which costs the same on
// every path), reads the whole answer and returns its body's length.
func probeGet(ctx context.Context, pn probeNet, addr string, cfg EgressProbeConfig, path string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	raw, err := pn.dial(ctx, "tcp", addr)
	if err != nil {
		return 0, fmt.Errorf("probe: dial %s: %w", addr, err)
	}
	defer raw.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	c := raw
	if cfg.Port == 443 {
		tc := tls.Client(raw, &tls.Config{ServerName: cfg.Name, InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		if err := tc.HandshakeContext(ctx); err != nil {
			return 0, fmt.Errorf("probe: TLS with %s at %s: %w", cfg.Name, addr, err)
		}
		c = tc
	}
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, cfg.Name); err != nil {
		return 0, fmt.Errorf("probe: send: %w", err)
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 256<<10), nil)
	if err != nil {
		return 0, fmt.Errorf("probe: answer from %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return 0, fmt.Errorf("probe: %s answered %s: %s", cfg.Name, resp.Status, strings.TrimSpace(string(b)))
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return n, fmt.Errorf("probe: read the answer: %w", err)
	}
	return n, nil
}
