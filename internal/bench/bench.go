// Package bench implements `airlock bench create`: it measures the time from
// asking for a new sandbox to the first output of `echo hello` in it, for
// Airlock on each requested OCI runtime (an in-process `airlock server`
// driven through the Go client, the full API → store → reconciler → runtime
// → guest agent → data plane path) and, in the same run and on the same root
// filesystem, for the raw runtimes (`runc run`, `crun run`, `runsc run`,
// `podman run --rootfs`), and reports percentiles and Airlock's overhead
// ratio over its raw peer.
//
// Every round runs each subject once, in a fresh random order, so that
// background noise hits all subjects alike. Everything the benchmark
// creates (servers, sandboxes, containers, mounts, cgroups, temporary
// directories) is removed when Run returns, also when ctx is cancelled.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/cgroups"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime/oci"
	"github.com/airlockdev/airlock/internal/server"
	"github.com/airlockdev/airlock/internal/template"
)

// ErrNotRoot is returned when the benchmark does not run as root.
var ErrNotRoot = errors.New("airlock bench must run as root: it starts airlock servers and runs OCI runtimes, mounts and cgroups directly (try sudo)")

// cleanupTimeout bounds the cleanup when Run ends.
const cleanupTimeout = 3 * time.Minute

// Config configures Run. Start from DefaultConfig.
type Config struct {
	Runs   int // counted runs per subject (≥ 1)
	Warmup int // uncounted runs per subject before them (≥ 0)
	// Runtimes are the OCI runtimes Airlock is measured on (runc, crun,
	// runsc); each gets its own in-process server.
	Runtimes []string
	// Peers are the raw runs to compare with (PeerRunc, PeerCrun, PeerRunsc,
	// PeerPodman). A peer whose binary is not installed is reported as
	// skipped.
	Peers []string
	// Pool adds a pool-claim subject per runtime (airlock-RUNTIME-pool):
	// the same server keeps a warm pool the subject claims from.
	Pool bool
	// AgentBinary is the static airlock-agent the servers use (required).
	AgentBinary string
	// TempDir is where the benchmark's temporary directory is created
	// (default /tmp). Keep it short: sandbox sockets live below it.
	TempDir string
	// Seed seeds the per-round order; 0 picks a random seed.
	Seed uint64
	// Progress receives a line per round and per setup step; nil for none.
	Progress io.Writer
	// ServerLogger receives the servers' logs; nil discards them.
	ServerLogger *slog.Logger
	// Logger receives the benchmark's own warnings; nil discards them.
	Logger *slog.Logger
	// Version is the airlock version shown in the host facts.
	Version string
}

// DefaultConfig returns the defaults of `airlock bench create`: 20 runs
// after 2 warm-up runs, Airlock on runc and runsc, every raw peer.
func DefaultConfig() Config {
	return Config{
		Runs:     20,
		Warmup:   2,
		Runtimes: []string{string(oci.FlavorRunc), string(oci.FlavorRunsc)},
		Peers:    peerNames(),
		Pool:     true,
		TempDir:  os.TempDir(),
	}
}

func (c *Config) check() error {
	if c.Runs < 1 {
		return fmt.Errorf("bench: runs must be at least 1, not %d", c.Runs)
	}
	if c.Warmup < 0 {
		return fmt.Errorf("bench: warmup must not be negative, not %d", c.Warmup)
	}
	if len(c.Runtimes) == 0 {
		return errors.New("bench: name at least one runtime for Airlock (runc, crun or runsc)")
	}
	for i, r := range c.Runtimes {
		if _, err := oci.ParseFlavor(r); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		if slices.Contains(c.Runtimes[:i], r) {
			return fmt.Errorf("bench: runtime %s given twice", r)
		}
	}
	for i, p := range c.Peers {
		if !slices.Contains(peerNames(), p) {
			return fmt.Errorf("bench: unknown peer %q (want %s)", p, strings.Join(peerNames(), ", "))
		}
		if slices.Contains(c.Peers[:i], p) {
			return fmt.Errorf("bench: peer %s given twice", p)
		}
	}
	if c.AgentBinary == "" {
		return errors.New("bench: the airlock-agent binary is required")
	}
	abs, err := filepath.Abs(c.AgentBinary)
	if err != nil {
		return err
	}
	if fi, err := os.Stat(abs); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("bench: agent binary %s: not a regular file (%v)", abs, err)
	}
	c.AgentBinary = abs
	if c.TempDir == "" {
		c.TempDir = os.TempDir()
	}
	discard := slog.New(slog.DiscardHandler)
	if c.ServerLogger == nil {
		c.ServerLogger = discard
	}
	if c.Logger == nil {
		c.Logger = discard
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return nil
}

