package store

import (
	"context"
	"time"

	"github.com/airlockdev/airlock/internal/model"
)

// MaxMetricsLimit bounds the samples one ListSandboxMetrics call returns.
const MaxMetricsLimit = 20000

// MetricsQuery selects a sandbox's samples.
type MetricsQuery struct {
	ProjectID model.ProjectID
	SandboxID model.SandboxID
	// Start and End bound the samples' times, both included; zero: no
	// bound.
	Start, End time.Time
	Limit      int // 1..MaxMetricsLimit; the oldest Limit samples of the range
}

// Metrics keeps what each node samples of its sandboxes' resource use
// (internal/usage).
type Metrics interface {
	// AddSandboxMetrics stores samples. A sample of a sandbox that is
	// deleted or unknown is skipped (a sample that raced the delete), as
	// is a second sample of a sandbox at the same time. It does not wake
	// watchers.
	AddSandboxMetrics(ctx context.Context, samples []model.SandboxMetric) error
	// DeleteSandboxMetricsBefore removes every sample taken before before
	// (any sandbox's: the retention window) and returns how many.
	DeleteSandboxMetricsBefore(ctx context.Context, before time.Time) (int, error)
	// ListSandboxMetrics returns the samples of one of the project's
	// sandboxes in q's range, oldest first. Another project's sandbox is
	// ErrNotFound; a deleted one has none (they were removed with it).
	ListSandboxMetrics(ctx context.Context, q MetricsQuery) ([]model.SandboxMetric, error)
}
