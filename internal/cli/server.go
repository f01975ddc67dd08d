package cli

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockdev/airlock/internal/api"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/connbudget"
	"github.com/airlockdev/airlock/internal/dataplane"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/hostallow"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/pool"
	"github.com/airlockdev/airlock/internal/reaper"
	"github.com/airlockdev/airlock/internal/runtime/oci"
	"github.com/airlockdev/airlock/internal/runtime/qemu"
	"github.com/airlockdev/airlock/internal/server"
	"github.com/airlockdev/airlock/internal/template/gc"
)

// serverFlags are the flags of `airlock server`; their names are a contract
// with the docs and scripts. --data-dir is the global flag.
type serverFlags struct {
	listen      string
	metricsAddr string
	runtime     string
	envs        []string
	databaseURL string
	agentBinary string
	sandboxDir  string
	guestboot   string
	logLevel    string
	grace       time.Duration
	keyMaxAge   time.Duration
	overcommit  float64
	mutRate     float64
	mutBurst    int
	maxConns    int
	defaultDisk int
	maxDisk     int
	volumeQuota int64
	bodyTimeout time.Duration
	usernsBase  uint32
	usernsN     int
	vmUIDBase   uint32
	vmUIDN      int
	templateGC  time.Duration
	blobStore   string
	trusted     []string
	blobCreds   string
	defaultTpl  string
	buildCache  string
	registryCA  string
	idleDefault time.Duration
	retention   time.Duration
	reapEvery   time.Duration
	// audit log
	auditRetention time.Duration
	// warm pools
	poolMemory   int
	poolCPUs     int
	poolPids     int
	poolDrain    time.Duration
	e2b          bool
	e2bDomain    string
	poolParallel int
	// several nodes
	role           string
	advertiseURL   string
	publicURL      string
	labels         []string
	maxSandboxes   int
	pidsBudget     int
	placement      string
	heartbeat      time.Duration
	deadAfter      time.Duration
	adminKeyFile   string
	secretsKeyFile string
	// egress
	egressPool     string
	egressDefault  string
	egressDNS      string
	egressProxy    int
	egressResolver int
	// the Host allow-list (DNS rebinding)
	allowedHosts []string
	// the connection budget
	connsPerAddr    int
	connsUnauth     int
	connsPerProject int
	unauthIdle      time.Duration
	stdinIdle       time.Duration
	maxAttach       int
}