// sample is one measured run.
type sample struct {
	total  time.Duration   // start → first stdout byte
	phases []time.Duration // Airlock only: the parts of total, in order
}

// subject is one way of running echo that the benchmark measures.
type subject interface {
	info() Subject
	once(ctx context.Context) (sample, error)
	close(ctx context.Context) error
}

// Run runs the benchmark and returns its report. It needs root. Cancelling
// ctx stops it; everything it created is removed before it returns, and the
// error then wraps ctx's error.
func Run(ctx context.Context, cfg Config) (rep Report, err error) {
	return runWith(ctx, cfg, (*benchmark).run)
}

// runWith checks cfg, sets up the working directory, runs body and cleans
// up whatever the benchmark created.
func runWith[R any](ctx context.Context, cfg Config, body func(*benchmark, context.Context) (R, error)) (rep R, err error) {
	var zero R
	if err := cfg.check(); err != nil {
		return zero, err
	}
	if os.Geteuid() != 0 {
		return zero, ErrNotRoot
	}
	cg, err := cgroups.Detect()
	if err != nil {
		return zero, fmt.Errorf("bench: %w", err)
	}
	tmp, err := os.MkdirTemp(cfg.TempDir, "alb-")
	if err != nil {
		return zero, fmt.Errorf("bench: temporary directory: %w", err)
	}
	// Searchable by others: the roots of runc and crun sandboxes are
	// unprivileged host users that must reach their state directories
	// below it (which the runtime keeps closed to everyone else).
	if err := os.Chmod(tmp, 0o711); err != nil {
		os.Remove(tmp)
		return zero, fmt.Errorf("bench: temporary directory: %w", err)
	}
	b := &benchmark{cfg: cfg, cg: cg, tmp: tmp}
	b.progressf("working directory %s (removed on exit)", tmp)
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if cerr := b.cleanup(cctx); cerr != nil {
			err = errors.Join(err, fmt.Errorf("bench: clean up: %w", cerr))
		}
	}()
	return body(b, ctx)
}

// benchmark is one Run in progress.
type benchmark struct {
	cfg      Config
	cg       cgroups.Host
	tmp      string
	subjects []subject
	skipped  []Skipped
	binaries map[string]string // runtime name → binary, for the host facts
	// prepareServer, if set, runs before each airlock server starts, on
	// its (not yet created) data dir and options.
	prepareServer func(dir string, opts *server.Options) error
}

func (b *benchmark) progressf(format string, args ...any) {
	fmt.Fprintf(b.cfg.Progress, format+"\n", args...)
}

