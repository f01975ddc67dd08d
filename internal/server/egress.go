package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/egress"
	"github.com/airlockdev/airlock/internal/egress/decisionlog"
	"github.com/airlockdev/airlock/internal/egress/nftrules"
	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/egress/proxy"
	"github.com/airlockdev/airlock/internal/egress/resolver"
	"github.com/airlockdev/airlock/internal/egress/sandboxnet"
	"github.com/airlockdev/airlock/internal/egress/tlsca"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/store"
)

// Defaults of the egress options.
const (
	DefaultEgressProxyPort    = 15001
	DefaultEgressResolverPort = 15053
)

// netnsDir is the sandbox network pool's directory under the data dir:
// one bind-mounted netns and one allocation file per sandbox.
const netnsDir = "netns"

// egressConfig is the parsed egress part of Options.
type egressConfig struct {
	pool          netip.Prefix
	defaultPolicy policy.Default
	upstreamDNS   netip.AddrPort
	proxyPort     uint16
	resolverPort  uint16
}

// parseEgressOptions checks and completes the egress options: the pool
// (sandboxnet.DefaultPrefix), the default policy (public), the upstream DNS
// server (the first nameserver of /etc/resolv.conf) and the ports.
func parseEgressOptions(opts Options) (egressConfig, error) {
	cfg := egressConfig{pool: opts.EgressPool, defaultPolicy: policy.Public}
	if !cfg.pool.IsValid() {
		cfg.pool = sandboxnet.DefaultPrefix
	}
	if opts.EgressDefault != "" {
		d, err := policy.ParseDefault(opts.EgressDefault)
		if err != nil {
			return cfg, fmt.Errorf("--egress-default: %w", err)
		}
		cfg.defaultPolicy = d
	}
	if opts.EgressUpstreamDNS != "" {
		ap, err := parseDNSServer(opts.EgressUpstreamDNS)
		if err != nil {
			return cfg, fmt.Errorf("--egress-upstream-dns: %w", err)
		}
		cfg.upstreamDNS = ap
	} else {
		ap, err := resolvConfNameserver("/etc/resolv.conf")
		if err != nil {
			return cfg, fmt.Errorf("no --egress-upstream-dns and %w", err)
		}
		cfg.upstreamDNS = ap
	}
	for _, p := range []struct {
		flag string
		v    int
		def  uint16
		dst  *uint16
	}{
		{"--egress-proxy-port", opts.EgressProxyPort, DefaultEgressProxyPort, &cfg.proxyPort},
		{"--egress-resolver-port", opts.EgressResolverPort, DefaultEgressResolverPort, &cfg.resolverPort},
	} {
		switch {
		case p.v < 0:
			*p.dst = 0 // picked when the listeners open
		case p.v == 0:
			*p.dst = p.def
		case p.v > 65535:
			return cfg, fmt.Errorf("%s %d is not a port", p.flag, p.v)
		default:
			*p.dst = uint16(p.v)
		}
	}
	if cfg.proxyPort != 0 && cfg.proxyPort == cfg.resolverPort {
		return cfg, fmt.Errorf("--egress-proxy-port and --egress-resolver-port are both %d", cfg.proxyPort)
	}
	return cfg, nil
}

// parseDNSServer parses HOST:PORT or a bare address (port 53).
func parseDNSServer(s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, nil
	}
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%q is not ADDRESS[:PORT]", s)
	}
	return netip.AddrPortFrom(a, 53), nil
}

