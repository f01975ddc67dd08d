// Package fakenet builds a fake internet on this machine for tests and
// benchmarks: two network namespaces the caller's process creates itself,
// an "internet" one (I) serving authoritative DNS, HTTP (80), HTTPS (443,
// certificates of a test CA) and a TCP echo (22) on addresses of the
// documentation ranges, and a "host" one (H) in which the code under test
// runs (for example an `airlock server` started through nsenter), joined to
// I by one veth pair and routed to it by default.
//
// No traffic can leave: I has no interface but its loopback (holding every
// served address) and its end of the veth, H has only its loopback, its
// end of the veth, and whatever the code under test adds in it. Neither
// namespace is named or bind-mounted: both live as long as Close has not
// run (open files, sockets, processes in them), so a crashed test leaves
// nothing behind.
package fakenet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/egress/netnstest"
	"github.com/airlockdev/airlock/internal/nldump"
)

// Addresses of the fake internet. The veth link between H and I uses
// private addresses (never served); everything served is in the
// documentation ranges, plus bait addresses the policy must never let a
// sandbox reach (private, metadata) so that a wrongly allowed connection is
// answered and seen.
var (
	// DNSAddr is the fake internet's resolver: point Airlock's upstream at
	// DNSAddr:53.
	DNSAddr = netip.MustParseAddr("192.0.2.53")
	// RogueDNSAddr is a second DNS server (an attacker's resolver a guest
	// might query directly); its zone is Config.RogueZone.
	RogueDNSAddr = netip.MustParseAddr("198.51.100.53")

	// WebAddrs serve HTTP, HTTPS and the echo.
	WebAddrs = []netip.Addr{
		netip.MustParseAddr("192.0.2.10"),
		netip.MustParseAddr("192.0.2.11"),
		netip.MustParseAddr("198.51.100.10"),
		netip.MustParseAddr("203.0.113.7"),
		netip.MustParseAddr("203.0.113.10"),
		netip.MustParseAddr("2001:db8::10"),
	}
	// BaitAddrs are private and metadata addresses also served in I.
	BaitAddrs = []netip.Addr{
		netip.MustParseAddr("10.99.0.5"),
		netip.MustParseAddr("169.254.169.254"),
		netip.MustParseAddr("fd00:99::5"),
	}

	// HostAddr / InetAddr are the two ends of the veth (IPv4 and IPv6).
	HostAddr  = netip.MustParsePrefix("172.31.255.1/30")
	InetAddr  = netip.MustParsePrefix("172.31.255.2/30")
	HostAddr6 = netip.MustParsePrefix("fd00:ff::1/64")
	InetAddr6 = netip.MustParsePrefix("fd00:ff::2/64")
)

// EchoPort is the port of the TCP echo servers.
const EchoPort = 22

// Interface names of the veth pair (each in its own namespace).
const (
	hostIf = "fnet-h"
	inetIf = "fnet-i"
)

// Config configures New.
type Config struct {
	// Zone is what DNSAddr answers (nil: an empty zone).
	Zone *Zone
	// RogueZone is what RogueDNSAddr answers (nil: an empty zone).
	RogueZone *Zone
	// Logger receives server errors; nil discards them.
	Logger *slog.Logger
	// ExtraAddrs are served like WebAddrs too (HTTP, HTTPS, echo): public
	// addresses a client under test names literally (for example E2B's SDK
	// tests curl https://1.1.1.1), which then reach I, never the internet.
	ExtraAddrs []netip.Addr
	// ResolverAddrs answer Zone too, as DNSAddr does: the addresses of the
	// resolvers a process in H finds in /etc/resolv.conf (a Go program's
	// own lookups then reach the fake internet's names).
	ResolverAddrs []netip.Addr
	// Sites serve HTTPS requests whose host name (SNI, else Host) is the
	// key, on every served address, in place of the default answer (for
	// example a container registry at index.docker.io, with Zone naming an
	// address for it).
	Sites map[string]http.Handler
}

// Net is a running fake internet. Close tears it down.
type Net struct {
	inet, host *os.File
	extra      []netip.Addr
	resolvers  []netip.Addr
	sites      map[string]http.Handler
	ca         *testCA
	zone       *Zone
	rogue      *Zone
	log        *slog.Logger

	wg      sync.WaitGroup
	dns     []*dnsServer
	closers []func() error

	mu       sync.Mutex
	requests []Request

	closeOnce sync.Once
	closeErr  error
}

