package control

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// maxMetricsIDs bounds the sandboxes of one GET /sandboxes/metrics.
const maxMetricsIDs = 100

// latestWindow is how far back GET /sandboxes/metrics looks for a
// sandbox's latest sample: a few sampling intervals.
const latestWindow = 30 * time.Second

// metricOut is E2B's SandboxMetric.
type metricOut struct {
	CPUCount      int     `json:"cpuCount"`
	CPUUsedPct    float64 `json:"cpuUsedPct"`
	DiskTotal     int64   `json:"diskTotal"`
	DiskUsed      int64   `json:"diskUsed"`
	MemCache      int64   `json:"memCache"`
	MemTotal      int64   `json:"memTotal"`
	MemUsed       int64   `json:"memUsed"`
	Timestamp     string  `json:"timestamp"`
	TimestampUnix int64   `json:"timestampUnix"`
}

func metricOf(m apiv1.SandboxMetric) metricOut {
	return metricOut{
		CPUCount: m.CPUCount, CPUUsedPct: m.CPUUsedPct, DiskTotal: m.DiskTotal, DiskUsed: m.DiskUsed,
		MemCache: m.MemCache, MemTotal: m.MemTotal, MemUsed: m.MemUsed,
		Timestamp: m.At.UTC().Format(time.RFC3339Nano), TimestampUnix: m.At.Unix(),
	}
}

// metrics answers GET /sandboxes/{id}/metrics?start=&end= (Unix seconds):
// the native samples of the sandbox in the range, oldest first.
func (h *Handler) metrics(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	id, err := parseID(r)
	if err != nil {
		return err
	}
	var start, end time.Time
	for name, dst := range map[string]*time.Time{"start": &start, "end": &end} {
		v := r.URL.Query().Get(name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > 253402300799 {
			return badRequest("%s must be a Unix time in seconds", name)
		}
		*dst = time.Unix(n, 0)
	}
	if !start.IsZero() && !end.IsZero() && end.Before(start) {
		return badRequest("end is before start")
	}
	if _, _, err := lookup(ctx, c, id); err != nil {
		return err
	}
	list, err := c.SandboxMetrics(ctx, id, start, end)
	if err != nil {
		return fmt.Errorf("metrics of sandbox %s: %w", id, err)
	}
	out := make([]metricOut, 0, len(list.Metrics))
	for _, m := range list.Metrics {
		out = append(out, metricOf(m))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// listMetrics answers GET /sandboxes/metrics?sandbox_ids=a,b: the latest
// sample of each named sandbox that has one (of the last latestWindow);
// unknown, other projects' and sample-less sandboxes are left out, as E2B
// lists only running sandboxes with metrics.
func (h *Handler) listMetrics(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	var ids []model.SandboxID
	for _, v := range r.URL.Query()["sandbox_ids"] {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			id, err := model.ParseSandboxID(s)
			if err != nil {
				continue // not an Airlock ID: no such sandbox
			}
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return badRequest("sandbox_ids must name at least one sandbox")
	}
	if len(ids) > maxMetricsIDs {
		return badRequest("sandbox_ids names %d sandboxes, at most %d", len(ids), maxMetricsIDs)
	}
	out := struct {
		Sandboxes map[string]metricOut `json:"sandboxes"`
	}{Sandboxes: map[string]metricOut{}}
	since := time.Now().Add(-latestWindow)
	for _, id := range ids {
		list, err := c.SandboxMetrics(ctx, id, since, time.Time{})
		if client.IsCode(err, apiv1.CodeNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("metrics of sandbox %s: %w", id, err)
		}
		if n := len(list.Metrics); n > 0 {
			out.Sandboxes[id.String()] = metricOf(list.Metrics[n-1])
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
