package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

func TestSandboxMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.createSandbox(e.keyA, `{}`).Sandbox
	id := model.SandboxID(sb.ID)
	e.finishCreate(id)
	base := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	var samples []model.SandboxMetric
	for i := range 4 {
		samples = append(samples, model.SandboxMetric{SandboxID: id, At: base.Add(time.Duration(i) * 5 * time.Second), CPUCount: 1,
			CPUUsedPct: 12.5, MemUsed: 64 << 20, MemCache: 1 << 20, MemTotal: 512 << 20, DiskUsed: 2 << 20, DiskTotal: 1 << 30})
	}
	if err := e.st.AddSandboxMetrics(context.Background(), samples); err != nil {
		t.Fatal(err)
	}
	path := "/v1/sandboxes/" + sb.ID + "/metrics"
	get := func(query string) apiv1.SandboxMetricList {
		t.Helper()
		var out apiv1.SandboxMetricList
		e.do("GET", path+query, e.keyA, "").want(t, http.StatusOK).decode(t, &out)
		return out
	}
	if got := get(""); len(got.Metrics) != 4 || got.Metrics[0] != (apiv1.SandboxMetric{At: base, CPUCount: 1, CPUUsedPct: 12.5,
		MemUsed: 64 << 20, MemCache: 1 << 20, MemTotal: 512 << 20, DiskUsed: 2 << 20, DiskTotal: 1 << 30}) {
		t.Fatalf("all: %+v", got)
	}
	// Unix seconds (E2B's) and RFC 3339 bound the range, both ends included.
	if got := get(fmt.Sprintf("?start=%d&end=%d", base.Add(5*time.Second).Unix(), base.Add(10*time.Second).Unix())); len(got.Metrics) != 2 {
		t.Errorf("[5s, 10s] in Unix seconds: %d samples, want 2", len(got.Metrics))
	}
	if got := get("?start=" + url.QueryEscape(base.Add(11*time.Second).Format(time.RFC3339))); len(got.Metrics) != 1 {
		t.Errorf("from 11s: %d samples, want 1", len(got.Metrics))
	}
	if got := get("?end=" + url.QueryEscape(base.Add(-time.Hour).Format(time.RFC3339))); got.Metrics == nil || len(got.Metrics) != 0 {
		t.Errorf("before the first: %+v, want an empty list", got)
	}
	for _, tc := range []struct {
		name, path, key string
		status          int
		code            string
	}{
		{"bad start", path + "?start=yesterday", e.keyA, 400, apiv1.CodeInvalidRequest},
		{"end before start", path + "?start=100&end=50", e.keyA, 400, apiv1.CodeInvalidRequest},
		{"out of range", path + "?end=99999999999999", e.keyA, 400, apiv1.CodeInvalidRequest},
		{"another project's sandbox", path, e.keyB, 404, apiv1.CodeNotFound},
		{"unknown sandbox", "/v1/sandboxes/" + string(model.NewSandboxID()) + "/metrics", e.keyA, 404, apiv1.CodeNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.do("GET", tc.path, tc.key, "").wantError(t, tc.status, tc.code)
		})
	}
}