// options parses the flags into server.Options.
func (f serverFlags) options(dataDir string, stderr slog.Handler) (server.Options, error) {
	opts := server.Options{
		DataDir:              dataDir,
		Listen:               f.listen,
		MetricsListen:        f.metricsAddr,
		DatabaseURL:          f.databaseURL,
		AgentBinary:          f.agentBinary,
		SandboxDir:           f.sandboxDir,
		GuestbootDir:         f.guestboot,
		ShutdownGrace:        f.grace,
		AttachKeyMaxAge:      f.keyMaxAge,
		TemplateGCInterval:   f.templateGC,
		MemoryOvercommit:     f.overcommit,
		MutationRate:         f.mutRate,
		MutationBurst:        f.mutBurst,
		MaxConnections:       f.maxConns,
		DefaultDiskMiB:       f.defaultDisk,
		MaxDiskMiB:           f.maxDisk,
		VolumeQuotaMiB:       f.volumeQuota,
		BodyReadTimeout:      f.bodyTimeout,
		UsernsBase:           f.usernsBase,
		UsernsRanges:         f.usernsN,
		VMUIDBase:            f.vmUIDBase,
		VMUIDCount:           f.vmUIDN,
		BlobStore:            f.blobStore,
		TrustedBuckets:       f.trusted,
		BlobStoreCredentials: f.blobCreds,
		DefaultTemplate:      f.defaultTpl,
		BuildCacheDir:        f.buildCache,
		RegistryCA:           f.registryCA,
		DefaultIdleTimeout:   f.idleDefault,
		Retention:            f.retention,
		AuditRetention:       f.auditRetention,
		ReapInterval:         f.reapEvery,
		PoolMemoryMiB:        f.poolMemory,
		PoolCPUs:             f.poolCPUs,
		PoolPids:             f.poolPids,
		PoolDrainAfter:       f.poolDrain,
		NoE2B:                !f.e2b,
		E2BDomain:            f.e2bDomain,
		PoolFillParallel:     f.poolParallel,
		AllowedHosts:         f.allowedHosts,

		// The connection budget (docs/security.md, "Connection budgets").
		ConnectionsPerAddress:      f.connsPerAddr,
		UnauthenticatedConnections: f.connsUnauth,
		ConnectionsPerProject:      f.connsPerProject,
		UnauthenticatedIdleTimeout: f.unauthIdle,
		StdinIdleTimeout:           f.stdinIdle,
		MaxAttachments:             f.maxAttach,
	}
	if _, err := hostallow.Parse(f.allowedHosts); err != nil {
		return opts, usageErrorf("--allowed-hosts: %s", strings.TrimPrefix(err.Error(), model.ErrInvalid.Error()+": "))
	}
	if f.poolMemory < 0 || f.poolCPUs < 0 || f.poolPids < 0 || f.poolParallel < 0 {
		return opts, usageErrorf("--pool-memory-mib, --pool-cpus, --pool-pids and --pool-fill-parallel must not be negative (0: the default)")
	}
	if f.poolDrain != 0 && f.poolDrain < time.Minute {
		return opts, usageErrorf("--pool-drain-after must be at least 1m, not %s", f.poolDrain)
	}
	if err := f.clusterOptions(&opts); err != nil {
		return opts, err
	}
	if f.idleDefault < 0 || f.idleDefault > model.MaxIdleTimeout {
		return opts, usageErrorf("--default-idle-timeout must be between 0 (never) and %s, not %s", model.MaxIdleTimeout, f.idleDefault)
	}
	if f.idleDefault == 0 {
		opts.DefaultIdleTimeout = -1 // never
	}
	if f.auditRetention != 0 && f.auditRetention < time.Hour { // 0: the default
		return opts, usageErrorf("--audit-retention must be at least 1h, not %s", f.auditRetention)
	}
	if f.retention != 0 && f.retention < time.Minute { // 0: the default
		return opts, usageErrorf("--retention must be at least 1m, not %s", f.retention)
	}
	if f.reapEvery != 0 && (f.reapEvery < 100*time.Millisecond || f.reapEvery > time.Hour) {
		return opts, usageErrorf("--reap-interval must be between 100ms and 1h, not %s", f.reapEvery)
	}
	switch f.defaultTpl {
	case "", server.DefaultTemplateDebian, server.DefaultTemplateMinimal:
	default:
		return opts, usageErrorf("--default-template must be debian or minimal, not %q", f.defaultTpl)
	}
	if f.buildCache != "" {
		abs, err := filepath.Abs(f.buildCache)
		if err != nil {
			return opts, usageErrorf("--build-cache-dir: %w", err)
		}
		opts.BuildCacheDir = abs
	}
	if f.grace <= 0 {
		return opts, usageErrorf("--shutdown-grace must be positive, such as 30s")
	}
	_, port, err := net.SplitHostPort(f.listen)
	if err != nil {
		return opts, usageErrorf("--listen %q must be HOST:PORT: %w", f.listen, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return opts, usageErrorf("--listen %q: port %q is not a number from 0 to 65535", f.listen, port)
	}
	if f.metricsAddr != "" {
		if _, port, err := net.SplitHostPort(f.metricsAddr); err != nil {
			return opts, usageErrorf("--metrics-listen %q must be HOST:PORT: %w", f.metricsAddr, err)
		} else if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return opts, usageErrorf("--metrics-listen %q: port %q is not a number from 0 to 65535", f.metricsAddr, port)
		}
	}
	if opts.Environments, err = f.environments(); err != nil {
		return opts, err
	}
	if f.overcommit <= 0 || f.overcommit > 100 {
		return opts, usageErrorf("--memory-overcommit must be a ratio above 0 (1 = no overcommit), not %v", f.overcommit)
	}
	if f.maxConns < 1 {
		return opts, usageErrorf("--max-connections must be at least 1")
	}
	if f.maxDisk < model.MinDiskMiB || f.maxDisk > model.MaxDiskMiB {
		return opts, usageErrorf("--max-disk-mib must be between %d and %d", model.MinDiskMiB, model.MaxDiskMiB)
	}
	if f.defaultDisk < model.MinDiskMiB || f.defaultDisk > f.maxDisk {
		return opts, usageErrorf("--default-disk-mib must be between %d and --max-disk-mib (%d)", model.MinDiskMiB, f.maxDisk)
	}
	if f.bodyTimeout <= 0 {
		return opts, usageErrorf("--body-read-timeout must be positive, such as 30s")
	}
	if f.usernsBase < oci.IDRangeSize {
		return opts, usageErrorf("--userns-base must be at least %d (host root and the host's users must stay outside every sandbox's range)", oci.IDRangeSize)
	}
	if f.usernsN < 1 {
		return opts, usageErrorf("--userns-ranges must be at least 1")
	}
	if end := uint64(f.usernsBase) + uint64(f.usernsN)*oci.IDRangeSize; end > 1<<32-1 {
		return opts, usageErrorf("--userns-base %d plus --userns-ranges %d of %d ids ends at %d, beyond the largest id 4294967294", f.usernsBase, f.usernsN, oci.IDRangeSize, end-1)
	}
	vmBase, vmN := f.vmUIDBase, f.vmUIDN // 0: the defaults
	if vmBase == 0 {
		vmBase = qemu.DefaultVMIDBase
	}
	if vmN == 0 {
		vmN = qemu.DefaultVMIDCount
	}
	if vmBase < oci.IDRangeSize || vmN < 1 || uint64(vmBase)+uint64(vmN) > 1<<32-1 {
		return opts, usageErrorf("--vm-uid-base %d and --vm-uid-count %d: want a base of at least %d and a pool that ends below 4294967295", vmBase, vmN, oci.IDRangeSize)
	}
	if usernsEnd := uint64(f.usernsBase) + uint64(f.usernsN)*oci.IDRangeSize; uint64(vmBase) < usernsEnd && uint64(f.usernsBase) < uint64(vmBase)+uint64(vmN) {
		return opts, usageErrorf("--vm-uid-base %d with --vm-uid-count %d overlaps the user namespace pool (--userns-base %d … %d): a VM's QEMU would share its uid with a sandbox's root", vmBase, vmN, f.usernsBase, usernsEnd-1)
	}
	if f.mutBurst < 1 {
		return opts, usageErrorf("--mutation-burst must be at least 1")
	}
	if f.templateGC < 0 {
		return opts, usageErrorf("--template-gc-interval must not be negative (0 disables)")
	}
	if f.keyMaxAge < 0 {
		return opts, usageErrorf("--attach-key-max-age must not be negative")
	}
	if f.databaseURL != "" {
		u, err := url.Parse(f.databaseURL)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			return opts, usageErrorf("--database-url must be a postgres:// URL")
		}
	}
	if f.blobStore != "" && !strings.HasPrefix(f.blobStore, "file:///") && !strings.HasPrefix(f.blobStore, "s3://") {
		return opts, usageErrorf("--blob-store must be file:///DIR or s3://BUCKET[/PREFIX]?endpoint=URL, not %q", f.blobStore)
	}
	if f.publicURL != "" {
		if opts.PublicURL, err = parsePublicURL(f.publicURL); err != nil {
			return opts, err
		}
	}
	if err := f.egressOptions(&opts); err != nil {
		return opts, err
	}
	opts.Logger = slog.New(stderr)
	return opts, nil
}

