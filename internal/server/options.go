// Package server is Airlock's composition root: it opens the store, picks and
// probes the runtime, and wires the controller, worker, management API and
// data plane into one `airlock server` process.
package server

import (
	"log/slog"
	"net/netip"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
)

// DefaultShutdownGrace is the default of Options.ShutdownGrace.
const DefaultShutdownGrace = 30 * time.Second

// Values of Options.DefaultTemplate.
const (
	DefaultTemplateDebian  = "debian"
	DefaultTemplateMinimal = "minimal"
)

// DefaultMaxDiskMiB is the default of Options.MaxDiskMiB: 100 GiB.
const DefaultMaxDiskMiB = 100 * 1024

// Options configure `airlock server`. The flag names of `airlock server` map
// one to one onto these fields.
type Options struct {
	DataDir string // --data-dir: everything Airlock stores on this host; DIR/admin.key holds the first admin key
	Listen  string // --listen HOST:PORT
	// MetricsListen (--metrics-listen HOST:PORT) also serves GET /metrics
	// there without authentication (bind it to a private interface); "":
	// only the main listener's GET /metrics, which needs an admin key.
	MetricsListen string
	DatabaseURL   string       // --database-url postgres://…; "" uses SQLite in DataDir
	AgentBinary   string       // --agent-binary; "" looks next to the airlock binary, then in PATH
	Logger        *slog.Logger // nil: text logs on stderr
	// TracerProvider records the server's spans; nil: the one the OTEL_*
	// environment asks for (tracing.go).
	TracerProvider trace.TracerProvider
	// Environments (--env NAME, repeatable; --runtime NAME is shorthand
	// for one) are the execution environments this server runs sandboxes
	// in, the first the default; each must work here. Empty: the
	// strongest automatic one that works (runsc); shared-kernel ones (runc,
	// crun) only when named.
	Environments []environment.Name
	// SandboxDir (--sandbox-dir) holds the sandboxes' storage: each
	// runtime's per-sandbox state directories (bundle, disk image, agent
	// socket), in SandboxDir/<runtime>/. Put it on a filesystem of its own
	// to keep sandboxes' writes apart from the store. "": under the data
	// dir, DataDir/runtime/<runtime>/sandboxes. Changing it while
	// sandboxes exist orphans them: the server no longer finds them.
	SandboxDir string
	// GuestbootDir (--guestboot-dir) is where the qemu environment's boot
	// inputs (guest kernel and initramfs) are built and kept, named by
	// their inputs' digests; "" is DATA_DIR/guestboot. Several servers may
	// share one.
	GuestbootDir string
	// ShutdownGrace (--shutdown-grace): on SIGTERM the server stops taking
	// new attachments and connections (readiness fails) and lets open
	// streams run this long; then they end with a reconnect event. 0:
	// DefaultShutdownGrace.
	ShutdownGrace time.Duration
	// MemoryOvercommit (--memory-overcommit): the node's sandboxes may
	// ask for at most the host's memory times this in all (the node's
	// memory for placement), and so one sandbox too; cpus are bounded by
	// the host's CPUs. 0: DefaultMemoryOvercommit.
	MemoryOvercommit float64
	// PidsBudget (--pids-budget): the host tasks the node's sandboxes may
	// hold in all, the sum of their host cgroups' pids limits
	// (model.Resources.HostPids); 0: derived from the host's pid_max and
	// threads-max (derivePidsBudget); negative: invalid.
	PidsBudget int
	// MutationRate and MutationBurst (--mutation-rate, --mutation-burst):
	// each API key's mutating requests per second and at once; 0: the
	// API's defaults; a negative rate: no limit.
	MutationRate  float64
	MutationBurst int
	// DefaultDiskMiB (--default-disk-mib) is the writable layer of a
	// sandbox whose create request names no disk_mib; MaxDiskMiB
	// (--max-disk-mib) the largest one may ask for. 0: model.DefaultDiskMiB
	// and DefaultMaxDiskMiB.
	DefaultDiskMiB int
	MaxDiskMiB     int
	// VolumeQuotaMiB (--volume-quota-mib) bounds the sizes of one
	// project's volumes together; 0: api.DefaultVolumeQuotaMiB, negative:
	// no bound.
	VolumeQuotaMiB int64
	// BodyReadTimeout (--body-read-timeout) bounds how long a client may
	// take to send a request body (a file upload: each read); then it gets
	// 408 request_timeout and its connection is closed. 0:
	// api.DefaultBodyReadTimeout.
	BodyReadTimeout time.Duration
	// MaxConnections (--max-connections) bounds the open client
	// connections; beyond it new ones wait to be accepted. 0:
	// DefaultMaxConnections.
	MaxConnections int
	// The connection budget's shares of MaxConnections (internal/connbudget;
	// docs/security.md, "Connection budgets"); 0 takes the default.
	// ConnectionsPerAddress (--max-connections-per-address, default a
	// quarter; negative: no cap, behind a reverse proxy),
	// UnauthenticatedConnections (--max-unauthenticated-connections,
	// default half), ConnectionsPerProject (--max-connections-per-project,
	// default a quarter), UnauthenticatedIdleTimeout
	// (--unauthenticated-idle-timeout, default 5 s: how long a connection
	// no credential came on may idle). StdinIdleTimeout
	// (--stdin-idle-timeout): a stdin stream that gets no data for this
	// long is ended (408 request_timeout); 0: api.DefaultStdinIdleTimeout.
	// MaxAttachments (--max-attachments): the attachments (SSE and
	// WebSocket) this server holds together, which bounds their memory;
	// 0: dataplane.DefaultAttachTotal.
	ConnectionsPerAddress      int
	UnauthenticatedConnections int
	ConnectionsPerProject      int
	UnauthenticatedIdleTimeout time.Duration
	StdinIdleTimeout           time.Duration
	MaxAttachments             int
	// AttachKeyMaxAge (--attach-key-max-age): the attachment-token signing
	// key is rotated once older, on start and while running; 0 means
	// DefaultAttachKeyMaxAge.
	AttachKeyMaxAge time.Duration
	// UsernsBase and UsernsRanges (--userns-base, --userns-ranges): runc
	// and crun sandboxes each get a user namespace whose root is a host id
	// range of their own, one of UsernsRanges ranges of 65536 uids and gids
	// from UsernsBase on. 0: oci.DefaultIDBase (2^30) and
	// oci.DefaultIDRanges (16384). Give servers that share a host disjoint
	// pools.
	UsernsBase   uint32
	UsernsRanges int
	// VMUIDBase and VMUIDCount (--vm-uid-base, --vm-uid-count): each qemu
	// VM's QEMU process runs as one host uid (= gid) of this pool. 0:
	// qemu.DefaultVMIDBase (3·2^30) and qemu.DefaultVMIDCount (65536).
	// It must not overlap the user namespace pool.
	VMUIDBase  uint32
	VMUIDCount int
	// TemplateGCInterval (--template-gc-interval): how often the server
	// collects templates that no tag and no live sandbox uses and removes
	// deleted templates' trees (internal/template/gc); 0 disables the
	// periodic run (POST /v1/admin/templates/gc still runs one).
	TemplateGCInterval time.Duration
	// BlobStore (--blob-store) is the blob store shared by nodes, where
	// imported templates are pushed and from which templates missing here
	// are pulled by digest: file:///DIR or
	// s3://BUCKET[/PREFIX]?endpoint=URL[&region=R][&path_style=true].
	// "": none; templates stay on the node that imported them.
	BlobStore string
	// TrustedBuckets (--trusted-bucket, repeatable) is the allowlist an s3://
	// blob store's bucket must be on.
	TrustedBuckets []string
	// BlobStoreCredentials (--blob-store-credentials) is a 0600 file of
	// AWS_ACCESS_KEY_ID=…, AWS_SECRET_ACCESS_KEY=… (and AWS_SESSION_TOKEN=…)
	// lines; "": those environment variables.
	BlobStoreCredentials string
	// DefaultTemplate (--default-template) is what the template named
	// "default" is: DefaultTemplateDebian (the Debian recipe, built in the
	// background at start unless its build is cached) or
	// DefaultTemplateMinimal (the busybox tree, also named "minimal", ready
	// at once; for offline hosts and fast tests). "": Debian.
	DefaultTemplate string
	// BuildCacheDir (--build-cache-dir) holds the recipe build cache; "":
	// DataDir/build-cache.
	BuildCacheDir string
	// RegistryCA (--registry-ca) is a PEM file of CA certificates that
	// image pulls from registries trust besides the system's; "": the
	// system's only.
	RegistryCA string
	// Egress. Every sandbox gets its own network namespace wired to the
	// host by a veth pair (internal/egress/sandboxnet) whose TCP and DNS
	// Airlock's nftables table redirects to the egress proxy and resolver;
	// one server per host owns that table and the pool.
	//
	// EgressPool (--egress-pool) is the IPv4 range of the sandboxes' /30
	// links; zero: sandboxnet.DefaultPrefix (10.213.0.0/16).
	EgressPool netip.Prefix
	// EgressDefault (--egress-default public|none) is the policy of a
	// sandbox that sets no default: the public internet, or nothing. "":
	// public.
	EgressDefault string
	// EgressUpstreamDNS (--egress-upstream-dns ADDRESS[:PORT]) is where the
	// resolver forwards allowed queries; "": the first nameserver of
	// /etc/resolv.conf.
	EgressUpstreamDNS string
	// EgressProxyPort and EgressResolverPort (--egress-proxy-port,
	// --egress-resolver-port) are the host ports the sandboxes' TCP and DNS
	// are redirected to; 0: DefaultEgressProxyPort and
	// DefaultEgressResolverPort; negative: a free port.
	EgressProxyPort    int
	EgressResolverPort int
	// DefaultIdleTimeout (--default-idle-timeout) is the idle limit of a
	// sandbox whose create request names none; 0: model.DefaultIdleTimeout;
	// negative: never.
	DefaultIdleTimeout time.Duration
	// Retention (--retention): deleted sandboxes (with their command
	// sessions) and finished operations older than this are purged from
	// the store (internal/reaper); 0: reaper.DefaultRetention.
	Retention time.Duration
	// AuditRetention (--audit-retention): audit entries older than this
	// are purged (internal/reaper); 0: reaper.DefaultAuditRetention.
	AuditRetention time.Duration
	// ReapInterval (--reap-interval): how often the reaper looks for idle
	// sandboxes (deadlines fire on a timer; this is their safety poll); 0:
	// reaper.DefaultInterval.
	ReapInterval time.Duration
	// Several nodes on one PostgreSQL (cluster.go).
	//
	// Role (--role): all (API and sandboxes, the default), api (a
	// stateless API replica that places and routes) or node (runs
	// sandboxes). "": all.
	Role model.NodeRole
	// AdvertiseURL (--advertise-url) is where the other processes reach
	// this one's HTTP server; "": http:// and the listen address (which
	// must then not be a wildcard when other nodes share the database).
	AdvertiseURL string
	// PublicURL (--public-url) is the origin browsers and clients reach
	// the server at (scheme://host[:port]), e.g. a TLS-terminating
	// proxy's: an https one makes the console's session cookie Secure
	// (__Host-), and its origin is the console's own for the Origin
	// check. It also bases attach URLs. "": each request's own.
	PublicURL string
	// Labels (--label KEY=VALUE, repeatable) are matched by sandboxes'
	// node selectors.
	Labels model.NodeLabels
	// MaxSandboxes (--max-sandboxes) bounds the sandboxes placed on this
	// node; 0: DefaultMaxSandboxes.
	MaxSandboxes int
	// Placement (--placement): spread (default) or pack.
	Placement model.PlacementStrategy
	// HeartbeatInterval (--heartbeat-interval) and NodeDeadAfter
	// (--node-dead-after): a node heartbeats this often, and one whose
	// heartbeat is older than NodeDeadAfter (by the database's clock) is
	// declared dead. 0: DefaultHeartbeatInterval, DefaultNodeDeadAfter.
	HeartbeatInterval time.Duration
	NodeDeadAfter     time.Duration
	// AdminKeyFile (--admin-key-file): where the first admin key is
	// written on a fresh database, or read from when the file exists (a
	// key the operator made, e.g. a Kubernetes Secret, is imported). "":
	// DataDir/admin.key.
	AdminKeyFile string
	// SecretsKeyFile (--secrets-key-file): the key that seals egress
	// secrets in the store, which every process sharing the database must
	// share. "": DataDir/secrets.key (made on first start).
	SecretsKeyFile string

	// Warm pools (see internal/pool). PoolMemoryMiB (--pool-memory-mib)
	// and PoolCPUs (--pool-cpus) bound what the unclaimed sandboxes of
	// every pool on this node may hold together (their memory and CPU
	// limits); 0: DefaultPoolMemoryMiB (a quarter of the host's memory) and
	// DefaultPoolCPUs (four per host CPU). PoolDrainAfter
	// (--pool-drain-after): a pool no create has matched for this long
	// keeps no sandboxes until one does; 0: DefaultPoolDrainAfter.
	// PoolFillParallel (--pool-fill-parallel): how many pool sandboxes
	// this node creates at once; 0: DefaultPoolFillParallel. PoolPids
	// (--pool-pids) bounds their host pids together; 0: the share of the
	// node's pids budget that PoolMemoryMiB is of the node's memory.
	PoolMemoryMiB    int
	PoolCPUs         int
	PoolPids         int
	PoolDrainAfter   time.Duration
	PoolFillParallel int

	// NoE2B (--e2b=false) turns the E2B front door off: then only
	// Airlock's own API answers on the listener. E2BDomain (--e2b-domain)
	// is the domain E2B clients are told to reach sandbox ports under
	// (<port>-<sandbox id>.<domain>, may carry :port); "": none, the
	// client's own E2B_DOMAIN applies.
	NoE2B     bool
	E2BDomain string

	// AllowedHosts (--allowed-hosts, repeatable) are the names besides
	// the server's own (those of Listen, AdvertiseURL, PublicURL, the host
	// name, E2BDomain and *.E2BDomain) that a request's Host may carry:
	// "name", "*.domain" or "*" (any: the check off). Addresses and
	// localhost always pass; any other Host gets 421 host_not_allowed
	// (DNS rebinding, see docs/security.md).
	AllowedHosts []string

	// FaultPoint makes the process SIGKILL itself when it reaches the named
	// point (crash-safety tests); "" reads AIRLOCK_TEST_CRASH_AT.
	FaultPoint string
}
