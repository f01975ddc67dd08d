package reaper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/airlockdev/airlock/internal/store"
)

// Defaults of PurgeConfig.
const (
	// DefaultRetention is how long finished rows are kept (--retention).
	DefaultRetention = 7 * 24 * time.Hour
	// IdempotencyRetention is how long an Idempotency-Key is remembered.
	IdempotencyRetention = 24 * time.Hour
	// DefaultAuditRetention is how long audit entries are kept
	// (--audit-retention).
	DefaultAuditRetention = 90 * 24 * time.Hour
	DefaultPurgeInterval  = time.Hour
	DefaultPurgeBatch     = 500
	// maxBatchesPerRun bounds one run, so a huge backlog is worked off
	// over several intervals rather than in one long burst.
	maxBatchesPerRun = 100
)

// PurgeStore is what the Purger writes (store.Store is one).
type PurgeStore interface {
	PurgeFinished(ctx context.Context, p store.Purge) (store.PurgeCounts, error)
	DeleteIdempotencyBefore(ctx context.Context, before time.Time) (int, error)
	PurgeAudit(ctx context.Context, before time.Time, limit int) (int, error)
}

// PurgeConfig configures a Purger.
type PurgeConfig struct {
	Store PurgeStore
	// Retention: deleted sandboxes (with their operations, command
	// sessions, metadata and egress profile links) and finished operations
	// older than this are removed. 0: DefaultRetention.
	Retention time.Duration
	// AuditRetention: audit entries older than this are removed, oldest
	// first. 0: DefaultAuditRetention.
	AuditRetention time.Duration
	Interval       time.Duration    // between runs; 0: DefaultPurgeInterval
	Batch          int              // rows of each kind per transaction; 0: DefaultPurgeBatch
	Now            func() time.Time // nil: time.Now
	Logger         *slog.Logger     // nil: slog.Default()
}

// Purger removes finished rows after the retention period, in bounded
// batches, and expired idempotency records.
type Purger struct {
	cfg PurgeConfig
	log *slog.Logger
}

// NewPurger checks cfg and returns a Purger.
func NewPurger(cfg PurgeConfig) (*Purger, error) {
	if cfg.Store == nil {
		return nil, errors.New("purge: PurgeConfig.Store is required")
	}
	if cfg.Retention < 0 || cfg.AuditRetention < 0 || cfg.Interval < 0 || cfg.Batch < 0 {
		return nil, errors.New("purge: Retention, AuditRetention, Interval and Batch must not be negative")
	}
	if cfg.AuditRetention == 0 {
		cfg.AuditRetention = DefaultAuditRetention
	}
	if cfg.Retention == 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultPurgeInterval
	}
	if cfg.Batch == 0 {
		cfg.Batch = DefaultPurgeBatch
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Purger{cfg: cfg, log: cfg.Logger}, nil
}

// Run purges at once and then every Interval until ctx ends.
func (p *Purger) Run(ctx context.Context) {
	tick := time.NewTicker(p.cfg.Interval)
	defer tick.Stop()
	for {
		if _, err := p.Once(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("purge finished rows", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// PurgeTotals is what one run removed.
type PurgeTotals struct {
	store.PurgeCounts
	Idempotency int
	Audit       int // audit entries
}

// Once purges what is older than the retention period, batch by batch,
// until a batch comes back short (or maxBatchesPerRun).
func (p *Purger) Once(ctx context.Context) (PurgeTotals, error) {
	var tot PurgeTotals
	now := p.cfg.Now()
	before := now.Add(-p.cfg.Retention)
	for range maxBatchesPerRun {
		c, err := p.cfg.Store.PurgeFinished(ctx, store.Purge{Before: before, Limit: p.cfg.Batch})
		if err != nil {
			return tot, err
		}
		tot.Sandboxes += c.Sandboxes
		tot.Operations += c.Operations
		tot.Sessions += c.Sessions
		if c.Max() < p.cfg.Batch {
			break
		}
	}
	n, err := p.cfg.Store.DeleteIdempotencyBefore(ctx, now.Add(-IdempotencyRetention))
	if err != nil {
		return tot, fmt.Errorf("purge idempotency records: %w", err)
	}
	tot.Idempotency = n
	auditBefore := now.Add(-p.cfg.AuditRetention)
	for range maxBatchesPerRun {
		n, err := p.cfg.Store.PurgeAudit(ctx, auditBefore, p.cfg.Batch)
		if err != nil {
			return tot, fmt.Errorf("purge audit entries: %w", err)
		}
		tot.Audit += n
		if n < p.cfg.Batch {
			break
		}
	}
	if tot != (PurgeTotals{}) {
		p.log.Info("purged finished rows", "sandboxes", tot.Sandboxes, "operations", tot.Operations,
			"command_sessions", tot.Sessions, "idempotency_records", tot.Idempotency, "audit_entries", tot.Audit,
			"retention", p.cfg.Retention, "audit_retention", p.cfg.AuditRetention)
	}
	return tot, nil
}