// egressOptions parses the --egress-* flags into opts.
func (f serverFlags) egressOptions(opts *server.Options) error {
	if f.egressPool != "" {
		p, err := netip.ParsePrefix(f.egressPool)
		if err != nil || !p.Addr().Is4() {
			return usageErrorf("--egress-pool must be an IPv4 CIDR such as 10.213.0.0/16, not %q", f.egressPool)
		}
		opts.EgressPool = p
	}
	switch f.egressDefault {
	case "", "public", "none":
		opts.EgressDefault = f.egressDefault
	default:
		return usageErrorf("--egress-default must be public or none, not %q", f.egressDefault)
	}
	opts.EgressUpstreamDNS = f.egressDNS
	for _, p := range []struct {
		name string
		v    int
		dst  *int
	}{{"--egress-proxy-port", f.egressProxy, &opts.EgressProxyPort}, {"--egress-resolver-port", f.egressResolver, &opts.EgressResolverPort}} {
		switch {
		case p.v < 0 || p.v > 65535:
			return usageErrorf("%s must be a port from 0 (any free port) to 65535, not %d", p.name, p.v)
		case p.v == 0:
			*p.dst = -1 // server.Options: negative picks a free port
		default:
			*p.dst = p.v
		}
	}
	return nil
}

// parseLogLevel parses --log-level.
func parseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, usageErrorf("--log-level must be debug, info, warn or error, not %q", s)
	}
	return l, nil
}

