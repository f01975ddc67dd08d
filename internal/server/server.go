package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/airlockdev/airlock/internal/api"
	"github.com/airlockdev/airlock/internal/atomicfile"
	"github.com/airlockdev/airlock/internal/binpath"
	"github.com/airlockdev/airlock/internal/controller"
	"github.com/airlockdev/airlock/internal/dataplane"
	"github.com/airlockdev/airlock/internal/e2b"
	"github.com/airlockdev/airlock/internal/egress/secrets"
	"github.com/airlockdev/airlock/internal/guestops"
	"github.com/airlockdev/airlock/internal/guestops/agentguest"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/noderoute"
	"github.com/airlockdev/airlock/internal/placement"
	"github.com/airlockdev/airlock/internal/pool"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/sandboxes"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/store/postgres"
	"github.com/airlockdev/airlock/internal/store/sqlite"
	"github.com/airlockdev/airlock/internal/store/sqlstore"
	"github.com/airlockdev/airlock/internal/template"
	"github.com/airlockdev/airlock/internal/template/gc"
	"github.com/airlockdev/airlock/internal/usage"
)

// closeGrace is how long, after the streams were told to reconnect, the
// server waits for their connections before closing them.
const closeGrace = 5 * time.Second

// Run starts `airlock server` and blocks until ctx ends or a component fails.
// Sandboxes keep running after Run returns; the next Run adopts them.
func Run(ctx context.Context, opts Options) error {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	fault := faultInjector(opts.FaultPoint, log)
	tp, stopTracing, err := openTracing(ctx, opts, log)
	if err != nil {
		return err
	}
	defer stopTracing() // last: after everything that records spans stopped
	opts.TracerProvider = tp
	egressCfg, err := parseEgressOptions(opts)
	if err != nil {
		return err
	}

	dd, err := openDataDir(opts.DataDir)
	if err != nil {
		return err
	}
	defer dd.close()
	nodeID, err := dd.nodeID()
	if err != nil {
		return err
	}
	log = log.With("node", nodeID)
	attachKeyAge := attachKeyMaxAge(opts.AttachKeyMaxAge)
	attachKeys, err := openAttachKeys(dd, attachKeyAge, log)
	if err != nil {
		return err
	}

	st, err := openStore(ctx, dd, opts.DatabaseURL, log, sqlstore.WithTracerProvider(tp))
	if err != nil {
		return err
	}
	defer st.Close()
	mtr := newMetrics(st, log)

	role, err := roleOf(opts)
	if err != nil {
		return err
	}

	// Every process publishes its attachment keys' public halves, so that
	// any replica verifies a token whichever replica signed it.
	if err := attachKeys.SetPublisher(noderoute.KeyPublisher(st, nodeID)); err != nil {
		return fmt.Errorf("publish attachment keys: %w", err)
	}
	verifier, err := noderoute.ClusterVerifier(attachKeys.Verifier(), st)
	if err != nil {
		return err
	}

	templates, err := template.Open(dd.join(templatesDir), log.With("component", "templates"))
	if err != nil {
		return fmt.Errorf("open template store: %w", err)
	}
	dist, err := newDistributor(ctx, opts, dd, templates, log)
	if err != nil {
		return err
	}
	// The cluster-wide passes run on one node at a time, the holder of
	// their duty lease (taken by the membership's duty loop).
	purgeDuty, gcDuty, metricsDuty := newDuty(purgeLease), newDuty(templateGCLease), newDuty(metricsLease)
	collector, err := gc.New(gc.Config{Store: st, Trees: templates, Tombstones: gcDuty.Held,
		Logger: log.With("component", "template-gc")})
	if err != nil {
		return err
	}
	secretsKey := opts.SecretsKeyFile
	if secretsKey == "" {
		secretsKey = dd.join(secrets.KeyFile)
	}
	sealer, err := secrets.OpenKey(secretsKey)
	if err != nil {
		return err
	}
	secretSrc := newSecretSource(st, sealer, log.With("component", "egress"))

	// What runs sandboxes: builds, runtimes, environments, egress, the
	// workers and the controller. An api replica has none of it.
	var h *host
	if role.RunsSandboxes() {
		h, err = openHost(ctx, opts, dd, st, templates, dist, nodeID, egressCfg, secretSrc, fault, mtr, log)
		if err != nil {
			return err
		}
		defer h.close()
	}
	environments, defaultEnvironment := h.environments(st, opts)

	tcpLn, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", opts.Listen, err)
	}
	if opts.MaxConnections < 0 {
		opts.MaxConnections = 0
	}
	conns, err := newConnBudget(opts, log)
	if err != nil {
		tcpLn.Close()
		return err
	}
	ln := conns.Listener(tcpLn)
	metricsLn, err := listenMetrics(opts.MetricsListen)
	if err != nil {
		ln.Close()
		return err
	}
	if metricsLn != nil {
		defer metricsLn.Close()
	}
	baseURL := "http://" + ln.Addr().String()

	// This run of the node: registered (a new incarnation, the fencing
	// token of every write for its sandboxes) before anything claims or
	// serves.
	self, hbInterval, deadAfter, err := clusterConfig(opts, ln.Addr().String())
	if err != nil {
		ln.Close()
		return err
	}
	self.ID, self.Incarnation = nodeID, model.NewIncarnation()
	placer, err := placement.New(placement.Config{Store: st, Strategy: opts.Placement, DeadAfter: deadAfter,
		Self: nodeID, HasLocal: templates.Has})
	if err != nil {
		ln.Close()
		return err
	}
	member := &membership{st: st, node: self, interval: hbInterval, deadAfter: deadAfter, placer: placer, defaultEnvironment: defaultEnvironment,
		passes: []*duty{purgeDuty, gcDuty, metricsDuty}, log: log.With("component", "membership")}
	if h != nil {
		h.describe(&member.node, opts)
		member.templates = templates.Digests
	}
	if err := member.register(ctx); err != nil {
		ln.Close()
		return err
	}
	var ctrl *controller.Controller
	var pools *pool.Controller
	var sampler *usage.Sampler
	if h != nil {
		if ctrl, err = h.controller(st, member, log); err != nil {
			ln.Close()
			return err
		}
		if sampler, err = usage.New(usage.Config{Store: st, Reader: h.workers, Node: nodeID, Logger: log.With("component", "usage")}); err != nil {
			ln.Close()
			return err
		}
		if pools, err = h.poolController(st, nodeID, opts, log); err != nil {
			ln.Close()
			return err
		}
	}
	idle, err := newTimeouts(opts, st, nodeID, h.enabledEnvironments(), log)
	if err != nil {
		ln.Close()
		return err
	}

	agents := h.agents()
	dp, err := dataplane.New(dataplane.Config{
		FileTokens: verifier, // public keys only, of every replica
		Store:      st,
		Agents:     agents,
		Logger:     log.With("component", "dataplane"),
		Verifier:   verifier, // public keys only, of every replica
		Nodes:      st,
		NodeID:     nodeID,
		Activity:   idle.tracker,
		Metrics:    mtr,
		// The server-wide cap of attachments, which bounds their memory.
		AttachTotal: opts.MaxAttachments,
	})
	if err != nil {
		ln.Close()
		return err
	}
	var capacity *model.NodeCapacity // an api replica leaves it to placement
	if h != nil {
		capacity = &h.capacity
	}
	sandboxSvc, err := sandboxes.New(sandboxes.Config{
		Store: st, Logger: log.With("component", "sandboxes"),
		Environments: environments,
		Placer:       placer,
		Self:         nodeID,
		ClaimPools:   h != nil,
		// What each sandbox's runtime can do (pause, suspend).
		LifecycleSupport: lifecycleSupport(h.runtimeInfos()...),
		Capacity:         capacity,
		DefaultDiskMiB:   opts.DefaultDiskMiB,
		Egress:           h.egressRegistry(),
		EgressDefault:    egressCfg.defaultPolicy,
		Metrics:          mtr,
	})
	if err != nil {
		ln.Close()
		return err
	}
	apiHandler, err := api.New(api.Config{
		Sandboxes: sandboxSvc,

		Volumes:        h.volumeHost(),
		VolumeQuotaMiB: opts.VolumeQuotaMiB,

		StdinIdleTimeout: opts.StdinIdleTimeout, // the connection budget's (--stdin-idle-timeout)

		Secrets:         sealer,
		SecretsChanged:  secretSrc.invalidate,
		Egress:          h.egressRegistry(),
		EgressDefault:   egressCfg.defaultPolicy,
		PoolDrainAfter:  opts.PoolDrainAfter,
		BodyReadTimeout: opts.BodyReadTimeout,
		MutationRate:    opts.MutationRate,
		MutationBurst:   opts.MutationBurst,
		PublicURL:       opts.PublicURL,
		Store:           st,
		Distribution:    distribution(dist),

		DefaultIdleTimeout: opts.DefaultIdleTimeout,
		Activity:           idle.tracker,

		TemplateDefaults: func(d model.TemplateDigest) (guestops.Defaults, error) {
			return commandDefaults(templates, d)
		},
		TemplateGC:   collector,
		Guests:       agentguest.New(agents),
		Environments: environments,
		Self:         nodeID,
		Nodes:        st,
		PeerVerifier: verifier,
		// Sandbox access tokens (E2B's envdAccessToken) of every replica.
		SandboxTokens: verifier,
		Metrics:       mtr, // GET /metrics (admin)
		Builds:        h.buildRunner(),
		FileTokens:    attachKeys.Issuer(), // file tokens are signed like attachment tokens
		Attach:        attachKeys.Issuer(),
		AttachKeys:    attachKeys,
		Logger:        log.With("component", "api"),
		// A span of every request (docs/tracing.md).
		TracerProvider: tp,
		// Ready while the store answers and the server is not draining;
		// the listener only exists once the runtime was probed and the
		// controller wired.
		Ready: func(ctx context.Context) error {
			if dp.Draining() {
				return errors.New("shutting down")
			}
			_, err := st.CountAPIKeys(ctx)
			return err
		},
	})
	if err != nil {
		ln.Close()
		return err
	}
	dataMux := http.NewServeMux()
	dp.Register(dataMux)
	mux := http.NewServeMux()
	mux.Handle("/data/", apiHandler.Wrap(dataMux))
	mux.Handle("/", apiHandler.Handler())
	if err := mountConsole(mux, apiHandler); err != nil {
		ln.Close()
		return err
	}
	// Builds run their run steps in sandboxes made through the API.
	if err := h.wireBuildSandboxes(ctx, sandboxSvc, st, apiHandler.InProcess(mux), baseURL, nodeID); err != nil {
		ln.Close()
		return err
	}
	var handler http.Handler = mux
	var e2bGW *e2b.Gateway
	if !opts.NoE2B {
		gw, watchers, err := e2bGateway(ctx, mux, apiHandler.Wrap, apiHandler.InProcess(mux), st, attachKeys, verifier, baseURL, opts.E2BDomain,
			e2bTemplateBuilds{files: dd.join(e2bTemplatesDir), templates: templates, node: nodeID, keys: apiHandler.KeyCaller}, log)
		if err != nil {
			ln.Close()
			return fmt.Errorf("e2b gateway: %w", err)
		}
		defer watchers.Close()
		handler, e2bGW = gw, gw
	}
	// The Host allow-list, before any route (DNS rebinding).
	hosts, err := allowedHosts(opts, self.AdvertiseURL)
	if err != nil {
		ln.Close()
		return err
	}
	handler = hostChecked(handler, hosts, opts)

	adminKey := opts.AdminKeyFile
	if adminKey == "" {
		adminKey = dd.join(adminKeyFile)
	}
	if _, err := api.EnsureAdminKey(ctx, st, adminKey, log); err != nil {
		ln.Close()
		return fmt.Errorf("bootstrap admin key: %w", err)
	}
	if err := atomicfile.Write(dd.join(serverURLFile), []byte(baseURL+"\n"), 0o644); err != nil {
		ln.Close()
		return fmt.Errorf("write %s: %w", serverURLFile, err)
	}

	reqCtx, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	srv := newHTTPServer(handler, conns, reqCtx)

	// What runs until the server stops, started in this order.
	comps := []component{member.component()}
	if h != nil {
		comps = append(comps, h.components(ctrl, log)...)
		comps = append(comps, loop("usage sampler", sampler.Run)) // sandboxes' CPU, memory and disk every 5 s (getMetrics)
	}
	comps = append(comps, poolComponents(pools)...)
	comps = append(comps, volumeComponents(h.volumeStorage(), st, nodeID, log.With("component", "volumes"))...)
	comps = append(comps, metricsComponents(metricsLn, mtr, hosts, log)...) // --metrics-listen, unauthenticated
	comps = append(comps, idle.components(purgeDuty)...)                    // activity flushes, deadlines, idle limits, the purge of finished rows
	if e2bGW != nil {
		comps = append(comps, loop("e2b signed URL index", e2bGW.RunSignedIndex)) // store changes make URL mode's index stale
	}
	comps = append(comps, metricsRetention(st, metricsDuty, usage.PruneInterval, log.With("component", "usage")))
	comps = append(comps,
		loop("template gc", func(ctx context.Context) { collector.Run(ctx, opts.TemplateGCInterval) }),
		loop("attachment key rotation", func(ctx context.Context) { rotateAttachKeys(ctx, attachKeys, attachKeyAge, log) }),
		component{name: "http server", run: func(context.Context) error {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("http server: %w", err)
			}
			return nil
		}},
	)
	log.Info("airlock server ready", "url", baseURL, "data_dir", dd.path, "role", role,
		"advertise_url", self.AdvertiseURL, "incarnation", self.Incarnation,
		"environments", environmentNames(h.enabledEnvironments()), "default_env", defaultEnvironment,
		"admin_key_file", adminKey)
	runErr := runComponents(ctx, comps, func(failed error) {
		if failed != nil {
			log.Error("component failed; shutting down", "err", failed)
		} else {
			log.Info("shutting down; sandboxes keep running")
		}
		drainAPI(ctx, opts.ShutdownGrace, dp, srv, cancelRequests, log)
	}, log)
	h.release(context.WithoutCancel(ctx), log)
	log.Info("airlock server stopped")
	return runErr
}