func (b *benchmark) run(ctx context.Context) (Report, error) {
	started := time.Now().UTC()
	first, err := b.startServers(ctx)
	if err != nil {
		return Report{}, err
	}
	digest, lower, err := b.templateTree(ctx, first)
	if err != nil {
		return Report{}, err
	}
	b.progressf("template %s: %s", digest, lower)
	if b.cfg.Pool {
		if err := b.addPoolSubjects(ctx); err != nil {
			return Report{}, err
		}
	}

	cgParent, err := cgroups.ParsePath("/" + filepath.Base(b.tmp))
	if err != nil {
		return Report{}, fmt.Errorf("bench: cgroup parent: %w", err)
	}
	for _, p := range b.cfg.Peers {
		bin, err := exec.LookPath(p)
		if err != nil {
			b.skipped = append(b.skipped, Skipped{Name: p, Reason: "not installed"})
			continue
		}
		b.binaries[p] = bin
		ps, err := newPeer(p, bin, filepath.Join(b.tmp, "r-"+p), lower, b.cg, cgParent, b.cfg.Logger)
		if err != nil {
			return Report{}, fmt.Errorf("bench: %w", err)
		}
		b.subjects = append(b.subjects, ps)
	}

	seed := b.seed()
	samples, err := b.rounds(ctx, seed)
	if err != nil {
		return Report{}, err
	}
	rep := Report{
		Benchmark: "airlock bench create: time from the start to the first stdout byte of `echo hello` in a new sandbox/container",
		StartedAt: started,
		Runs:      b.cfg.Runs,
		Warmup:    b.cfg.Warmup,
		Seed:      seed,
		Order:     fmt.Sprintf("each round runs every subject once, in a new random order (seed %d)", seed),
		Template:  digest.String(),
		Host:      hostFacts(ctx, b.cg, b.binaries, b.cfg.Version),
		Skipped:   b.skipped,
	}
	for i, s := range b.subjects {
		rep.Subjects = append(rep.Subjects, summarizeSubject(s.info(), samples[i], airlockPhases))
	}
	rep.Ratios = ratios(rep.Subjects)
	for _, s := range rep.Subjects {
		if t, ok := poolTarget(s); ok && s.Source == apiv1.SourcePool {
			rep.Targets = append(rep.Targets, t)
		}
	}
	return rep, nil
}

// addPoolSubjects puts a warm pool of one on every server and adds its
// pool-claim subject right after the server's cold one.
func (b *benchmark) addPoolSubjects(ctx context.Context) error {
	var out []subject
	for _, s := range b.subjects {
		out = append(out, s)
		a, ok := s.(*airlockSubject)
		if !ok {
			continue
		}
		b.progressf("filling a warm pool of 1 on %s…", a.flavor)
		p, err := newPoolSubject(ctx, a, poolCreateRequest(a), 1)
		if p != nil {
			out = append(out, p)
		}
		if err != nil {
			b.subjects = out
			return fmt.Errorf("bench: %w", err)
		}
	}
	b.subjects = out
	return nil
}

// seed is the configured seed of the round order, or a random one.
func (b *benchmark) seed() uint64 {
	if b.cfg.Seed != 0 {
		return b.cfg.Seed
	}
	return rand.Uint64()
}

// startServers starts one airlock server with an execution environment
// per runtime (a server owns its network namespace's sandbox networks, so
// there is one), adds a subject per runtime and returns the first.
func (b *benchmark) startServers(ctx context.Context) (*airlockSubject, error) {
	b.binaries = map[string]string{}
	var flavors []oci.Flavor
	for _, r := range b.cfg.Runtimes {
		flavor, _ := oci.ParseFlavor(r)
		bin, err := exec.LookPath(r)
		if err != nil {
			return nil, fmt.Errorf("bench: Airlock on %s: %s is not installed: %w", r, r, err)
		}
		b.binaries[r] = bin
		flavors = append(flavors, flavor)
	}
	names := strings.Join(b.cfg.Runtimes, "+")
	b.progressf("starting an airlock server on %s…", names)
	prepare := func(dir string, opts *server.Options) error {
		poolServerOptions(opts, 0, 0)
		if b.prepareServer != nil {
			return b.prepareServer(dir, opts)
		}
		return nil
	}
	subs, err := startAirlockServer(ctx, flavors, filepath.Join(b.tmp, "s-"+names), b.cfg.AgentBinary, b.cfg.ServerLogger, b.cfg.Logger, prepare)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	for _, a := range subs {
		b.subjects = append(b.subjects, a)
	}
	return subs[0], nil
}

