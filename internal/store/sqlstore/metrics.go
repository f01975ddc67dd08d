package sqlstore

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// maxMetricsBatch bounds the samples of one AddSandboxMetrics call (a
// node's sandboxes at one sampling).
const maxMetricsBatch = 10000

// AddSandboxMetrics implements store.Store.
func (s *Store) AddSandboxMetrics(ctx context.Context, samples []model.SandboxMetric) error {
	if len(samples) > maxMetricsBatch {
		return fmt.Errorf("add sandbox metrics: %w: %d samples, at most %d", model.ErrInvalid, len(samples), maxMetricsBatch)
	}
	for _, m := range samples {
		if err := m.Validate(); err != nil {
			return fmt.Errorf("add sandbox metrics: %w", err)
		}
	}
	err := s.write(ctx, false, func(t tx) error {
		for _, m := range samples {
			// The casts type the parameters for PostgreSQL, which
			// would take an untyped SELECT parameter for text.
			if _, err := t.exec(ctx, `INSERT INTO sandbox_metrics
				(sandbox_id, at, cpu_count, cpu_used_pct, mem_used, mem_cache, mem_total, disk_used, disk_total)
				SELECT s.id, CAST(? AS BIGINT), CAST(? AS INTEGER), CAST(? AS INTEGER), CAST(? AS BIGINT), CAST(? AS BIGINT),
					CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS BIGINT)
				FROM sandboxes s WHERE s.id = ? AND s.state <> ?
				ON CONFLICT DO NOTHING`,
				micro(m.At), m.CPUCount, int64(math.Round(m.CPUUsedPct*100)), m.MemUsed, m.MemCache, m.MemTotal,
				m.DiskUsed, m.DiskTotal, string(m.SandboxID), string(model.StateDeleted)); err != nil {
				return fmt.Errorf("insert sample of %s: %w", m.SandboxID, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("add sandbox metrics: %w", err)
	}
	return nil
}

// DeleteSandboxMetricsBefore implements store.Store.
func (s *Store) DeleteSandboxMetricsBefore(ctx context.Context, before time.Time) (int, error) {
	res, err := s.exec(ctx, `DELETE FROM sandbox_metrics WHERE at < ?`, micro(before))
	if err != nil {
		return 0, fmt.Errorf("remove samples before %s: %w", before.UTC().Format(time.RFC3339), err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("remove samples before %s: %w", before.UTC().Format(time.RFC3339), err)
	}
	return int(n), nil
}

// ListSandboxMetrics implements store.Store.
func (s *Store) ListSandboxMetrics(ctx context.Context, q store.MetricsQuery) ([]model.SandboxMetric, error) {
	if q.Limit < 1 || q.Limit > store.MaxMetricsLimit {
		return nil, fmt.Errorf("list metrics of %s: %w: limit %d must be between 1 and %d", q.SandboxID, model.ErrInvalid, q.Limit, store.MaxMetricsLimit)
	}
	var exists int
	if err := s.queryRow(ctx, `SELECT 1 FROM sandboxes WHERE id = ? AND project_id = ?`,
		string(q.SandboxID), string(q.ProjectID)).Scan(&exists); err != nil {
		return nil, fmt.Errorf("list metrics of %s: %w", q.SandboxID, errNotFound(err))
	}
	start, end := int64(math.MinInt64), int64(math.MaxInt64)
	if !q.Start.IsZero() {
		start = micro(q.Start)
	}
	if !q.End.IsZero() {
		end = micro(q.End)
	}
	rows, err := s.query(ctx, `SELECT at, cpu_count, cpu_used_pct, mem_used, mem_cache, mem_total, disk_used, disk_total
		FROM sandbox_metrics WHERE sandbox_id = ? AND at >= ? AND at <= ? ORDER BY at LIMIT ?`,
		string(q.SandboxID), start, end, q.Limit)
	if err != nil {
		return nil, fmt.Errorf("list metrics of %s: %w", q.SandboxID, err)
	}
	defer rows.Close()
	var out []model.SandboxMetric
	for rows.Next() {
		m := model.SandboxMetric{SandboxID: q.SandboxID}
		var at, pct int64
		if err := rows.Scan(&at, &m.CPUCount, &pct, &m.MemUsed, &m.MemCache, &m.MemTotal, &m.DiskUsed, &m.DiskTotal); err != nil {
			return nil, fmt.Errorf("list metrics of %s: %w", q.SandboxID, err)
		}
		m.At, m.CPUUsedPct = fromMicro(at), float64(pct)/100
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list metrics of %s: %w", q.SandboxID, err)
	}
	return out, nil
}
