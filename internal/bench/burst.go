package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime/oci"
	"github.com/airlockdev/airlock/internal/server"
)

// BurstOptions configures RunBurst. Zero fields take the defaults of
// `airlock bench burst`.
type BurstOptions struct {
	Runtime   string // OCI runtime of the server (default runc)
	Size      int    // pool size and number of creates in the burst (default 200)
	Clients   int    // concurrent clients of the burst (default 20)
	MemoryMiB int    // memory limit of every sandbox (default 32)
	// FillParallel is the server's --pool-fill-parallel (0: its default).
	FillParallel int
	// Steps are the client counts of the sustained cold-create steps
	// (default 1, 2, 4, 8, 16, 32); they stop after the first step whose
	// p95 exceeds Degrade × the first step's p95 (default 2).
	Steps   []int
	Degrade float64
	// StepCreates is the number of creates of a sustained step: at least
	// this many (default 40), and at least 3 per client.
	StepCreates int
	// NoSustained skips the sustained steps.
	NoSustained bool
	// AgentBinary is the static airlock-agent the server uses (required).
	AgentBinary  string
	TempDir      string
	Progress     io.Writer
	ServerLogger *slog.Logger
	Logger       *slog.Logger
	Version      string
}

// Defaults of RunBurst.
const (
	defaultBurstSize       = 200
	defaultBurstClients    = 20
	defaultBurstMemoryMiB  = 32
	defaultBurstDegrade    = 2.0
	defaultBurstStepCreate = 40
	minStepCreatesPerCli   = 3
	// burstTarget is the target for a burst from a full pool on
	// runc; cubeSandboxRate is CubeSandbox's published 180.9/s at 20
	// concurrent (docs/benchmarks.md, anchors §1).
	burstTarget     = 200.0
	cubeSandboxRate = 180.9
)

func defaultBurstSteps() []int { return []int{1, 2, 4, 8, 16, 32} }

func (o *BurstOptions) defaults() error {
	if o.Runtime == "" {
		o.Runtime = string(oci.FlavorRunc)
	}
	if _, err := oci.ParseFlavor(o.Runtime); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if o.Size == 0 {
		o.Size = defaultBurstSize
	}
	if o.Clients == 0 {
		o.Clients = defaultBurstClients
	}
	if o.MemoryMiB == 0 {
		o.MemoryMiB = defaultBurstMemoryMiB
	}
	if len(o.Steps) == 0 {
		o.Steps = defaultBurstSteps()
	}
	if o.Degrade == 0 {
		o.Degrade = defaultBurstDegrade
	}
	if o.StepCreates == 0 {
		o.StepCreates = defaultBurstStepCreate
	}
	switch {
	case o.Size < 1 || o.Clients < 1 || o.MemoryMiB < 1 || o.StepCreates < 1 || o.FillParallel < 0:
		return errors.New("bench: size, clients, memory and step creates must be at least 1, fill parallelism not negative")
	case o.Degrade <= 1:
		return fmt.Errorf("bench: the degradation factor must be above 1, not %g", o.Degrade)
	case slices.ContainsFunc(o.Steps, func(n int) bool { return n < 1 }):
		return errors.New("bench: every sustained step needs at least 1 client")
	}
	return nil
}

// BurstReport is the result of RunBurst.
type BurstReport struct {
	Benchmark string    `json:"benchmark"`
	StartedAt time.Time `json:"started_at"`
	Runtime   string    `json:"runtime"`
	Template  string    `json:"template"`
	MemoryMiB int       `json:"memory_mib"`
	// FillParallel is the server's pool fill parallelism (0: its default).
	FillParallel int `json:"fill_parallel"`
	// Fill is the pool's first fill: from PUT /v1/pools to Size ready.
	Fill Rate `json:"fill"`
	// Burst is Size creates from Clients concurrent clients on the full pool.
	Burst BurstResult `json:"burst"`
	// Refill is from the burst's end until the pool was full again.
	Refill Rate `json:"refill"`
	// Sustained are the cold-create steps (no pool), in order.
	Sustained []SustainedStep `json:"sustained,omitempty"`
	// SustainedBest is the highest creates/s of a step not degraded.
	SustainedBest float64   `json:"sustained_best_per_s"`
	Degrade       float64   `json:"degrade_factor"`
	Targets       []Target  `json:"targets,omitempty"`
	Host          HostFacts `json:"host"`
}