// templateTree finds the default template in the first server's template
// store: the tree every raw peer gets as its root filesystem.
func (b *benchmark) templateTree(ctx context.Context, a *airlockSubject) (model.TemplateDigest, string, error) {
	digest, err := a.defaultTemplate(ctx)
	if err != nil {
		return "", "", fmt.Errorf("bench: airlock-%s: %w", a.flavor, err)
	}
	// Every server built its own copy; content addressing makes them the
	// same tree, which this checks.
	for _, s := range b.subjects {
		other, ok := s.(*airlockSubject)
		if !ok || other == a {
			continue
		}
		d, err := other.defaultTemplate(ctx)
		if err != nil {
			return "", "", fmt.Errorf("bench: airlock-%s: %w", other.flavor, err)
		}
		if d != digest {
			return "", "", fmt.Errorf("bench: the servers' default templates differ (%s on %s, %s on %s)", digest, a.flavor, d, other.flavor)
		}
	}
	// The server keeps its template store in DATA/templates.
	store, err := template.Open(filepath.Join(a.dir, "templates"), b.cfg.Logger)
	if err != nil {
		return "", "", fmt.Errorf("bench: %w", err)
	}
	if !store.Has(digest) {
		return "", "", fmt.Errorf("bench: template %s is not in %s", digest, store.Dir())
	}
	return digest, store.RootfsDir(digest), nil
}

// rounds runs warm-up and counted rounds and returns the counted samples
// per subject.
func (b *benchmark) rounds(ctx context.Context, seed uint64) ([][]sample, error) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	samples := make([][]sample, len(b.subjects))
	total := b.cfg.Warmup + b.cfg.Runs
	for round := 1; round <= total; round++ {
		warm := round <= b.cfg.Warmup
		var line []string
		for _, i := range rng.Perm(len(b.subjects)) {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("bench: interrupted: %w", context.Cause(ctx))
			}
			name := b.subjects[i].info().Name
			smp, err := b.subjects[i].once(ctx)
			if err != nil {
				return nil, fmt.Errorf("bench: %s, round %d: %w", name, round, err)
			}
			if !warm {
				samples[i] = append(samples[i], smp)
			}
			line = append(line, name+" "+formatDuration(smp.total))
		}
		label := fmt.Sprintf("%d/%d", round-b.cfg.Warmup, b.cfg.Runs)
		if warm {
			label = fmt.Sprintf("warm-up %d/%d", round, b.cfg.Warmup)
		}
		b.progressf("[%s] %s", label, strings.Join(line, ", "))
	}
	return samples, nil
}

// summarizeSubject fills in the statistics of one subject.
func summarizeSubject(s Subject, samples []sample, phases []phaseName) Subject {
	totals := make([]time.Duration, len(samples))
	for i, smp := range samples {
		totals[i] = smp.total
	}
	s.Samples = totals
	s.FirstOutput = Summarize(totals)
	if s.Kind == KindAirlock {
		for pi, ph := range phases {
			var d []time.Duration
			for _, smp := range samples {
				if pi < len(smp.phases) {
					d = append(d, smp.phases[pi])
				}
			}
			s.Phases = append(s.Phases, Phase{Name: ph.name, What: ph.what, Stats: Summarize(d)})
		}
	}
	return s
}

// ratios pairs every Airlock subject with the raw run of its runtime.
func ratios(subjects []Subject) []Ratio {
	var out []Ratio
	for _, a := range subjects {
		if a.Kind != KindAirlock {
			continue
		}
		for _, p := range subjects {
			if p.Kind == KindRaw && p.Runtime == a.Runtime && p.FirstOutput.N > 0 {
				out = append(out, Ratio{
					Airlock: a.Name,
					Peer:    p.Name,
					P50:     RatioOf(a.FirstOutput.P50, p.FirstOutput.P50),
					P95:     RatioOf(a.FirstOutput.P95, p.FirstOutput.P95),
				})
			}
		}
	}
	return out
}

// cleanup closes every subject, last first (pools before their servers;
// deleting sandboxes and containers, stopping servers), then unmounts whatever is still mounted below the
// temporary directory (runsc's network namespace bind mounts, leftovers)
// and removes it.
func (b *benchmark) cleanup(ctx context.Context) error {
	var errs []error
	for _, s := range slices.Backward(b.subjects) {
		if err := s.close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := unmountUnder(ctx, b.cfg.Logger, b.tmp); err != nil {
		// Never remove files across a mount point.
		return errors.Join(append(errs, fmt.Errorf("%s left in place: %w", b.tmp, err))...)
	}
	if err := os.RemoveAll(b.tmp); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