// drainAPI stops the API: it refuses new attachments (readiness fails),
// stops listening and closes idle connections, lets open streams run for
// the grace period, then ends them with a reconnect event and closes what
// is left.
func drainAPI(ctx context.Context, grace time.Duration, dp *dataplane.DataPlane, srv *http.Server, cancelRequests context.CancelFunc, log *slog.Logger) {
	if grace <= 0 {
		grace = DefaultShutdownGrace
	}
	graceCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer stop()
	dp.StartDrain()
	var drain errgroup.Group
	drain.Go(func() error {
		dp.Drain(graceCtx)
		return nil
	})
	shutCtx, stopShut := context.WithTimeout(context.WithoutCancel(ctx), grace+closeGrace)
	defer stopShut()
	if err := srv.Shutdown(shutCtx); err != nil {
		log.Warn("connections still open after the shutdown grace; closing them", "err", err)
		_ = srv.Close()
	}
	cancelRequests() // handlers of hijacked (WebSocket) connections
	_ = drain.Wait()
}

// releaseAgentFS unmounts the runtime's shared agent filesystem when no
// sandbox is left, so that a stopped server with no sandboxes leaves no
// mount behind (its data dir can be removed). With sandboxes it stays:
// they use it, and the next start reuses it.
func releaseAgentFS(ctx context.Context, rt runtime.Runtime, log *slog.Logger) {
	r, ok := rt.(agentFSReleaser)
	if !ok {
		return
	}
	if err := r.ReleaseAgentFS(ctx); err != nil {
		log.Debug("the shared agent filesystem stays mounted", "reason", err)
	}
}