// resolvConfNameserver returns the first nameserver of a resolv.conf.
func resolvConfNameserver(path string) (netip.AddrPort, error) {
	f, err := os.Open(path)
	if err != nil {
		return netip.AddrPort{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "nameserver" {
			a, err := netip.ParseAddr(fields[1])
			if err != nil {
				continue
			}
			return netip.AddrPortFrom(a.WithZone(""), 53), nil
		}
	}
	if err := sc.Err(); err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPort{}, fmt.Errorf("%s names no nameserver", path)
}

// egressNet is the server's half of the egress layer: it owns the sandbox
// network pool (DATA/netns), Airlock's nftables table and the egress
// registry, and gives the worker its Network step.
type egressNet struct {
	cfg      egressConfig
	pool     *sandboxnet.Pool
	registry *egress.Registry
	log      *slog.Logger
	// policyFor returns the policy of a sandbox being registered.
	policyFor func(context.Context, model.SandboxID) (*policy.Policy, error)
	// caCertPEM is the deployment CA's certificate installed in every
	// sandbox.
	caCertPEM []byte

	// secrets gives the proxy each sandbox's secrets.
	secrets *secretSource

	// claim is this server's hold on the network namespace's egress
	// (see claimEgress), released when the process ends.
	claim io.Closer

	nftMu sync.Mutex // nftables calls on the table never run concurrently
}

// egressCADir holds the deployment's TLS interception CA under the data
// dir (internal/egress/tlsca: the key never leaves it).
const egressCADir = "egress-ca"

// openEgress opens the pool and the CA, binds the resolver and the proxy
// (fixing their ports) and writes the nftables table. The services run
// once egressComponents run.
func openEgress(cfg egressConfig, dd *dataDir, st store.Store, secretSrc *secretSource, onDecision func(decisionlog.Event), log *slog.Logger) (_ *egressNet, _ *egressServices, err error) {
	claim, err := claimEgress()
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			claim.Close()
		}
	}()
	pool, err := sandboxnet.NewPool(cfg.pool, dd.join(netnsDir))
	if err != nil {
		return nil, nil, fmt.Errorf("--egress-pool: %w", err)
	}
	ca, err := tlsca.LoadOrCreate(dd.join(egressCADir))
	if err != nil {
		return nil, nil, fmt.Errorf("egress CA: %w", err)
	}
	host := &hostAddrCache{}
	n := &egressNet{cfg: cfg, pool: pool, log: log, caCertPEM: ca.CertPEM(), claim: claim}
	n.registry = egress.NewRegistry(egress.RegistryConfig{Denied: host.deniedWith(cfg.pool), Logger: log, OnDecision: onDecision})
	n.policyFor = n.storedPolicy(st)
	n.secrets = secretSrc
	secretSrc.live = func(id model.SandboxID) bool { _, ok := n.registry.ByID(id); return ok }
	secretSrc.headers = func(id model.SandboxID) *policy.Headers {
		sb, ok := n.registry.ByID(id)
		if !ok {
			return nil
		}
		return sb.Policy().Spec().Headers
	}
	svc, err := newEgressServices(&n.cfg, n.registry, ca, secretSrc, log)
	if err != nil {
		return nil, nil, err
	}
	if err := n.nft(func(c *nftables.Conn) error {
		// Every sandboxnet host end is confined, even one whose set
		// member is missing: fail closed.
		return nftrules.Ensure(c, nftrules.Config{ProxyPort: n.cfg.proxyPort, ResolverPort: n.cfg.resolverPort, InterfacePrefix: sandboxnet.IfPrefix})
	}); err != nil {
		svc.close()
		return nil, nil, fmt.Errorf("nftables table %s: %w", nftrules.TableName, err)
	}
	return n, svc, nil
}

// Registry is what the resolver, the proxy and the API share about every
// running sandbox.
func (n *egressNet) Registry() *egress.Registry { return n.registry }

// storedPolicy returns a policyFor that compiles the sandbox's policy as the
// store keeps it ("egress" of its create, or its last change) with the
// operator's profiles and the server's default.
func (n *egressNet) storedPolicy(st store.Store) func(context.Context, model.SandboxID) (*policy.Policy, error) {
	return func(ctx context.Context, id model.SandboxID) (*policy.Policy, error) {
		spec, err := st.GetSandboxEgressByID(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			// No record of the sandbox: nothing allowed it anything.
			return policy.Compile(policy.Spec{}, nil, policy.None)
		}
		if err != nil {
			return nil, err
		}
		return store.CompileEgress(ctx, st, spec, n.cfg.defaultPolicy)
	}
}

// nft runs fn on a fresh netlink connection, one call at a time.
func (n *egressNet) nft(fn func(*nftables.Conn) error) error {
	n.nftMu.Lock()
	defer n.nftMu.Unlock()
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	defer c.CloseLasting()
	return fn(c)
}

