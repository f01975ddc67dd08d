package control

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

func TestMetrics(t *testing.T) {
	at := time.Date(2026, 12, 7, 12, 0, 5, 0, time.UTC)
	sample := apiv1.SandboxMetric{At: at, CPUCount: 2, CPUUsedPct: 12.5, MemUsed: 64 << 20, MemCache: 1 << 20,
		MemTotal: 512 << 20, DiskUsed: 2 << 20, DiskTotal: 1 << 30}
	f := &fakeNative{id: model.NewSandboxID(), script: []model.SandboxState{model.StateRunning}, metrics: []apiv1.SandboxMetric{sample}}
	h, _ := newTestHandler(t, f)
	get := func(path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("X-API-Key", "k")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}

	rec := get("/sandboxes/" + f.id.String() + "/metrics?start=1765108800&end=1765108900")
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var got []map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"cpuCount": 2.0, "cpuUsedPct": 12.5, "memUsed": float64(64 << 20), "memCache": float64(1 << 20),
		"memTotal": float64(512 << 20), "diskUsed": float64(2 << 20), "diskTotal": float64(1 << 30),
		"timestamp": "2026-12-07T12:00:05Z", "timestampUnix": float64(at.Unix())}
	if len(got) != 1 || len(got[0]) != len(want) {
		t.Fatalf("got %v, want one %v", got, want)
	}
	for k, v := range want {
		if got[0][k] != v {
			t.Errorf("%s = %v, want %v", k, got[0][k], v)
		}
	}
	// E2B's Unix seconds are passed on as the native range.
	q, _ := url.ParseQuery(f.metricsQuery)
	if q.Get("start") != "2025-12-07T12:00:00Z" || q.Get("end") != "2025-12-07T12:01:40Z" {
		t.Errorf("native query %q", f.metricsQuery)
	}

	for _, tc := range []struct {
		name, path string
		status     int
	}{
		{"bad start", "/sandboxes/" + f.id.String() + "/metrics?start=soon", 400},
		{"end before start", "/sandboxes/" + f.id.String() + "/metrics?start=200&end=100", 400},
		{"not an Airlock ID", "/sandboxes/nope/metrics", 404},
		{"unknown sandbox", "/sandboxes/" + model.NewSandboxID().String() + "/metrics", 404},
		{"list: none named", "/sandboxes/metrics", 400},
		{"list: too many", "/sandboxes/metrics?sandbox_ids=" + strings.Repeat(f.id.String()+",", maxMetricsIDs+1), 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if rec := get(tc.path); rec.Code != tc.status {
				t.Errorf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
		})
	}

	// The list: the latest sample of each sandbox that has one; unknown
	// IDs are left out.
	f.metrics = append(f.metrics, sample, sample)
	f.metrics[2].CPUUsedPct = 99
	rec = get("/sandboxes/metrics?sandbox_ids=" + f.id.String() + "," + model.NewSandboxID().String() + ",nope")
	if rec.Code != http.StatusOK {
		t.Fatalf("list: status %d: %s", rec.Code, rec.Body)
	}
	var list struct {
		Sandboxes map[string]metricOut `json:"sandboxes"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Sandboxes) != 1 || list.Sandboxes[f.id.String()].CPUUsedPct != 99 {
		t.Errorf("list: %+v", list)
	}
}
