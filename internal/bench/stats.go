package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"
)

// Stats summarises one series of durations.
type Stats struct {
	N    int
	P50  time.Duration
	P95  time.Duration
	P99  time.Duration
	Min  time.Duration
	Max  time.Duration
	Mean time.Duration
}

// Summarize computes the statistics of samples (which it does not modify).
// Percentiles interpolate linearly between the two nearest ranks (the
// "type 7" estimator of R and NumPy's default): p of n sorted values sits at
// rank p·(n−1). An empty series gives the zero Stats.
func Summarize(samples []time.Duration) Stats {
	if len(samples) == 0 {
		return Stats{}
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	var sum float64
	for _, d := range sorted {
		sum += float64(d)
	}
	return Stats{
		N:    len(sorted),
		P50:  Percentile(sorted, 0.50),
		P95:  Percentile(sorted, 0.95),
		P99:  Percentile(sorted, 0.99),
		Min:  sorted[0],
		Max:  sorted[len(sorted)-1],
		Mean: time.Duration(math.Round(sum / float64(len(sorted)))),
	}
}

// Percentile returns the p-quantile (0 ≤ p ≤ 1) of sorted, which must be in
// ascending order, interpolating linearly between the nearest ranks. It
// returns 0 for an empty slice.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	p = min(max(p, 0), 1)
	rank := p * float64(n-1)
	lo := int(math.Floor(rank))
	hi := int(math.Ceil(rank))
	if lo == hi {
		return sorted[lo]
	}
	frac := rank - float64(lo)
	return sorted[lo] + time.Duration(math.Round(frac*float64(sorted[hi]-sorted[lo])))
}

// RatioOf returns a/b, or 0 when b is not positive (no peer measured).
func RatioOf(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// millis converts d to milliseconds with microsecond precision, for JSON.
func millis(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}

func fromMillis(ms float64) time.Duration {
	return time.Duration(math.Round(ms * float64(time.Millisecond)))
}

// statsJSON is the wire form of Stats: durations in milliseconds.
type statsJSON struct {
	N      int     `json:"n"`
	P50ms  float64 `json:"p50_ms"`
	P95ms  float64 `json:"p95_ms"`
	P99ms  float64 `json:"p99_ms"`
	MinMs  float64 `json:"min_ms"`
	MaxMs  float64 `json:"max_ms"`
	MeanMs float64 `json:"mean_ms"`
}

// MarshalJSON writes the durations as milliseconds (p50_ms, …).
func (s Stats) MarshalJSON() ([]byte, error) {
	return json.Marshal(statsJSON{N: s.N, P50ms: millis(s.P50), P95ms: millis(s.P95), P99ms: millis(s.P99),
		MinMs: millis(s.Min), MaxMs: millis(s.Max), MeanMs: millis(s.Mean)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *Stats) UnmarshalJSON(b []byte) error {
	var w statsJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("bench stats: %w", err)
	}
	*s = Stats{N: w.N, P50: fromMillis(w.P50ms), P95: fromMillis(w.P95ms), P99: fromMillis(w.P99ms),
		Min: fromMillis(w.MinMs), Max: fromMillis(w.MaxMs), Mean: fromMillis(w.MeanMs)}
	return nil
}

// formatDuration renders d for the table: milliseconds with one decimal
// below 10 s, seconds above.
func formatDuration(d time.Duration) string {
	if d >= 10*time.Second {
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}