// New builds the namespaces, links and servers. It needs CAP_NET_ADMIN and
// CAP_SYS_ADMIN.
func New(cfg Config) (_ *Net, err error) {
	n := &Net{zone: cfg.Zone, rogue: cfg.RogueZone, log: cfg.Logger, extra: cfg.ExtraAddrs,
		resolvers: cfg.ResolverAddrs, sites: cfg.Sites}
	if n.zone == nil {
		n.zone = NewZone(nil)
	}
	if n.rogue == nil {
		n.rogue = NewZone(nil)
	}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, n.Close())
		}
	}()
	if n.ca, err = newTestCA(); err != nil {
		return nil, fmt.Errorf("fakenet: test CA: %w", err)
	}
	if n.inet, err = netnstest.Make(); err != nil {
		return nil, fmt.Errorf("fakenet: internet namespace: %w", err)
	}
	if n.host, err = netnstest.Make(); err != nil {
		return nil, fmt.Errorf("fakenet: host namespace: %w", err)
	}
	if err := n.wire(); err != nil {
		return nil, fmt.Errorf("fakenet: %w", err)
	}
	if err := n.startDNS(DNSAddr, n.zone); err != nil {
		return nil, fmt.Errorf("fakenet: %w", err)
	}
	if err := n.startDNS(RogueDNSAddr, n.rogue); err != nil {
		return nil, fmt.Errorf("fakenet: %w", err)
	}
	for _, a := range n.resolvers {
		if err := n.startDNS(a, n.zone); err != nil {
			return nil, fmt.Errorf("fakenet: %w", err)
		}
	}
	if err := n.startWeb(); err != nil {
		return nil, fmt.Errorf("fakenet: %w", err)
	}
	return n, nil
}

// wire sets up loopbacks, the veth pair, addresses and routes.
func (n *Net) wire() error {
	hh, err := netlink.NewHandleAt(netns.NsHandle(n.host.Fd()))
	if err != nil {
		return fmt.Errorf("netlink in host namespace: %w", err)
	}
	defer hh.Close()
	ih, err := netlink.NewHandleAt(netns.NsHandle(n.inet.Fd()))
	if err != nil {
		return fmt.Errorf("netlink in internet namespace: %w", err)
	}
	defer ih.Close()

	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: hostIf},
		PeerName:      inetIf,
		PeerNamespace: netlink.NsFd(int(n.inet.Fd())),
	}
	if err := hh.LinkAdd(veth); err != nil {
		return fmt.Errorf("add veth: %w", err)
	}
	type side struct {
		h      *netlink.Handle
		ifname string
		addrs  []netip.Prefix
	}
	for _, s := range []side{
		{hh, hostIf, []netip.Prefix{HostAddr, HostAddr6}},
		{ih, inetIf, []netip.Prefix{InetAddr, InetAddr6}},
	} {
		lo, err := s.h.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := s.h.LinkSetUp(lo); err != nil {
			return fmt.Errorf("loopback up: %w", err)
		}
		l, err := s.h.LinkByName(s.ifname)
		if err != nil {
			return err
		}
		for _, p := range s.addrs {
			if err := s.h.AddrAdd(l, &netlink.Addr{IPNet: ipNet(p), Flags: unix.IFA_F_NODAD}); err != nil {
				return fmt.Errorf("address %s on %s: %w", p, s.ifname, err)
			}
		}
		if err := s.h.LinkSetUp(l); err != nil {
			return fmt.Errorf("%s up: %w", s.ifname, err)
		}
	}
	// I: every served address on its loopback; no default route.
	lo, err := ih.LinkByName("lo")
	if err != nil {
		return err
	}
	served := append([]netip.Addr{DNSAddr, RogueDNSAddr}, WebAddrs...)
	served = append(served, BaitAddrs...)
	served = append(served, n.extra...)
	served = append(served, n.resolvers...)
	for _, a := range served {
		if err := ih.AddrAdd(lo, &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(a, a.BitLen()))}); err != nil {
			return fmt.Errorf("address %s on the internet's loopback: %w", a, err)
		}
	}
	// H: default routes through I.
	hl, err := hh.LinkByName(hostIf)
	if err != nil {
		return err
	}
	for _, gw := range []netip.Addr{InetAddr.Addr(), InetAddr6.Addr()} {
		dst := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		if gw.Is6() {
			dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		}
		r := &netlink.Route{LinkIndex: hl.Attrs().Index, Dst: ipNet(dst), Gw: gw.AsSlice()}
		if err := hh.RouteAdd(r); err != nil {
			return fmt.Errorf("default route via %s: %w", gw, err)
		}
	}
	return nil
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// Close stops every server and releases both namespaces (the kernel then
// destroys them with the veth pair). Processes the caller started in H must
// have ended first, or H lives on with them.
func (n *Net) Close() error {
	n.closeOnce.Do(func() {
		var errs []error
		for _, s := range n.dns {
			s.close()
		}
		for _, c := range n.closers {
			if err := c(); err != nil && !errors.Is(err, net.ErrClosed) {
				errs = append(errs, err)
			}
		}
		n.wg.Wait()
		for _, f := range []*os.File{n.host, n.inet} {
			if f != nil {
				errs = append(errs, f.Close())
			}
		}
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}

// Zone is the zone DNSAddr answers; RogueZone RogueDNSAddr's.
func (n *Net) Zone() *Zone      { return n.zone }
func (n *Net) RogueZone() *Zone { return n.rogue }

// CAPEM is the PEM certificate of the CA that signs the HTTPS servers'
// leaves: give it to the proxy (e.g. SSL_CERT_FILE for a Go process).
func (n *Net) CAPEM() []byte { return append([]byte(nil), n.ca.certPEM...) }

// WriteCA writes CAPEM to path (mode 0644).
func (n *Net) WriteCA(path string) error { return os.WriteFile(path, n.CAPEM(), 0o644) }

// Requests returns every request the web and echo servers received.
func (n *Net) Requests() []Request {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Request(nil), n.requests...)
}

// RequestsTo returns the requests received on addr.
func (n *Net) RequestsTo(addr netip.Addr) []Request {
	var out []Request
	for _, r := range n.Requests() {
		if r.Addr.Addr() == addr {
			out = append(out, r)
		}
	}
	return out
}

// ResetRequests forgets the recorded requests.
func (n *Net) ResetRequests() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.requests = nil
}

