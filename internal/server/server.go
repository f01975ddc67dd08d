package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/airlockdev/airlock/internal/api"
	"github.com/airlockdev/airlock/internal/atomicfile"
	"github.com/airlockdev/airlock/internal/controller"
	"github.com/airlockdev/airlock/internal/dataplane"
	"github.com/airlockdev/airlock/internal/egress/secrets"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/procctl"
	"github.com/airlockdev/airlock/internal/runtime/oci"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/store/postgres"
	"github.com/airlockdev/airlock/internal/store/sqlite"
	"github.com/airlockdev/airlock/internal/template"
	"github.com/airlockdev/airlock/internal/templategc"
	"github.com/airlockdev/airlock/internal/worker"
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

	st, err := openStore(ctx, dd, opts.DatabaseURL, log)
	if err != nil {
		return err
	}
	defer st.Close()

	templates, err := template.Open(dd.join(templatesDir), log.With("component", "templates"))
	if err != nil {
		return fmt.Errorf("open template store: %w", err)
	}
	dist, err := newDistributor(ctx, opts, dd, templates, log)
	if err != nil {
		return err
	}
	builds, err := startBuilds(ctx, opts, dd, st, templates, dist, nodeID, log)
	if err != nil {
		return err
	}
	publishDefault(ctx, st, dist, log)
	collector, err := templategc.New(templategc.Config{Store: st, Trees: templates, Logger: log.With("component", "template-gc")})
	if err != nil {
		return err
	}

	agentBin, err := findAgentBinary(opts.AgentBinary)
	if err != nil {
		return err
	}
	if err := checkStaticAgent(agentBin); err != nil {
		return err
	}
	sandboxDir, err := resolveSandboxDir(opts.SandboxDir)
	if err != nil {
		return err
	}
	rts := runtimes{ids: oci.IDPool{Base: opts.UsernsBase, Ranges: opts.UsernsRanges}, dd: dd, sandboxDir: sandboxDir, agentBin: agentBin, log: log}
	envs, err := openEnvironments(ctx, opts.Environments, rts, log)
	if err != nil {
		return err
	}
	envReg, err := recordEnvironments(ctx, envs, st, nodeID, rts, log.With("component", "environments"))
	if err != nil {
		return err
	}

	// Every sandbox's network: the pool, the nftables table, the registry.
	// Reconciled before the controller runs: what a crash left of deleted
	// sandboxes goes, live ones are registered again.
	sealer, err := secrets.OpenKey(dd.join(secrets.KeyFile))
	if err != nil {
		return err
	}
	secretSrc := newSecretSource(st, sealer, log.With("component", "egress"))
	egressNet, egressSvc, err := openEgress(egressCfg, dd, st, secretSrc, log.With("component", "egress"))
	if err != nil {
		return err
	}
	defer egressSvc.close() // no-op once served
	defer egressNet.claim.Close()
	if err := reconcileEgress(ctx, egressNet, st, nodeID); err != nil {
		return err
	}

	wk, err := newWorkers(envs, worker.Config{
		Network: egressNet,
		TemplateDir: func(d model.TemplateDigest) (string, error) {
			if !templates.Has(d) {
				return "", fmt.Errorf("template %s is not present on this node", d)
			}
			return templates.RootfsDir(d), nil
		},
		TemplateEnv: func(d model.TemplateDigest) ([]string, error) {
			def, err := templates.Defaults(d)
			return def.Config.Env, err
		},
		FetchTemplate: fetchTemplate(templates, dist),
		AgentBinary:   agentBin,
		Fault:         fault,
	}, st, log)
	if err != nil {
		return err
	}
	defer wk.Close()

	ctrl, err := controller.New(controller.Config{
		Store:   st,
		Workers: wk,
		NodeID:  nodeID,
		Logger:  log.With("component", "controller"),
	})
	if err != nil {
		return err
	}

	idle, err := newTimeouts(opts, st, nodeID, envs, log)
	if err != nil {
		return err
	}

	tcpLn, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", opts.Listen, err)
	}
	maxConns := opts.MaxConnections
	if maxConns <= 0 {
		maxConns = DefaultMaxConnections
	}
	ln := newLimitListener(tcpLn, maxConns)
	baseURL := "http://" + ln.Addr().String()

	dp, err := dataplane.New(dataplane.Config{
		FileTokens: attachKeys.Verifier(), // public keys only
		Store:      st,
		Agents:     wk,
		Logger:     log.With("component", "dataplane"),
		Verifier:   attachKeys.Verifier(), // public keys only
		NodeID:     nodeID,
		Activity:   idle.tracker,
	})
	if err != nil {
		ln.Close()
		return err
	}
	overcommit := opts.MemoryOvercommit
	if overcommit <= 0 {
		overcommit = DefaultMemoryOvercommit
	}
	capacity, err := nodeCapacity(overcommit)
	if err != nil {
		ln.Close()
		return err
	}
	capacity.DiskMiB = opts.MaxDiskMiB
	if capacity.DiskMiB <= 0 {
		capacity.DiskMiB = DefaultMaxDiskMiB
	}
	apiHandler, err := api.New(api.Config{
		// What each sandbox's runtime can do (pause, suspend).
		LifecycleSupport: lifecycleSupport(envRuntimes(envs)...),

		Secrets:         sealer,
		SecretsChanged:  secretSrc.invalidate,
		Egress:          egressNet.Registry(),
		EgressDefault:   egressCfg.defaultPolicy,
		Capacity:        &capacity,
		DefaultDiskMiB:  opts.DefaultDiskMiB,
		BodyReadTimeout: opts.BodyReadTimeout,
		MutationRate:    opts.MutationRate,
		MutationBurst:   opts.MutationBurst,
		Store:           st,
		Distribution:    distribution(dist),

		DefaultIdleTimeout: opts.DefaultIdleTimeout,
		Activity:           idle.tracker,

		TemplateDefaults: func(d model.TemplateDigest) (procctl.Defaults, error) {
			return commandDefaults(templates, d)
		},
		TemplateGC:   collector,
		Agents:       wk,
		Environments: envReg,
		Builds:       builds,
		FileTokens:   attachKeys.Issuer(), // file tokens are signed like attachment tokens
		Attach:       attachKeys.Issuer(),
		AttachKeys:   attachKeys,
		Logger:       log.With("component", "api"),
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

	if _, err := api.EnsureAdminKey(ctx, st, dd.join(adminKeyFile), log); err != nil {
		ln.Close()
		return fmt.Errorf("bootstrap admin key: %w", err)
	}
	if err := atomicfile.Write(dd.join(serverURLFile), []byte(baseURL+"\n"), 0o644); err != nil {
		ln.Close()
		return fmt.Errorf("write %s: %w", serverURLFile, err)
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	reqCtx, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	var wg sync.WaitGroup
	errc := make(chan error, 8) // one per component that may fail
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := ctrl.Run(runCtx); err != nil {
			errc <- fmt.Errorf("controller: %w", err)
		}
	}()
	startEgressServices(runCtx, &wg, errc, egressNet, egressSvc, log.With("component", "egress"))
	idle.start(runCtx, &wg) // activity flushes, deadlines, idle limits, the purge of finished rows

	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := builds.Run(runCtx); err != nil {
			errc <- fmt.Errorf("template builds: %w", err)
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		collector.Run(runCtx, opts.TemplateGCInterval)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		rotateAttachKeys(runCtx, attachKeys, attachKeyAge, log)
	}()

	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		// Requests outlive the stop signal: a drain lets open streams run
		// on for the grace period (the data plane ends them then).
		BaseContext: func(net.Listener) context.Context { return reqCtx },
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("http server: %w", err)
		}
	}()
	log.Info("airlock server ready", "url", baseURL, "data_dir", dd.path,
		"environments", envNames(envs), "default_env", envs[0].local.Name,
		"admin_key_file", dd.join(adminKeyFile))

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down; sandboxes keep running")
	case runErr = <-errc:
		log.Error("component failed; shutting down", "err", runErr)
	}
	grace := opts.ShutdownGrace
	if grace <= 0 {
		grace = DefaultShutdownGrace
	}
	// Drain: refuse new attachments (readiness fails), stop listening and
	// close idle connections, let open streams run for the grace period,
	// then end them with a reconnect event and close what is left.
	graceCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer stop()
	dp.StartDrain()
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		dp.Drain(graceCtx)
	}()
	shutCtx, stopShut := context.WithTimeout(context.WithoutCancel(ctx), grace+closeGrace)
	defer stopShut()
	if err := srv.Shutdown(shutCtx); err != nil {
		log.Warn("connections still open after the shutdown grace; closing them", "err", err)
		_ = srv.Close()
	}
	cancelRequests() // handlers of hijacked (WebSocket) connections
	<-drained
	cancel()
	wg.Wait()
	for _, e := range envs {
		releaseAgentFS(context.WithoutCancel(ctx), e.rt, log)
	}
	egressNet.release(log)
	log.Info("airlock server stopped")
	return runErr
}

// releaseAgentFS unmounts the runtime's shared agent filesystem when no
// sandbox is left, so that a stopped server with no sandboxes leaves no
// mount behind (its data dir can be removed). With sandboxes it stays:
// they use it, and the next start reuses it.
func releaseAgentFS(ctx context.Context, rt *oci.Runtime, log *slog.Logger) {
	if err := rt.ReleaseAgentFS(ctx); err != nil {
		log.Debug("the shared agent filesystem stays mounted", "reason", err)
	}
}

func openStore(ctx context.Context, dd *dataDir, url string, log *slog.Logger) (store.Store, error) {
	if url == "" {
		st, err := sqlite.Open(ctx, dd.join(sqliteFile), log.With("component", "store"))
		if err != nil {
			return nil, fmt.Errorf("open SQLite store: %w", err)
		}
		return st, nil
	}
	st, err := postgres.Open(ctx, url, log.With("component", "store"))
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
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "airlock-agent")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("airlock-agent"); err == nil {
		return filepath.Abs(p)
	}
	return "", errors.New("airlock-agent not found next to the airlock binary or in PATH: build it with `CGO_ENABLED=0 go build -o bin/ ./cmd/...` or pass --agent-binary")
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