func openStore(ctx context.Context, dd *dataDir, url string, log *slog.Logger, opts ...sqlstore.Option) (store.Store, error) {
	if url == "" {
		st, err := sqlite.Open(ctx, dd.join(sqliteFile), log.With("component", "store"), opts...)
		if err != nil {
			return nil, fmt.Errorf("open SQLite store: %w", err)
		}
		return st, nil
	}
	st, err := postgres.Open(ctx, url, log.With("component", "store"), opts...)
	if err != nil {
		return nil, fmt.Errorf("open PostgreSQL store: %w", err)
	}
	return st, nil
}

// findAgentBinary locates the static guest agent.
func findAgentBinary(explicit string) (string, error) {
	if explicit != "" {
		p, err := filepath.Abs(explicit)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("--agent-binary: %w", err)
		}
		return p, nil
	}
	p, err := binpath.Find("airlock-agent")
	if err != nil {
		return "", fmt.Errorf("%w: build it with `CGO_ENABLED=0 go build -o bin/ ./cmd/...` or pass --agent-binary", err)
	}
	return p, nil
}

// faultInjector returns the hook the worker calls at named points. When the
// configured point is reached the process kills itself with SIGKILL, exactly
// as an operator's kill -9 or an OOM kill would.
func faultInjector(point string, log *slog.Logger) func(string) {
	if point == "" {
		point = os.Getenv("AIRLOCK_TEST_CRASH_AT")
	}
	if point == "" {
		return func(string) {}
	}
	log.Warn("fault injection armed", "point", point)
	return func(p string) {
		if p == point {
			log.Warn("fault injection: killing the server", "point", p)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // never continue past the point
		}
	}
}
