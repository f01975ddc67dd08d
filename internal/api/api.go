// Package api serves Airlock's management API v1: JSON over HTTP, described
// by the OpenAPI 3.1 document it serves at /openapi.json.
//
// Every /v1 route needs an API key (Bearer) and is scoped to the key's
// project: another project's sandboxes, operations and sessions do not exist
// for it (404, never 403). Admin routes need role admin. Every mutating call
// honours an Idempotency-Key (see idempotency.go). The API only writes
// desired state; the reconciler does the work and the data plane (another
// package) serves command output. Handlers decode, authorize and encode:
// creating, deleting and the lifecycle of sandboxes, placement and warm
// pools are internal/sandboxes' (Config.Sandboxes), a guest's files and
// processes internal/guestops' (Config.Guests).
package api

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/egress/secrets"
	"github.com/airlockdev/airlock/internal/guestops"
	"github.com/airlockdev/airlock/internal/metrics"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/noderoute"
	"github.com/airlockdev/airlock/internal/sandboxes"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/streamlimit"
	"github.com/airlockdev/airlock/internal/template/build"
	"github.com/airlockdev/airlock/internal/tracing"
)

//go:embed openapi.json
var openAPIDocument []byte

// Defaults of Config.
const (
	DefaultMaxBodyBytes = 1 << 20
	DefaultAttachTTL    = auth.AttachTokenTTL
	// MaxWait is the longest long-poll of GET /v1/operations/{id}?wait=.
	MaxWait = 60 * time.Second
)