func (n *Net) record(r Request) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.requests = append(n.requests, r)
}

func (n *Net) logf(format string, args ...any) { n.log.Warn(fmt.Sprintf(format, args...)) }

// HostNetnsPath is a path of the host namespace H that another process of
// this machine can open (nsenter --net=PATH), valid until Close.
func (n *Net) HostNetnsPath() string {
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), n.host.Fd())
}

// InetNetnsPath is HostNetnsPath of the internet namespace I.
func (n *Net) InetNetnsPath() string {
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), n.inet.Fd())
}

// HostNetnsID is H's identity as /proc/PID/ns/net shows it ("net:[inode]").
func (n *Net) HostNetnsID() (string, error) { return netnstest.ID(n.host) }

// InetNetnsID is I's identity.
func (n *Net) InetNetnsID() (string, error) { return netnstest.ID(n.inet) }

// Command returns a command that runs name with args inside H (through
// nsenter, which execs it: the command's process is name itself).
func (n *Net) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + n.HostNetnsPath(), "--", name}, args...)...)
}

// DialHost opens a connection from inside H (e.g. to a server listening on
// H's loopback). The socket is made in H; the connection may then be used
// from any goroutine.
func (n *Net) DialHost(ctx context.Context, network, address string) (net.Conn, error) {
	return dialIn(ctx, n.host, network, address)
}

// DialInet opens a connection from inside I.
func (n *Net) DialInet(ctx context.Context, network, address string) (net.Conn, error) {
	return dialIn(ctx, n.inet, network, address)
}

// ListenHost listens inside H.
func (n *Net) ListenHost(network, address string) (net.Listener, error) {
	var ln net.Listener
	err := netnstest.Run(n.host, func() error {
		var err error
		ln, err = net.Listen(network, address)
		return err
	})
	return ln, err
}

// InHost runs fn on a thread inside H (sockets it opens stay in H).
func (n *Net) InHost(fn func() error) error { return netnstest.Run(n.host, fn) }

func dialIn(ctx context.Context, ns *os.File, network, address string) (net.Conn, error) {
	var c net.Conn
	err := netnstest.Run(ns, func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	return c, err
}

// HostTransport is an HTTP transport whose connections are made from
// inside H; use it for clients of a server listening on H's loopback.
func (n *Net) HostTransport() *http.Transport {
	return &http.Transport{
		DialContext:         n.DialHost,
		ForceAttemptHTTP2:   false,
		MaxIdleConnsPerHost: 16,
	}
}

var _ io.Closer = (*Net)(nil)

// HostLinks lists the network interfaces in H by name: lo and the veth to
// the internet, plus whatever the code under test made there (sandbox
// veths a test may check are gone).
func (n *Net) HostLinks() ([]string, error) {
	h, err := netlink.NewHandleAt(netns.NsHandle(n.host.Fd()))
	if err != nil {
		return nil, fmt.Errorf("fakenet: netlink in host namespace: %w", err)
	}
	defer h.Close()
	links, err := nldump.Retry(h.LinkList)
	if err != nil {
		return nil, fmt.Errorf("fakenet: list links: %w", err)
	}
	names := make([]string, 0, len(links))
	for _, l := range links {
		names = append(names, l.Attrs().Name)
	}
	return names, nil
}

// OwnLinks reports whether name is one of the interfaces fakenet made in H.
func OwnLinks(name string) bool { return name == "lo" || name == hostIf }