// Rate is a number of sandboxes made ready over a duration.
type Rate struct {
	Sandboxes int           `json:"sandboxes"`
	Duration  time.Duration `json:"-"`
	Seconds   float64       `json:"seconds"`
	PerSecond float64       `json:"per_s"`
}

func rateOf(n int, d time.Duration) Rate {
	r := Rate{Sandboxes: n, Duration: d, Seconds: d.Seconds()}
	if d > 0 {
		r.PerSecond = float64(n) / d.Seconds()
	}
	return r
}

// BurstResult is the burst from the full pool.
type BurstResult struct {
	Creates int `json:"creates"`
	Clients int `json:"clients"`
	// Hits and Misses: creates that reported source "pool", and the others
	// (cold fallbacks when the pool ran empty).
	Hits   int `json:"hits"`
	Misses int `json:"misses"`
	// Rate: Creates over the time from the first request to the last
	// sandbox running.
	Rate Rate `json:"rate"`
	// Latency: each create's request → running (the response for a
	// claim, the operation's success for a cold create).
	Latency Stats `json:"latency"`
	// HitLatency: the pool hits alone.
	HitLatency Stats `json:"hit_latency"`
	// ReadyAtEnd is the pool's ready count when the burst ended.
	ReadyAtEnd int `json:"ready_at_end"`
}

// SustainedStep is one step of cold creates from N concurrent clients.
type SustainedStep struct {
	Clients  int   `json:"clients"`
	Creates  int   `json:"creates"`
	Rate     Rate  `json:"rate"`
	Latency  Stats `json:"latency"`
	Degraded bool  `json:"degraded"` // p95 > Degrade × the first step's p95
}

// createResult is one timed create of a burst or step.
type createResult struct {
	id      model.SandboxID
	source  string
	latency time.Duration
	end     time.Time
}

// RunBurst runs `airlock bench burst`: an in-process server on one runtime
// fills a warm pool of Size sandboxes; Size creates from Clients concurrent
// clients are fired at it and timed until each sandbox runs; the refill is
// timed until the pool is full again; then, with the pool deleted,
// sustained cold creates from 1, 2, 4, … concurrent clients until the p95
// degrades. Everything it created is deleted when it returns.
func RunBurst(ctx context.Context, opts BurstOptions) (BurstReport, error) {
	if err := opts.defaults(); err != nil {
		return BurstReport{}, err
	}
	cfg := Config{
		Runs: 1, Runtimes: []string{opts.Runtime}, AgentBinary: opts.AgentBinary, TempDir: opts.TempDir,
		Progress: opts.Progress, ServerLogger: opts.ServerLogger, Logger: opts.Logger, Version: opts.Version,
	}
	return runWith(ctx, cfg, func(b *benchmark, ctx context.Context) (BurstReport, error) {
		return b.burst(ctx, opts)
	})
}