// Config configures the API.
type Config struct {
	Store store.Store
	// Volumes is this node's volume storage; nil on a process that runs
	// no sandboxes (the holding node's reconciler removes a deleted
	// volume's files).
	Volumes VolumeHost
	// VolumeQuotaMiB bounds the sizes of one project's volumes together
	// (0: DefaultVolumeQuotaMiB; negative: no bound).
	VolumeQuotaMiB int64
	// Distribution is the shared blob store's distributor, which the build
	// runner pushes templates to and pulls "sha256:…" sources from; the API
	// only asks whether there is one. nil: the server has none.
	Distribution build.Distributor
	// Attach signs attachment tokens (the private half of the keyring).
	Attach *auth.Issuer
	// AttachKeys rotates the signing key (POST /v1/admin/attach-keys/rotate);
	// nil: the route answers 501 not_supported.
	AttachKeys KeyRotator
	Logger     *slog.Logger // nil: slog.Default()
	// TracerProvider records a span of each request (trace.go); nil: none.
	TracerProvider trace.TracerProvider
	// PublicURL is the scheme://host[:port] clients reach the server at, used
	// to build attach URLs. Empty: derived from each request.
	PublicURL    string
	MaxBodyBytes int64            // 0: DefaultMaxBodyBytes
	Now          func() time.Time // nil: time.Now
	// Ready reports whether the server can take work (GET /readyz). Nil: ready.
	Ready     func(ctx context.Context) error
	AttachTTL time.Duration // lifetime of an attachment token; 0: DefaultAttachTTL; at most auth.AttachTokenTTL
	// MutationRate and MutationBurst bound each API key's mutating
	// requests (token bucket); 0: the defaults; a negative rate: no limit.
	MutationRate  float64
	MutationBurst int
	// PoolDrainAfter is the servers' drain period, shown as a pool's
	// "drained"; 0: model.DefaultPoolDrainAfter.
	PoolDrainAfter time.Duration
	// Environments lists the execution environments (GET
	// /v1/environments); nil: the route answers 501 not_supported.
	Environments Environments
	// Sandboxes creates, deletes and changes the lifecycle of sandboxes,
	// and sets warm pools: the server's, with its placement, pools,
	// environments and runtimes' lifecycle support. Nil: a service over
	// Store alone, which places nothing, claims from no pool, records no
	// environment and checks no runtime (tests).
	Sandboxes *sandboxes.Service
	// Guests reaches the guests of sandboxes hosted here (process and
	// file routes, background commands): the server passes
	// agentguest.New over its workers. Nil: those routes answer 501.
	Guests guestops.Guests
	// BodyReadTimeout bounds how long a client may take to send a request
	// body: the whole of a JSON body, and each read of a streamed file
	// upload. 0: DefaultBodyReadTimeout; negative: no bound. See
	// withBodyDeadline.
	BodyReadTimeout time.Duration
	// StdinIdleTimeout bounds each read of a process's stdin stream (an
	// interactive stream, idle whenever its user is: clients end it
	// sooner when they have nothing to send and open a new one later).
	// 0: DefaultStdinIdleTimeout; negative: no bound.
	StdinIdleTimeout time.Duration
	// FileTokens issues file transfer tokens for the file routes (normally
	// the keyring's Issuer, as Attach); nil:
	// those answer 501 not_supported.
	FileTokens FileTokenIssuer
	// TemplateDefaults gives a template's defaults for the commands of
	// its sandboxes (working directory, user); nil: none (root, "/").
	TemplateDefaults func(model.TemplateDigest) (guestops.Defaults, error)
	// TemplateGC removes deleted templates' trees and runs collections
	// (POST /v1/admin/templates/gc); nil: deletes leave trees on disk and
	// the gc route answers 501 not_supported.
	TemplateGC TemplateCollector

	// Builds is the server's build runner, for the logs and progress of
	// GET /v1/builds/{id}/log; nil: logs are empty.
	Builds BuildRunner

	// EgressDefault is the server's --egress-default, for policies that
	// name none; "": policy.Public.
	EgressDefault policy.Default
	// Egress is the live egress state of the sandboxes hosted here (the
	// server's *egress.Registry); nil: policies are stored and applied
	// when sandboxes start, and decision logs are empty.
	Egress EgressState
	// Secrets seals secret values (secrets.OpenKey of DATA/secrets.key);
	// nil: the secret routes answer 501 not_supported.
	Secrets *secrets.Sealer

	// SecretsChanged, if set, is called after a project's secrets were
	// created, replaced or deleted (the proxy drops what it cached).
	SecretsChanged func(model.ProjectID)

	// DefaultIdleTimeout is the idle limit of a sandbox whose create
	// request names none (--default-idle-timeout); 0:
	// model.DefaultIdleTimeout; negative: never.
	DefaultIdleTimeout time.Duration
	// Activity is told of calls that use a sandbox (timeouts.go); nil:
	// they are not recorded.
	Activity ActivityRecorder

	// Self is this process's node ID (required with Nodes). Requests for
	// sandboxes hosted on another node are forwarded there (forward.go),
	// and forwarded requests must name Self.
	Self model.NodeID
	// Nodes finds other nodes' advertise URLs (the store); nil: nothing is
	// forwarded (a single node).
	Nodes noderoute.Nodes
	// NodeTransport carries forwarded requests; nil: noderoute.NewTransport().
	NodeTransport http.RoundTripper
	// PeerVerifier checks the forward tokens of requests other replicas
	// forwarded here (the keyring's Verifier with the published keys);
	// nil: forwarded requests are refused.
	PeerVerifier *auth.Verifier
	// SandboxTokens checks sandbox access tokens (als_…, see
	// authenticateSandbox): the keyring's Verifier with the published
	// keys (as PeerVerifier), so a token any replica signed verifies on
	// every node; nil: sandbox access tokens are refused (401).
	SandboxTokens *auth.Verifier

	// Metrics serves GET /metrics (admin); nil: the route answers 501
	// not_supported.
	Metrics *metrics.Metrics
}

// API is the management API handler.
type API struct {
	cfg     Config
	log     *slog.Logger
	routes  []route
	mux     *http.ServeMux
	handler http.Handler
	limits  *keyLimits          // nil: no rate limit
	watches *streamlimit.Limits // open GET /v1/watch/sandboxes streams (watchCapKey, watchCapProject)
	router  *noderoute.Router   // nil: nothing is forwarded

	stores handlerStores // Config.Store as the handler groups use it (stores.go)

	auditFailures atomic.Int64 // audit entries not written (audit.go)
	tracer        trace.Tracer // nil: not traced
}