// Attach gives a sandbox its netns and veth, puts its host end into the
// nftables set (before any guest process exists: the set is what confines
// it) and registers it; every step is idempotent.
func (n *egressNet) Attach(ctx context.Context, id model.SandboxID) (runtime.Network, error) {
	a, err := n.pool.Attach(ctx, id)
	if err != nil {
		return runtime.Network{}, err
	}
	if err := n.nft(func(c *nftables.Conn) error { return nftrules.AddSandbox(c, a.HostIf) }); err != nil {
		return runtime.Network{}, err
	}
	if err := n.register(ctx, id, a); err != nil {
		return runtime.Network{}, err
	}
	gw := a.HostAddr.Addr()
	return runtime.Network{NetnsPath: a.NetnsPath, GuestAddr: a.GuestAddr, Gateway: gw, DNS: gw, CACertPEM: n.caCertPEM}, nil
}

func (n *egressNet) register(ctx context.Context, id model.SandboxID, a sandboxnet.Attachment) error {
	// Registered with no policy (which denies everything) and then loaded
	// from the store through Reload, so a policy change racing the
	// registration is never lost: the API stores first, then reloads every
	// registered sandbox.
	sb := n.registry.Add(id, a.GuestAddr.Addr(), nil)
	if err := sb.Reload(func() (*policy.Policy, error) { return n.policyFor(ctx, id) }); err != nil {
		return fmt.Errorf("egress policy of %s: %w", id, err)
	}
	return nil
}

// Detach unregisters the sandbox (closing its proxied connections), removes
// its netns and veth, then its nftables set member: a crash in between
// leaves a member without an interface, which reconcile removes.
func (n *egressNet) Detach(ctx context.Context, id model.SandboxID) error {
	n.registry.Remove(id)
	if n.secrets != nil {
		n.secrets.forget(id)
	}
	if err := n.pool.Detach(ctx, id); err != nil {
		return err
	}
	return n.nft(func(c *nftables.Conn) error { return nftrules.RemoveSandbox(c, sandboxnet.HostIfName(id)) })
}

// reconcile runs at start, before the controller: it removes the network of
// every sandbox that live does not report (what a server killed
// mid-create or mid-delete left), removes nftables set members whose
// interface is gone, and puts back into the set and the registry every
// sandbox that keeps its network.
func (n *egressNet) reconcile(ctx context.Context, live map[model.SandboxID]bool) error {
	removed, err := n.pool.Reconcile(ctx, func(id model.SandboxID) bool { return live[id] })
	if len(removed) > 0 {
		n.log.Info("removed the networks of sandboxes that no longer exist", "sandboxes", removed)
	}
	// One sandbox's failure does not keep the server (and every other
	// sandbox) down: it is logged, and the sandbox fails closed (a host end
	// missing from the set is dropped by the interface-prefix rules; an
	// unregistered or policy-less sandbox gets no answer and no
	// connection).
	if err != nil {
		n.log.Warn("remove the networks of sandboxes that no longer exist", "err", err)
	}
	for id := range live {
		a, ok, err := n.pool.Lookup(id)
		if err != nil {
			n.log.Warn("sandbox network: lookup at start", "sandbox", id, "err", err)
			continue
		}
		if !ok {
			continue // not attached yet; the worker's create attaches it
		}
		if err := n.nft(func(c *nftables.Conn) error { return nftrules.AddSandbox(c, a.HostIf) }); err != nil {
			n.log.Warn("sandbox network: nftables set member at start; the sandbox reaches nothing", "sandbox", id, "err", err)
			continue
		}
		if err := n.register(ctx, id, a); err != nil {
			n.log.Warn("sandbox network: egress policy at start; the sandbox reaches nothing", "sandbox", id, "err", err)
		}
	}
	if err := n.removeStaleMembers(); err != nil {
		n.log.Warn("remove stale nftables set members", "err", err)
	}
	return nil
}