func (b *benchmark) burst(ctx context.Context, o BurstOptions) (BurstReport, error) {
	rep := BurstReport{
		Benchmark: "airlock bench burst: creates per second from a full warm pool, its refill, and sustained cold creates",
		StartedAt: time.Now().UTC(), Runtime: o.Runtime, MemoryMiB: o.MemoryMiB, FillParallel: o.FillParallel, Degrade: o.Degrade,
	}
	maxSteps := slices.Max(o.Steps)
	b.prepareServer = func(_ string, opts *server.Options) error {
		// Room for the pool's unclaimed sandboxes and, during the
		// refill, the burst's claimed ones beside them.
		poolServerOptions(opts, o.Size*o.MemoryMiB+o.MemoryMiB, o.Size+1)
		opts.PoolFillParallel = o.FillParallel
		opts.MaxSandboxes = max(opts.MaxSandboxes, 2*o.Size+max(o.StepCreates, minStepCreatesPerCli*maxSteps)+64)
		pidsServerOptions(opts, o.Runtime, o.MemoryMiB, opts.MaxSandboxes, o.Size+1)
		return nil
	}
	a, err := b.startServers(ctx)
	if err != nil {
		return rep, err
	}
	digest, err := a.defaultTemplate(ctx)
	if err != nil {
		return rep, fmt.Errorf("bench: %w", err)
	}
	rep.Template = digest.String()
	rep.Host = hostFacts(ctx, b.cg, b.binaries, b.cfg.Version)

	req := apiv1.CreateSandboxRequest{
		Template: model.DefaultTemplate.String(), Environment: o.Runtime, CPUs: 1, MemoryMiB: o.MemoryMiB,
	}
	clients, err := a.clients(o.Clients)
	if err != nil {
		return rep, fmt.Errorf("bench: %w", err)
	}

	// The first fill.
	b.progressf("filling a warm pool of %d on %s…", o.Size, o.Runtime)
	t0 := time.Now()
	pool, err := a.c.PutPool(ctx, apiv1.PutPoolRequest{Template: req.Template, Size: o.Size, Environment: req.Environment, CPUs: req.CPUs, MemoryMiB: req.MemoryMiB})
	if err != nil {
		return rep, fmt.Errorf("bench: put the warm pool: %w", err)
	}
	if _, err := waitPoolReady(ctx, a.c, pool.ID, o.Size, fillTimeout(o.Size)); err != nil {
		return rep, fmt.Errorf("bench: %w", err)
	}
	rep.Fill = rateOf(o.Size, time.Since(t0))
	b.progressf("pool full: %d in %s (%.1f/s)", o.Size, formatDuration(rep.Fill.Duration), rep.Fill.PerSecond)

	// The burst.
	b.progressf("burst: %d creates from %d clients…", o.Size, o.Clients)
	results, wall, err := createMany(ctx, clients, req, o.Size)
	burstIDs := idsOf(results)
	if err != nil {
		return rep, errors.Join(fmt.Errorf("bench: burst: %w", err), a.deleteMany(ctx, clients, burstIDs))
	}
	end := time.Now()
	after, err := findPool(ctx, a.c, pool.ID)
	if err != nil {
		return rep, errors.Join(fmt.Errorf("bench: %w", err), a.deleteMany(ctx, clients, burstIDs))
	}
	rep.Burst = summarizeBurst(results, wall, o.Clients, after.Ready)
	b.progressf("burst: %d creates (%d from the pool) in %s: %.1f/s", rep.Burst.Creates, rep.Burst.Hits,
		formatDuration(wall), rep.Burst.Rate.PerSecond)

	// The refill, with the burst's sandboxes still running.
	if _, err := waitPoolReady(ctx, a.c, pool.ID, o.Size, fillTimeout(o.Size)); err != nil {
		return rep, errors.Join(fmt.Errorf("bench: refill: %w", err), a.deleteMany(ctx, clients, burstIDs))
	}
	rep.Refill = rateOf(o.Size-after.Ready, time.Since(end))
	b.progressf("refill: %d in %s (%.1f/s)", rep.Refill.Sandboxes, formatDuration(rep.Refill.Duration), rep.Refill.PerSecond)

	b.progressf("deleting the burst's sandboxes and the pool…")
	if err := a.deleteMany(ctx, clients, burstIDs); err != nil {
		return rep, fmt.Errorf("bench: %w", err)
	}
	if _, err := a.c.DeletePool(ctx, pool.ID); err != nil {
		return rep, fmt.Errorf("bench: delete the warm pool: %w", err)
	}
	if err := a.waitNoContainers(ctx, fillTimeout(o.Size)); err != nil {
		return rep, fmt.Errorf("bench: %w", err)
	}

	if !o.NoSustained {
		if err := b.sustained(ctx, a, clients, o, &rep); err != nil {
			return rep, err
		}
	}
	rep.Targets = burstTargets(rep)
	return rep, nil
}

