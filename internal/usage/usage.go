// Package usage samples the resource use of a node's sandboxes (CPU,
// memory, disk) every Interval and keeps the samples in the store, where
// any API server reads them (GET /v1/sandboxes/{id}/metrics, E2B's
// getMetrics).
//
// Each sample reads the runtime (runtime.UsageReader through the node's
// workers): the sandbox's cgroup for runc, crun and runsc, with disk from
// statfs of its disk image; the VM cgroup's CPU time and the guest agent's
// memory and disk for qemu. CPU use is the CPU time between two samples
// over the wall time between them times the sandbox's CPUs, so a sandbox's
// first sample is written at its second reading (one Interval after the
// sampler first sees it running). Running and paused sandboxes are
// sampled (a paused one uses no CPU but holds its memory; a paused VM is
// not: its frozen guest cannot be asked); a suspended one has nothing to
// sample.
//
// Bound: samples older than Retention are removed every PruneInterval by
// Prune, which one node of the cluster runs (the holder of the server's
// metrics-retention duty lease), so a sandbox keeps about its last
// Retention (at 5 s, 4320 samples); the store removes a sandbox's samples
// when it becomes deleted.
package usage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

// Defaults.
const (
	// DefaultInterval is how often the sandboxes are sampled (E2B samples
	// every 5 s too).
	DefaultInterval = 5 * time.Second
	// Retention is how long samples are kept.
	Retention = 6 * time.Hour
	// PruneInterval is how often the samples older than Retention are
	// removed (Prune): a sandbox may hold up to this much beyond its
	// Retention.
	PruneInterval = time.Minute
	// DefaultReadTimeout bounds one sandbox's reading (a guest agent that
	// does not answer must not hold the others' samples).
	DefaultReadTimeout = 2 * time.Second
)

// Store is what the sampler reads and writes (store.Store is one).
type Store interface {
	ListSandboxesOnNode(ctx context.Context, node model.NodeID) ([]model.Sandbox, error)
	AddSandboxMetrics(ctx context.Context, samples []model.SandboxMetric) error
}

// PruneStore is what Prune writes (store.Store is one).
type PruneStore interface {
	DeleteSandboxMetricsBefore(ctx context.Context, before time.Time) (int, error)
}

// Prune removes every sample taken more than Retention before now (any
// sandbox's, any node's) and returns how many. One pass is one indexed
// DELETE on the store: run it every PruneInterval on one node.
func Prune(ctx context.Context, st PruneStore, now time.Time) (int, error) {
	n, err := st.DeleteSandboxMetricsBefore(ctx, now.Add(-Retention))
	if err != nil {
		return 0, fmt.Errorf("usage: remove samples older than %s: %w", Retention, err)
	}
	return n, nil
}

// Reader reads a hosted sandbox's resource use (*worker.Set).
type Reader interface {
	Usage(ctx context.Context, sb model.Sandbox) (runtime.Usage, error)
}

// Config configures a Sampler.
type Config struct {
	Store       Store
	Reader      Reader
	Node        model.NodeID
	Interval    time.Duration    // 0: DefaultInterval
	ReadTimeout time.Duration    // of one sandbox's reading; 0: DefaultReadTimeout
	Now         func() time.Time // nil: time.Now
	Logger      *slog.Logger     // nil: slog.Default()
}

// Sampler samples the node's sandboxes; see the package comment.
type Sampler struct {
	cfg  Config
	log  *slog.Logger
	prev map[model.SandboxID]reading // only Run's goroutine (or a test's Sample) touches it
	// failing holds sandboxes whose reading failed, logged once.
	failing map[model.SandboxID]bool
}

// reading is a sandbox's CPU time at a time.
type reading struct {
	at  time.Time
	cpu time.Duration
}

// New checks cfg and returns a Sampler.
func New(cfg Config) (*Sampler, error) {
	if cfg.Store == nil || cfg.Reader == nil || cfg.Node == "" {
		return nil, errors.New("usage: Config.Store, Config.Reader and Config.Node are required")
	}
	if cfg.Interval < 0 || cfg.ReadTimeout < 0 {
		return nil, errors.New("usage: Config.Interval and Config.ReadTimeout must not be negative")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = DefaultReadTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Sampler{cfg: cfg, log: cfg.Logger, prev: map[model.SandboxID]reading{}, failing: map[model.SandboxID]bool{}}, nil
}

// Run samples every Interval until ctx ends.
func (s *Sampler) Run(ctx context.Context) {
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	for {
		if _, err := s.Sample(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("sample sandbox usage", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Sample reads every running or paused sandbox of the node once and stores
// a sample of each read before; it returns how many it stored.
func (s *Sampler) Sample(ctx context.Context) (int, error) {
	list, err := s.cfg.Store.ListSandboxesOnNode(ctx, s.cfg.Node)
	if err != nil {
		return 0, err
	}
	seen := make(map[model.SandboxID]bool, len(list))
	var samples []model.SandboxMetric
	for _, sb := range list {
		if sb.State != model.StateRunning && sb.State != model.StatePaused {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, s.cfg.ReadTimeout)
		u, err := s.cfg.Reader.Usage(rctx, sb)
		cancel()
		now := s.cfg.Now()
		if err != nil {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			// Gone meanwhile, or nothing to read now (a paused VM's
			// guest, a runtime that cannot tell): no sample. Other
			// failures are logged once a sandbox.
			quiet := errors.Is(err, runtime.ErrNotFound) || errors.Is(err, runtime.ErrNotSupported)
			if !quiet && !s.failing[sb.ID] {
				s.failing[sb.ID] = true
				s.log.Warn("cannot read a sandbox's usage", "sandbox", sb.ID, "err", err)
			}
			continue
		}
		seen[sb.ID] = true
		delete(s.failing, sb.ID)
		prev, ok := s.prev[sb.ID]
		s.prev[sb.ID] = reading{at: now, cpu: u.CPU}
		if !ok || !now.After(prev.at) || u.CPU < prev.cpu {
			continue // a first reading, or a restarted sandbox: the next one has a base
		}
		samples = append(samples, metric(sb, u, now, prev))
	}
	for id := range s.prev {
		if !seen[id] {
			delete(s.prev, id)
		}
	}
	for id := range s.failing {
		if !slices.ContainsFunc(list, func(sb model.Sandbox) bool { return sb.ID == id }) {
			delete(s.failing, id) // gone: log again should it come back
		}
	}
	if len(samples) == 0 {
		return 0, nil
	}
	if err := s.cfg.Store.AddSandboxMetrics(ctx, samples); err != nil {
		return 0, fmt.Errorf("store %d samples: %w", len(samples), err)
	}
	return len(samples), nil
}

// metric makes the sample of sb read as u at now, its CPU use since prev.
func metric(sb model.Sandbox, u runtime.Usage, now time.Time, prev reading) model.SandboxMetric {
	cpus := max(sb.Resources.CPUs, 1)
	pct := 100 * float64(u.CPU-prev.cpu) / (float64(now.Sub(prev.at)) * float64(cpus))
	return model.SandboxMetric{
		SandboxID:  sb.ID,
		At:         now,
		CPUCount:   cpus,
		CPUUsedPct: min(max(pct, 0), 100),
		MemUsed:    u.MemUsed,
		MemCache:   u.MemCache,
		MemTotal:   int64(sb.Resources.MemoryMiB) << 20,
		DiskUsed:   u.DiskUsed,
		DiskTotal:  u.DiskTotal,
	}
}