// release removes Airlock's nftables table when the server stops with no
// sandbox network left, so a stopped server with no sandboxes leaves nothing
// in the host's ruleset; with sandboxes, which outlive the server, the
// table stays (the next start ensures it again).
func (n *egressNet) release(log *slog.Logger) {
	defer n.claim.Close()
	left, err := n.pool.Leftovers()
	if err != nil || len(left) > 0 {
		log.Debug("the nftables table stays", "sandboxes", left, "err", err)
		return
	}
	if err := n.nft(nftrules.Remove); err != nil {
		log.Warn("remove the nftables table", "err", err)
	}
}

// reconcileEgress reconciles the sandbox networks with the store: a
// sandbox placed on this node and not deleted keeps its network.
func reconcileEgress(ctx context.Context, n *egressNet, st store.Store, node model.NodeID) error {
	sbs, err := st.ListSandboxesOnNode(ctx, node)
	if err != nil {
		return fmt.Errorf("reconcile sandbox networks: %w", err)
	}
	live := make(map[model.SandboxID]bool, len(sbs))
	for _, sb := range sbs {
		live[sb.ID] = true
	}
	if err := n.reconcile(ctx, live); err != nil {
		return fmt.Errorf("reconcile sandbox networks: %w", err)
	}
	return nil
}

// removeStaleMembers removes the set members whose interface does not
// exist. Members with an interface may belong to a sandbox being attached
// right now (the interface is made before the member) and stay.
func (n *egressNet) removeStaleMembers() error {
	return n.nft(func(c *nftables.Conn) error {
		names, err := nftrules.Sandboxes(c)
		if err != nil {
			return err
		}
		var errs []error
		for _, name := range names {
			_, err := netlink.LinkByName(name)
			var nf netlink.LinkNotFoundError
			if !errors.As(err, &nf) {
				if err != nil {
					errs = append(errs, err)
				}
				continue
			}
			if err := nftrules.RemoveSandbox(c, name); err != nil {
				errs = append(errs, err)
				// A failed call may leave messages in the Conn's batch.
				return errors.Join(errs...)
			}
			n.log.Info("removed a stale nftables set member", "interface", name)
		}
		return errors.Join(errs...)
	})
}

// hostAddrCache lists the host's own addresses, which no sandbox may reach
// and no answer may hand out; they change, so the list is re-read at most
// every hostAddrsTTL.
type hostAddrCache struct {
	mu     sync.Mutex
	addrs  map[netip.Addr]bool
	readAt time.Time
	err    error
}

// hostAddrsTTL is how long hostAddrCache trusts its list.
const hostAddrsTTL = 5 * time.Second

func (h *hostAddrCache) get() (map[netip.Addr]bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.addrs == nil || time.Since(h.readAt) > hostAddrsTTL {
		h.addrs, h.err = hostAddrs()
		h.readAt = time.Now()
	}
	return h.addrs, h.err
}

// deniedWith reports the addresses no sandbox may reach beyond the
// policy's always-denied ranges: the sandbox pool and the host's own
// addresses (all of them when they cannot be read: fail closed).
func (h *hostAddrCache) deniedWith(pool netip.Prefix) func(netip.Addr) bool {
	return func(a netip.Addr) bool {
		a = a.Unmap().WithZone("")
		if pool.Contains(a) || a.IsLoopback() || a.IsUnspecified() {
			return true
		}
		m, err := h.get()
		return err != nil || m[a]
	}
}

func hostAddrs() (map[netip.Addr]bool, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := make(map[netip.Addr]bool, len(addrs))
	for _, ia := range addrs {
		if ipn, ok := ia.(*net.IPNet); ok {
			if h, ok := netip.AddrFromSlice(ipn.IP); ok {
				out[h.Unmap()] = true
			}
		}
	}
	return out, nil
}

// egressServices are the resolver and the proxy, bound and not yet
// serving. They listen on every address: the nftables redirect rewrites a
// sandbox's packets to its host end's address (one per sandbox), and both
// refuse a source that is not a registered sandbox.
type egressServices struct {
	resolver *resolver.Resolver
	proxy    *proxy.Proxy
}