func (a *app) serverCommand() *cobra.Command {
	var f serverFlags
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the Airlock server",
		Long: "Run the Airlock server: the management API, the data plane, the controller and\n" +
			"the worker, in one process. On first start it creates an admin API key in\n" +
			"DATA_DIR/admin.key (mode 0600) and writes its URL to DATA_DIR/server.url, where\n" +
			"the client commands on this host find them. Sandboxes outlive the process: a\n" +
			"restarted server adopts them. SIGINT or SIGTERM stops it.",
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			dataDir, err := client.ResolveDataDir(a.flags.dataDir, a.env.Getenv)
			if err != nil {
				return err
			}
			level, err := parseLogLevel(f.logLevel)
			if err != nil {
				return err
			}
			opts, err := f.options(dataDir, slog.NewTextHandler(a.env.Stderr, &slog.HandlerOptions{Level: level}))
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			err = server.Run(ctx, opts)
			if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
				return nil // a signal asked us to stop: a clean shutdown
			}
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.listen, "listen", "127.0.0.1:7070", "HOST:PORT to serve the API and the data plane on")
	// The Host allow-list (DNS rebinding): kept together.
	fs.StringSliceVar(&f.allowedHosts, "allowed-hosts", nil, "host names (name, *.domain, or * for any) a request's Host may carry besides the server's own: the --listen, --advertise-url and --public-url hosts, its host name, --e2b-domain and *.<it>; IP addresses and localhost always pass; any other Host gets 421 host_not_allowed (repeatable or comma-separated)")
	fs.StringVar(&f.metricsAddr, "metrics-listen", "", "HOST:PORT to also serve GET /metrics on WITHOUT authentication; bind it to a private interface (default: off; the main listener's /metrics needs an admin key)")
	fs.StringArrayVar(&f.envs, "env", nil, "execution environment to run sandboxes in: qemu (microVMs, KVM where it works, else emulated), runsc, crun or runc (repeatable; the first is the default; default: runsc, the strongest isolation that works on any host; qemu, runc and crun only when named)")
	fs.StringVar(&f.runtime, "runtime", "", "shorthand for --env: runc, crun, runsc or qemu")
	fs.StringVar(&f.databaseURL, "database-url", "", "PostgreSQL URL postgres://… (default: SQLite in the data dir)")
	fs.StringVar(&f.agentBinary, "agent-binary", "", "path of the airlock-agent binary (default: next to airlock, then $PATH)")
	fs.StringVar(&f.guestboot, "guestboot-dir", "", "where --env qemu builds and keeps the VM boot inputs (the guest kernel and initramfs, named by their inputs' digests; see `airlock env boot-inputs`) (default: DATA_DIR/guestboot)")
	fs.StringVar(&f.sandboxDir, "sandbox-dir", "", "directory for the sandboxes' writable storage (their disk images, bundles and sockets), e.g. on a filesystem of its own apart from the store (default: DATA_DIR/runtime/<runtime>/sandboxes)")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.DurationVar(&f.grace, "shutdown-grace", server.DefaultShutdownGrace, "on SIGTERM, how long open attach streams may run on before they are told to reconnect")
	fs.Float64Var(&f.overcommit, "memory-overcommit", server.DefaultMemoryOvercommit, "the node's sandboxes may ask for at most the host's memory times this in all, and one sandbox as much (cpus: at most the host's CPUs each)")
	fs.Float64Var(&f.mutRate, "mutation-rate", api.DefaultMutationRate, "mutating requests per second each API key may make (token bucket; negative: no limit)")
	fs.IntVar(&f.maxConns, "max-connections", server.DefaultMaxConnections, "open client connections at most (agent sockets need the rest of the file limit); beyond, idle unauthenticated ones are closed to make room, else new ones wait to be accepted")
	// The connection budget (docs/security.md, "Connection budgets").
	fs.IntVar(&f.connsPerAddr, "max-connections-per-address", 0, "open connections from one client address (IPv6: one /64) at most; beyond, its longest-idle unauthenticated one is closed, else 429 too_many_connections (0: a quarter of --max-connections; negative: no cap, e.g. behind a reverse proxy)")
	fs.IntVar(&f.connsUnauth, "max-unauthenticated-connections", 0, "open connections no credential came on yet, all clients together; the rest of --max-connections is kept for authenticated ones (0: half of --max-connections)")
	fs.IntVar(&f.connsPerProject, "max-connections-per-project", 0, "open connections authenticated as one project at most; beyond, 429 too_many_connections (0: a quarter of --max-connections)")
	fs.DurationVar(&f.unauthIdle, "unauthenticated-idle-timeout", connbudget.DefaultUnauthenticatedIdle, "a connection no credential came on is closed after idling this long (authenticated ones: 120s)")
	fs.IntVar(&f.maxAttach, "max-attachments", dataplane.DefaultAttachTotal, "attach streams (SSE and WebSocket) this server holds open together, every project; beyond, 429 too_many_attachments (an unread one holds about 1.5 MiB)")
	fs.DurationVar(&f.stdinIdle, "stdin-idle-timeout", api.DefaultStdinIdleTimeout, "a process's stdin stream (POST …/stdin) that gets no data for this long is ended with 408 request_timeout (clients open a new one when they have more)")
	fs.IntVar(&f.defaultDisk, "default-disk-mib", model.DefaultDiskMiB, "writable layer in MiB of a sandbox whose create request names none")
	fs.IntVar(&f.maxDisk, "max-disk-mib", server.DefaultMaxDiskMiB, "largest writable layer in MiB a sandbox may ask for (above: 400 exceeds_node_capacity)")
	fs.Int64Var(&f.volumeQuota, "volume-quota-mib", api.DefaultVolumeQuotaMiB, "the sizes of one project's volumes together in MiB at most (beyond: 403 quota_exceeded, limit volume_mib); -1: no bound")
	fs.DurationVar(&f.bodyTimeout, "body-read-timeout", api.DefaultBodyReadTimeout, "a request body must arrive within this (a file upload: each read); then 408 and the connection is closed")
	fs.Uint32Var(&f.usernsBase, "userns-base", oci.DefaultIDBase, "runc and crun: first host uid/gid of the ranges that sandboxes' user namespaces map root to")
	fs.IntVar(&f.usernsN, "userns-ranges", oci.DefaultIDRanges, "runc and crun: number of 65536-id ranges from --userns-base (one per sandbox)")
	fs.Uint32Var(&f.vmUIDBase, "vm-uid-base", qemu.DefaultVMIDBase, "qemu: first host uid/gid of the pool each VM's QEMU process runs as (one per VM; must not overlap the --userns-base pool)")
	fs.IntVar(&f.vmUIDN, "vm-uid-count", qemu.DefaultVMIDCount, "qemu: number of uids from --vm-uid-base")
	fs.IntVar(&f.mutBurst, "mutation-burst", api.DefaultMutationBurst, "mutating requests each API key may make at once")
	fs.DurationVar(&f.templateGC, "template-gc-interval", gc.DefaultInterval, "how often to delete templates that no tag and no live sandbox uses, and their trees on disk (0: never; POST /v1/admin/templates/gc runs it on demand)")
	fs.StringVar(&f.defaultTpl, "default-template", server.DefaultTemplateDebian, "what the template named default is: debian (Debian 12 with python3, node, git…, built in the background at first start; creates that need it wait) or minimal (the busybox template, also named minimal, ready at once: offline hosts, fast tests)")
	fs.StringVar(&f.buildCache, "build-cache-dir", "", "directory of the recipe build cache (default: DATA_DIR/build-cache)")
	fs.StringVar(&f.registryCA, "registry-ca", "", "PEM file of CA certificates that image pulls from registries trust besides the system's")
	fs.DurationVar(&f.keyMaxAge, "attach-key-max-age", server.DefaultAttachKeyMaxAge, "rotate the attachment-token signing key once it is older than this")
	fs.StringVar(&f.blobStore, "blob-store", "", "blob store shared by nodes, where imported templates are pushed and missing ones pulled by digest: file:///DIR or s3://BUCKET[/PREFIX]?endpoint=URL[&region=R][&path_style=true] (credentials: $AWS_ACCESS_KEY_ID, $AWS_SECRET_ACCESS_KEY or --blob-store-credentials)")
	fs.StringSliceVar(&f.trusted, "trusted-bucket", nil, "an S3 bucket the server may use as its blob store (repeatable); an s3:// --blob-store must name one of them")
	fs.StringVar(&f.blobCreds, "blob-store-credentials", "", "file (mode 0600) of AWS_ACCESS_KEY_ID=…, AWS_SECRET_ACCESS_KEY=… and optional AWS_SESSION_TOKEN=… lines for an s3:// --blob-store")
	fs.DurationVar(&f.idleDefault, "default-idle-timeout", model.DefaultIdleTimeout, "idle limit of a sandbox whose create request names none: without activity for this long it is suspended (0: never)")
	fs.DurationVar(&f.retention, "retention", reaper.DefaultRetention, "how long deleted sandboxes (with their command sessions) and finished operations stay in the store before they are purged")
	fs.DurationVar(&f.auditRetention, "audit-retention", reaper.DefaultAuditRetention, "how long audit log entries stay in the store before they are purged, oldest first")
	fs.DurationVar(&f.reapEvery, "reap-interval", reaper.DefaultInterval, "how often idle sandboxes are looked for (deadlines fire on a timer; this is their safety poll)")
	fs.IntVar(&f.poolMemory, "pool-memory-mib", 0, "memory (as their limits) that the unclaimed sandboxes of every warm pool on this node may hold together (0: a quarter of the host's memory)")
	fs.IntVar(&f.poolCPUs, "pool-cpus", 0, "vCPUs (as their limits) that the unclaimed sandboxes of every warm pool on this node may hold together (0: four per host CPU)")
	fs.IntVar(&f.poolPids, "pool-pids", 0, "host pids (their host pids limits, as --pids-budget counts them) that the unclaimed sandboxes of every warm pool on this node may hold together (0: the share of the node's pids budget that --pool-memory-mib is of the node's memory)")
	fs.BoolVar(&f.e2b, "e2b", true, "serve the E2B API on the same listener (E2B_API_URL and E2B_SANDBOX_URL = this server's URL; see docs/e2b.md)")
	fs.StringVar(&f.e2bDomain, "e2b-domain", "", "domain returned to E2B clients for sandbox hosts <port>-<sandbox id>.<domain> (may carry :port); empty: the client's E2B_DOMAIN")
	fs.DurationVar(&f.poolDrain, "pool-drain-after", model.DefaultPoolDrainAfter, "a warm pool no create matched for this long keeps no sandboxes until one does")
	fs.IntVar(&f.poolParallel, "pool-fill-parallel", pool.DefaultFillParallel, "warm-pool sandboxes this node creates at once")
	fs.StringVar(&f.role, "role", string(model.RoleAll), "what this process does: all (API and sandboxes), api (a stateless API replica that places sandboxes and routes to their nodes; needs --database-url) or node (runs sandboxes; needs --database-url)")
	fs.StringVar(&f.advertiseURL, "advertise-url", "", "URL the other processes on the database reach this one at, e.g. http://10.0.0.5:7070 (default: http:// and the --listen address, which must then not be a wildcard)")
	fs.StringVar(&f.publicURL, "public-url", "", "origin browsers and clients reach this server at, e.g. https://airlock.example.com behind a TLS-terminating proxy: https makes the console's cookie Secure (default: each request's own)")
	fs.StringArrayVar(&f.labels, "label", nil, "node label KEY=VALUE that sandboxes' node_selector matches (repeatable)")
	fs.IntVar(&f.maxSandboxes, "max-sandboxes", server.DefaultMaxSandboxes, "sandboxes placed on this node at most (those not deleted or failed)")
	fs.IntVar(&f.pidsBudget, "pids-budget", 0, "host tasks the node's sandboxes may hold in all, the sum of their host pids limits (runc/crun: guest limit + 64, runsc: 4 × guest limit + 256, qemu: 256; the guest limit is one task per 256 KiB of memory, 64 to 1024); 0: min(pid_max, threads-max) less 10% (at least 1024) kept for the host")
	fs.StringVar(&f.placement, "placement", string(model.PlaceSpread), "how a create picks among the nodes that fit: spread (most room left) or pack (fullest that fits)")
	fs.DurationVar(&f.heartbeat, "heartbeat-interval", server.DefaultHeartbeatInterval, "how often this node records that it is alive (the database's clock)")
	fs.DurationVar(&f.deadAfter, "node-dead-after", server.DefaultNodeDeadAfter, "a node without a heartbeat for this long is declared dead: its sandboxes are lost (failed, reason \"node lost\") and creates it had not started are placed again")
	fs.StringVar(&f.adminKeyFile, "admin-key-file", "", "file of the first admin API key: imported on a fresh database when it exists (e.g. a Kubernetes Secret), else written there (default: DATA_DIR/admin.key)")
	fs.StringVar(&f.secretsKeyFile, "secrets-key-file", "", "key that seals egress secrets in the store; every process sharing the database needs the same (default: DATA_DIR/secrets.key, made on first start)")
	fs.StringVar(&f.egressPool, "egress-pool", "10.213.0.0/16", "private IPv4 range of the sandboxes' links to the host (a /30 each)")
	fs.StringVar(&f.egressDefault, "egress-default", "public", "egress policy of a sandbox that sets none: public (names on the public internet; never private, link-local or host addresses) or none")
	fs.StringVar(&f.egressDNS, "egress-upstream-dns", "", "ADDRESS[:PORT] of the DNS server the egress resolver forwards allowed queries to (default: the first nameserver of /etc/resolv.conf)")
	fs.IntVar(&f.egressProxy, "egress-proxy-port", server.DefaultEgressProxyPort, "host port the sandboxes' TCP is redirected to (0: any free port)")
	fs.IntVar(&f.egressResolver, "egress-resolver-port", server.DefaultEgressResolverPort, "host port (UDP and TCP) the sandboxes' DNS is redirected to (0: any free port)")
	return cmd
}

