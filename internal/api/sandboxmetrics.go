package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// sandboxMetrics: GET /v1/sandboxes/{id}/metrics?start=&end= → 200
// SandboxMetricList: the samples the sandbox's node stored (internal/usage)
// between start and end (both included; RFC 3339 or Unix seconds; absent:
// unbounded), oldest first, at most store.MaxMetricsLimit. Read from the
// store: any API server answers, also after a restart of the node.
func (a *API) sandboxMetrics(w http.ResponseWriter, r *http.Request, p principal) {
	start, end, err := parseMetricsRange(r.URL.Query())
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	id, err := model.ParseSandboxID(r.PathValue("id"))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	list, err := a.stores.sandboxes.ListSandboxMetrics(r.Context(), store.MetricsQuery{
		ProjectID: p.project, SandboxID: id, Start: start, End: end, Limit: store.MaxMetricsLimit,
	})
	if errors.Is(err, store.ErrNotFound) {
		a.writeError(w, r, notFound("sandbox %s not found", id))
		return
	}
	if err != nil {
		a.writeError(w, r, fmt.Errorf("metrics of %s: %w", id, err))
		return
	}
	out := apiv1.SandboxMetricList{Metrics: make([]apiv1.SandboxMetric, 0, len(list))}
	for _, m := range list {
		out.Metrics = append(out.Metrics, apiv1.SandboxMetric{
			At: m.At, CPUCount: m.CPUCount, CPUUsedPct: m.CPUUsedPct, MemUsed: m.MemUsed, MemCache: m.MemCache,
			MemTotal: m.MemTotal, DiskUsed: m.DiskUsed, DiskTotal: m.DiskTotal,
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// parseMetricsRange reads start and end: RFC 3339 times or Unix seconds.
func parseMetricsRange(q url.Values) (start, end time.Time, err error) {
	for name, dst := range map[string]*time.Time{"start": &start, "end": &end} {
		v := q.Get(name)
		if v == "" {
			continue
		}
		if *dst, err = parseMetricsTime(v); err != nil {
			return time.Time{}, time.Time{}, badRequest("%s must be an RFC 3339 time such as 2026-01-02T15:04:05Z or Unix seconds", name)
		}
	}
	if !start.IsZero() && !end.IsZero() && end.Before(start) {
		return time.Time{}, time.Time{}, badRequest("end %s is before start %s", end.Format(time.RFC3339), start.Format(time.RFC3339))
	}
	return start, end, nil
}

// maxUnixSeconds keeps Unix seconds within what time.Time and the store's
// microseconds hold (year 9999).
const maxUnixSeconds = 253402300799

func parseMetricsTime(v string) (time.Time, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 || n > maxUnixSeconds {
			return time.Time{}, fmt.Errorf("unix seconds %d out of range", n)
		}
		return time.Unix(n, 0).UTC(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil || t.Year() < 1970 || t.Year() > 9999 {
		return time.Time{}, fmt.Errorf("bad time %q", v)
	}
	return t, nil
}