// newEgressServices binds the resolver (UDP and TCP) and the proxy on the
// configured ports (0: a free one) and records the ports in cfg.
func newEgressServices(cfg *egressConfig, reg *egress.Registry, ca *tlsca.CA, secretSrc proxy.SecretSource, log *slog.Logger) (*egressServices, error) {
	res, err := resolver.New(resolver.Config{
		Listen:   fmt.Sprintf(":%d", cfg.resolverPort),
		Upstream: cfg.upstreamDNS.String(),
		Registry: reg,
		Logger:   log,
	})
	if err != nil {
		return nil, fmt.Errorf("egress resolver: %w", err)
	}
	px, err := proxy.New(proxy.Config{
		Listen:   fmt.Sprintf(":%d", cfg.proxyPort),
		Registry: reg,
		CA:       ca,
		// The proxy resolves names itself, through the sandboxes' upstream
		// (never the guest's answer, never the host's /etc/hosts).
		Resolve: res.Lookup,
		Logger:  log,
		Secrets: secretSrc,
	})
	if err != nil {
		res.Close()
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	cfg.resolverPort = res.Addr().Port()
	cfg.proxyPort = uint16(px.Addr().(*net.TCPAddr).Port)
	return &egressServices{resolver: res, proxy: px}, nil
}

// close releases the sockets of services that never served.
func (s *egressServices) close() {
	s.resolver.Close()
	s.proxy.Close()
}

// egressComponents serve DNS and the proxy until ctx ends; a service's
// failure stops the server.
func egressComponents(n *egressNet, s *egressServices, log *slog.Logger) []component {
	serve := func(name string, run func(context.Context) error) component {
		return component{name: name, run: func(ctx context.Context) error {
			if err := run(ctx); err != nil && ctx.Err() == nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			return nil
		}}
	}
	log.Info("egress serving", "proxy_port", n.cfg.proxyPort, "resolver_port", n.cfg.resolverPort,
		"upstream_dns", n.cfg.upstreamDNS.String(), "pool", n.cfg.pool.String(), "default", string(n.cfg.defaultPolicy))
	return []component{
		serve("egress resolver", s.resolver.Serve),
		serve("egress proxy", s.proxy.Serve),
	}
}

// egressClaimDir holds one lock file per network namespace with an Airlock
// server (egress-net-<namespace inode>.lock): the server holds an exclusive
// flock on it while it owns that namespace's egress (the nftables table,
// the sandbox pool's interfaces, the proxy and resolver ports). The
// directory is root's alone, so no other user can take the lock first, and
// a killed server's lock goes with its process.
const egressClaimDir = "/run/airlock"

// claimEgress refuses a second server in one network namespace: two would
// rewrite one nftables table and hand out one address pool twice.
func claimEgress() (io.Closer, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return nil, fmt.Errorf("claim the sandbox network: %w", err)
	}
	if err := os.MkdirAll(egressClaimDir, 0o700); err != nil {
		return nil, fmt.Errorf("claim the sandbox network: %w", err)
	}
	if fi, err := os.Lstat(egressClaimDir); err != nil || !fi.IsDir() || fi.Mode().Perm()&0o022 != 0 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		return nil, fmt.Errorf("claim the sandbox network: %s must be a directory of root's that only root may write (%v)", egressClaimDir, err)
	}
	path := filepath.Join(egressClaimDir, fmt.Sprintf("egress-net-%d.lock", st.Ino))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("claim the sandbox network: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("another airlock server runs in this network namespace and owns its sandbox networks (nftables table %s, the egress ports; lock %s); run one server per host, or each in a network namespace of its own", nftrules.TableName, path)
		}
		return nil, fmt.Errorf("claim the sandbox network: lock %s: %w", path, err)
	}
	return &egressClaim{f: f, path: path}, nil
}

// egressClaim is a held claim; Close removes its lock file (so namespaces
// that come and go, as tests' do, leave no files) and releases it. A
// killed server leaves its file, unlocked, for the next one to take.
type egressClaim struct {
	once sync.Once
	f    *os.File
	path string
}

func (c *egressClaim) Close() error {
	var err error
	c.once.Do(func() {
		_ = os.Remove(c.path)
		err = c.f.Close()
	})
	return err
}