// sustained runs the cold-create steps until one degrades.
func (b *benchmark) sustained(ctx context.Context, a *airlockSubject, clients []*client.Client, o BurstOptions, rep *BurstReport) error {
	// A create the deleted pool would not have matched anyway: the
	// server's defaults.
	req := apiv1.CreateSandboxRequest{Environment: o.Runtime, MemoryMiB: o.MemoryMiB}
	for _, n := range o.Steps {
		cs, err := a.clients(n)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		count := max(o.StepCreates, minStepCreatesPerCli*n)
		b.progressf("sustained: %d cold creates from %d clients…", count, n)
		results, wall, err := createMany(ctx, cs, req, count)
		ids := idsOf(results)
		if err == nil {
			for _, r := range results {
				if r.source == apiv1.SourcePool {
					err = fmt.Errorf("sandbox %s came from a pool in a cold step", r.id)
					break
				}
			}
		}
		if derr := a.deleteMany(ctx, clients, ids); derr != nil || err != nil {
			return errors.Join(fmt.Errorf("bench: sustained step of %d clients: %w", n, err), derr)
		}
		if err := a.waitNoContainers(ctx, poolFillTimeout); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		st := SustainedStep{Clients: n, Creates: count, Rate: rateOf(count, wall), Latency: Summarize(latencies(results))}
		if len(rep.Sustained) > 0 {
			st.Degraded = float64(st.Latency.P95) > o.Degrade*float64(rep.Sustained[0].Latency.P95)
		}
		rep.Sustained = append(rep.Sustained, st)
		b.progressf("sustained: %d clients: %.1f/s, p50 %s, p95 %s%s", n, st.Rate.PerSecond,
			formatDuration(st.Latency.P50), formatDuration(st.Latency.P95), map[bool]string{true: " (degraded)"}[st.Degraded])
		if !st.Degraded {
			rep.SustainedBest = max(rep.SustainedBest, st.Rate.PerSecond)
		} else {
			break
		}
	}
	return nil
}

// fillTimeout bounds the wait for n pool sandboxes to be made (or
// deleted): 5 minutes, or 2 s per sandbox if that is longer (200 took
// 95–160 s on a loaded 2-CPU host).
func fillTimeout(n int) time.Duration {
	return max(poolFillTimeout, time.Duration(n)*2*time.Second)
}