// New checks cfg and builds the API.
func New(cfg Config) (*API, error) {
	if cfg.Store == nil {
		return nil, errors.New("api: Config.Store is required")
	}
	if cfg.Attach == nil {
		return nil, errors.New("api: Config.Attach (the attachment token issuer) is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("api: MaxBodyBytes %d is negative", cfg.MaxBodyBytes)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.EgressDefault != "" {
		if _, err := policy.ParseDefault(string(cfg.EgressDefault)); err != nil {
			return nil, fmt.Errorf("api: EgressDefault: %w", err)
		}
	}
	if cfg.BodyReadTimeout == 0 {
		cfg.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if cfg.StdinIdleTimeout == 0 {
		cfg.StdinIdleTimeout = DefaultStdinIdleTimeout
	}
	if cfg.PoolDrainAfter <= 0 {
		cfg.PoolDrainAfter = model.DefaultPoolDrainAfter
	}
	if cfg.DefaultIdleTimeout > model.MaxIdleTimeout {
		return nil, fmt.Errorf("api: DefaultIdleTimeout %s is over %s", cfg.DefaultIdleTimeout, model.MaxIdleTimeout)
	}
	if cfg.AttachTTL < 0 {
		return nil, fmt.Errorf("api: AttachTTL %s is negative", cfg.AttachTTL)
	}
	if cfg.AttachTTL == 0 {
		cfg.AttachTTL = DefaultAttachTTL
	}
	if cfg.AttachTTL > auth.AttachTokenTTL || cfg.AttachTTL < time.Second {
		return nil, fmt.Errorf("api: AttachTTL %s must be between 1s and %s", cfg.AttachTTL, auth.AttachTokenTTL)
	}
	if cfg.PublicURL != "" {
		u, err := parsePublicURL(cfg.PublicURL)
		if err != nil {
			return nil, err
		}
		cfg.PublicURL = u
	}
	if !json.Valid(openAPIDocument) {
		return nil, errors.New("api: the embedded OpenAPI document is not valid JSON")
	}
	if cfg.Nodes != nil && cfg.Self == "" {
		return nil, errors.New("api: Config.Self is required with Config.Nodes")
	}
	if cfg.Sandboxes == nil {
		var err error
		cfg.Sandboxes, err = sandboxes.New(sandboxes.Config{Store: cfg.Store, Logger: cfg.Logger, Now: cfg.Now,
			Egress: cfg.Egress, EgressDefault: cfg.EgressDefault, Metrics: cfg.Metrics})
		if err != nil {
			return nil, err
		}
	}
	a := &API{cfg: cfg, log: cfg.Logger, stores: newHandlerStores(cfg.Store), router: noderoute.New(cfg.Self, cfg.Nodes, cfg.NodeTransport, cfg.Logger),
		tracer: tracing.Tracer(cfg.TracerProvider), watches: streamlimit.New(WatchPerKey, WatchPerProject)}
	if cfg.MutationRate >= 0 {
		rate := cfg.MutationRate
		if rate == 0 {
			rate = DefaultMutationRate
		}
		burst := cfg.MutationBurst
		if burst <= 0 {
			burst = DefaultMutationBurst
		}
		a.limits = newKeyLimits(rate, burst)
	}
	a.routes = a.routeTable()
	a.mux = http.NewServeMux()
	for _, rt := range a.routes {
		a.mux.Handle(rt.method+" "+rt.pattern, a.guard(rt))
	}
	a.handler = a.Wrap(http.HandlerFunc(a.dispatch))
	return a, nil
}

// Wrap gives h the API's request middleware: a request ID (X-Request-Id),
// the access log, panic recovery and the request body's read deadline. The
// server wraps the data plane with it.
func (a *API) Wrap(h http.Handler) http.Handler {
	return a.withRequestContext(a.recoverPanics(a.withBodyDeadline(a.withTracing(h))))
}

// Handler returns the HTTP handler of the whole API.
func (a *API) Handler() http.Handler { return a.handler }

// now is the API's clock, truncated to what the stores keep (microseconds, UTC),
// so that a response built before an insert equals what a later read returns.
func (a *API) now() time.Time { return a.cfg.Now().UTC().Truncate(time.Microsecond) }