// clusterOptions parses the flags of several nodes on one database.
func (f serverFlags) clusterOptions(opts *server.Options) error {
	role, err := model.ParseNodeRole(cmp.Or(f.role, string(model.RoleAll)))
	if err != nil {
		return usageErrorf("--role must be all, api or node, not %q", f.role)
	}
	if role != model.RoleAll && f.databaseURL == "" {
		return usageErrorf("--role %s needs --database-url: several processes share one PostgreSQL; SQLite serves one node (--role all)", role)
	}
	opts.Role = role
	if f.advertiseURL != "" {
		if opts.AdvertiseURL, err = model.ParseAdvertiseURL(f.advertiseURL); err != nil {
			return usageErrorf("--advertise-url: %w", err)
		}
	}
	if opts.Labels, err = parseLabelFlag("--label", f.labels); err != nil {
		return err
	}
	if f.maxSandboxes < 0 {
		return usageErrorf("--max-sandboxes must be at least 1 (0: the default, %d), not %d", server.DefaultMaxSandboxes, f.maxSandboxes)
	}
	opts.MaxSandboxes = f.maxSandboxes // 0: the default
	if f.pidsBudget < 0 {
		return usageErrorf("--pids-budget must not be negative (0: derived from the host's pid_max and threads-max), not %d", f.pidsBudget)
	}
	opts.PidsBudget = f.pidsBudget // 0: derived
	if opts.Placement, err = model.ParsePlacementStrategy(cmp.Or(f.placement, string(model.PlaceSpread))); err != nil {
		return usageErrorf("--placement must be spread or pack, not %q", f.placement)
	}
	heartbeat := cmp.Or(f.heartbeat, server.DefaultHeartbeatInterval)
	deadAfter := cmp.Or(f.deadAfter, server.DefaultNodeDeadAfter)
	if heartbeat < 100*time.Millisecond || heartbeat > time.Minute {
		return usageErrorf("--heartbeat-interval must be between 100ms and 1m, not %s", heartbeat)
	}
	if deadAfter < 3*heartbeat {
		return usageErrorf("--node-dead-after %s must be at least three heartbeats (3 × --heartbeat-interval %s)", deadAfter, heartbeat)
	}
	opts.HeartbeatInterval, opts.NodeDeadAfter = heartbeat, deadAfter
	for _, p := range []*string{&f.adminKeyFile, &f.secretsKeyFile} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return usageErrorf("key file %s: %w", *p, err)
		}
		*p = abs
	}
	opts.AdminKeyFile, opts.SecretsKeyFile = f.adminKeyFile, f.secretsKeyFile
	return nil
}

// environments parses --runtime (shorthand for an --env given first) and
// --env into the enabled execution environments, the default first.
func (f serverFlags) environments() ([]environment.Name, error) {
	var out []environment.Name
	if f.runtime != "" {
		n, err := environment.ParseName(f.runtime)
		if err != nil {
			return nil, usageErrorf("--runtime must be runc, crun or runsc, not %q", f.runtime)
		}
		out = append(out, n)
	}
	for i, v := range f.envs {
		n, err := environment.ParseName(v)
		if err != nil {
			return nil, usageErrorf("--env must be runsc, crun or runc, not %q", v)
		}
		if slices.Contains(out, n) {
			if i == 0 && f.runtime == v {
				continue // --runtime X --env X
			}
			return nil, usageErrorf("--env %s given twice", n)
		}
		out = append(out, n)
	}
	return out, nil
}

// parsePublicURL parses --public-url: an http(s) origin, returned as
// scheme://host[:port] (scheme lower case).
func parsePublicURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return "", usageErrorf("--public-url must be http(s)://host[:port], the origin browsers and clients reach the server at; not %q", s)
	}
	return u.Scheme + "://" + u.Host, nil
}