// createMany makes count sandboxes of req from the clients at once (each
// client one create at a time) and returns each create's result and the
// time from the first request to the last sandbox running. On error the
// results hold every sandbox made so far (to be deleted).
func createMany(ctx context.Context, clients []*client.Client, req apiv1.CreateSandboxRequest, count int) ([]createResult, time.Duration, error) {
	jobs := make(chan struct{}, count)
	for range count {
		jobs <- struct{}{}
	}
	close(jobs)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu      sync.Mutex
		results []createResult
		wg      sync.WaitGroup
	)
	start := time.Now()
	for _, c := range clients {
		wg.Go(func() {
			for range jobs {
				if ctx.Err() != nil {
					return
				}
				r, err := createRunning(ctx, c, req)
				mu.Lock()
				if r.id != "" {
					results = append(results, r)
				}
				mu.Unlock()
				if err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return results, 0, err
	}
	var last time.Time
	for _, r := range results {
		if r.end.After(last) {
			last = r.end
		}
	}
	return results, last.Sub(start), nil
}

// createRunning makes one sandbox and returns when it runs: at once for a
// response whose operation already succeeded (a pool claim), else when the
// operation succeeds. The result carries the ID whenever one was returned.
func createRunning(ctx context.Context, c *client.Client, req apiv1.CreateSandboxRequest) (createResult, error) {
	ctx, cancel := context.WithTimeout(ctx, airlockRunTimeout)
	defer cancel()
	t0 := time.Now()
	created, err := c.CreateSandbox(ctx, req)
	if err != nil {
		return createResult{}, err
	}
	id, err := model.ParseSandboxID(created.Sandbox.ID)
	if err != nil {
		return createResult{}, fmt.Errorf("the server returned a bad sandbox ID: %w", err)
	}
	r := createResult{id: id}
	op := created.Operation
	if op.State != string(model.OpSucceeded) {
		opID, err := model.ParseOperationID(op.ID)
		if err != nil {
			return r, fmt.Errorf("the server returned a bad operation ID: %w", err)
		}
		if op, err = c.WaitOperation(ctx, opID); err != nil {
			return r, fmt.Errorf("create %s: %w", id, err)
		}
	}
	r.end = time.Now()
	r.latency = r.end.Sub(t0)
	r.source = createSource(created.Sandbox, op)
	if op.State != string(model.OpSucceeded) {
		return r, fmt.Errorf("create %s: operation %s", id, op.State)
	}
	return r, nil
}

// summarizeBurst reduces the burst's results.
func summarizeBurst(results []createResult, wall time.Duration, clients, readyAtEnd int) BurstResult {
	br := BurstResult{Creates: len(results), Clients: clients, Rate: rateOf(len(results), wall), ReadyAtEnd: readyAtEnd}
	var hits []time.Duration
	for _, r := range results {
		if r.source == apiv1.SourcePool {
			br.Hits++
			hits = append(hits, r.latency)
		} else {
			br.Misses++
		}
	}
	br.Latency = Summarize(latencies(results))
	br.HitLatency = Summarize(hits)
	return br
}

func latencies(results []createResult) []time.Duration {
	out := make([]time.Duration, len(results))
	for i, r := range results {
		out[i] = r.latency
	}
	return out
}

func idsOf(results []createResult) []model.SandboxID {
	out := make([]model.SandboxID, len(results))
	for i, r := range results {
		out[i] = r.id
	}
	return out
}

// burstTargets are the targets for a burst run: ≥ 200 creates/s
// from a full pool on runc, every create a pool hit.
func burstTargets(rep BurstReport) []Target {
	if rep.Runtime != string(oci.FlavorRunc) || rep.Burst.Creates == 0 {
		return nil
	}
	return []Target{{
		Name: fmt.Sprintf("burst of %d creates from a full pool on runc", rep.Burst.Creates),
		Want: fmt.Sprintf("≥ %.0f/s (CubeSandbox: %.1f/s at 20 concurrent)", burstTarget, cubeSandboxRate),
		Got:  fmt.Sprintf("%.1f/s, %d of %d from the pool", rep.Burst.Rate.PerSecond, rep.Burst.Hits, rep.Burst.Creates),
		Met:  rep.Burst.Rate.PerSecond >= burstTarget && rep.Burst.Misses == 0,
	}}
}

// clients returns n API clients of the server, each with its own
// connections, as n independent callers would have.
func (a *airlockSubject) clients(n int) ([]*client.Client, error) {
	url, key, err := a.credentials()
	if err != nil {
		return nil, err
	}
	out := make([]*client.Client, n)
	for i := range out {
		if out[i], err = client.New(url, key, client.WithUserAgent("airlock-bench")); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// credentials reads the server's URL and admin key from its data dir.
func (a *airlockSubject) credentials() (url, key string, err error) {
	u, err := os.ReadFile(filepath.Join(a.dir, serverURLFile))
	if err != nil {
		return "", "", err
	}
	k, err := os.ReadFile(filepath.Join(a.dir, adminKeyFile))
	if err != nil {
		return "", "", err
	}
	return strings.TrimSpace(string(u)), strings.TrimSpace(string(k)), nil
}

// deleteMany deletes the sandboxes from the clients at once and waits until
// each is gone.
func (a *airlockSubject) deleteMany(ctx context.Context, clients []*client.Client, ids []model.SandboxID) error {
	ctx = context.WithoutCancel(ctx) // what was made is deleted, also after Ctrl-C
	jobs := make(chan model.SandboxID, len(ids))
	for _, id := range ids {
		jobs <- id
	}
	close(jobs)
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for _, c := range clients {
		w := &airlockServer{flavors: a.flavors, c: c}
		wg.Go(func() {
			for id := range jobs {
				if err := w.deleteSandbox(ctx, id); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// waitNoContainers waits until the server's runtime keeps no sandbox
// directory (DATA/runtime/<flavor>/sandboxes/sbx_…, removed at the end of
// a sandbox's teardown): the pool's and the deleted sandboxes' teardowns
// are over, so the next step does not share the host with them.
func (a *airlockSubject) waitNoContainers(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		n, err := a.runtimeSandboxes()
		if err == nil && n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("airlock-%s: %d sandboxes still in the runtime after %s (%v): %w", a.flavor, n, timeout, err, context.Cause(ctx))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// runtimeSandboxes counts the sandbox directories of the server's runtime.
func (a *airlockSubject) runtimeSandboxes() (int, error) {
	entries, err := os.ReadDir(filepath.Join(a.dir, "runtime", string(a.flavor), "sandboxes"))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		if _, err := model.ParseSandboxID(e.Name()); err == nil && e.IsDir() {
			n++
		}
	}
	return n, nil
}
