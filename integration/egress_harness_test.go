package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/egress/fakenet"
)

// serverNetns is a network namespace a server may run in
// (*fakenet.Net's host namespace).
type serverNetns interface {
	Command(ctx context.Context, name string, args ...string) *exec.Cmd
	HostTransport() *http.Transport
	InHost(fn func() error) error
}

// inNetns runs fn (checks of network state: links, nftables) in the
// server's network namespace, or here when it has none.
func (s *server) inNetns(fn func()) {
	if s.cfg.netns == nil {
		fn()
		return
	}
	if err := s.cfg.netns.InHost(func() error { fn(); return nil }); err != nil {
		s.t.Errorf("run in the server's network namespace: %v", err)
	}
}

// command runs name inside the server's network namespace when the server
// has one (serverConfig.netns), else directly.
func (s *server) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	if s.cfg.netns != nil {
		return s.cfg.netns.Command(ctx, name, args...)
	}
	return exec.CommandContext(ctx, name, args...)
}

// httpClient reaches the server's API (its loopback, in its namespace).
func (s *server) httpClient() *http.Client {
	if s.cfg.netns != nil {
		return &http.Client{Transport: s.cfg.netns.HostTransport(), Timeout: 30 * time.Second}
	}
	return http.DefaultClient
}

// clientOptions make an API client reach the server in its namespace.
func (s *server) clientOptions() []client.Option {
	if s.cfg.netns == nil {
		return nil
	}
	return []client.Option{client.WithHTTPClient(&http.Client{Transport: s.cfg.netns.HostTransport()})}
}

// The fake internet of the egress tests (see internal/egress/fakenet).
var (
	allowedName = "allowed.example" // → allowedAddr, allowed by the sandboxes' policy
	allowedAddr = netip.MustParseAddr("192.0.2.10")
	blockedAddr = netip.MustParseAddr("203.0.113.7") // blocked.example; the rogue resolver's answer
	sharedAddr  = netip.MustParseAddr("198.51.100.10")
	rebindAddr  = netip.MustParseAddr("192.0.2.11")
	echoAddr    = netip.MustParseAddr("203.0.113.10")
	blocked6    = netip.MustParseAddr("2001:db8::10")
	privateAddr = netip.MustParseAddr("10.99.0.5")
	metadata    = netip.MustParseAddr("169.254.169.254")
)

// egressZone is the fake internet's DNS data.
func egressZone() *fakenet.Zone {
	a := func(addrs ...netip.Addr) fakenet.Record { return fakenet.Record{Addrs: addrs} }
	return fakenet.NewZone(map[string]fakenet.Record{
		allowedName:          a(allowedAddr),
		"blocked.example":    a(blockedAddr, blocked6),
		"shared-ok.example":  a(sharedAddr),
		"shared-bad.example": a(sharedAddr),
		"rebind.example":     {Addrs: []netip.Addr{rebindAddr}, TTL: time.Second},
		"private.example":    a(privateAddr),
		"metadata.example":   a(metadata),
		"echo.example":       a(echoAddr),
		"cname.example":      {CNAME: allowedName},
	})
}

// newFakenet builds the fake internet, torn down when the test ends (after
// the servers started later, whose cleanups run first); opts may add to its
// configuration (more records, more served addresses).
func newFakenet(t *testing.T, opts ...func(*fakenet.Config)) *fakenet.Net {
	t.Helper()
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "nsenter")
	cfg := fakenet.Config{
		Zone:      egressZone(),
		RogueZone: fakenet.NewZone(map[string]fakenet.Record{allowedName: {Addrs: []netip.Addr{blockedAddr}}}),
	}
	for _, o := range opts {
		o(&cfg)
	}
	n, err := fakenet.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Servers have stopped (their cleanups ran first): every sandbox
		// veth they made in the fake host namespace must be gone.
		if links, err := n.HostLinks(); err != nil {
			t.Errorf("links of the fake host namespace: %v", err)
		} else {
			for _, l := range links {
				if !fakenet.OwnLinks(l) {
					t.Errorf("leaked link %s in the fake host namespace", l)
				}
			}
		}
		if err := n.Close(); err != nil {
			t.Errorf("close the fake internet: %v", err)
		}
	})
	return n
}

// newEgressServer starts an airlock server on runtime rt inside the fake
// internet's host namespace, its upstream DNS the fake one and its proxy
// trusting the fake internet's CA (SSL_CERT_FILE, read by Go's system pool).
func newEgressServer(t *testing.T, bins binaries, rt string, n *fakenet.Net, extra ...string) *server {
	t.Helper()
	return newEgressServerWith(t, bins, rt, n, nil, extra...)
}

// newEgressServerWith is newEgressServer that calls prepare, if set, on
// the server before its first start (to seed its data dir).
func newEgressServerWith(t *testing.T, bins binaries, rt string, n *fakenet.Net, prepare func(*server), extra ...string) *server {
	t.Helper()
	ca := filepath.Join(t.TempDir(), "fakenet-ca.pem")
	if err := n.WriteCA(ca); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", ca)
	args := append([]string{"--egress-upstream-dns", netip.AddrPortFrom(fakenet.DNSAddr, 53).String()}, extra...)
	s := newServer(t, bins, serverConfig{runtime: rt, netns: n, extraArgs: args})
	if prepare != nil {
		prepare(s)
	}
	s.start()
	return s
}

// apiJSON sends a JSON request to the server's API (for routes and fields
// the Go client may not have yet) and decodes a 2xx answer into out.
func (s *server) apiJSON(ctx context.Context, method, path string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.url+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+s.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.httpClient().Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: decode: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}
