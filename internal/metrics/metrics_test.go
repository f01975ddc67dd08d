package metrics

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/airlockdev/airlock/internal/egress/decisionlog"
	"github.com/airlockdev/airlock/internal/model"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestNilMetricsDoNothing(t *testing.T) {
	var m *Metrics
	m.CreateFinished("runc", "cold", time.Second)
	m.OperationFinished("create", true)
	m.StreamOpened(StreamStdin)()
	m.StreamBytes(StreamStdin, DirectionIn, 3)
	m.EgressDecision("dns", false)
	m.EgressObserver()(decisionlog.Event{Kind: "dns"})
	m.StoreError("exec")
	m.RuntimeError("runc", "create")
	m.WatchStore(nil, 0, nil)
	if m.Registry() != nil {
		t.Fatal("nil Metrics has a registry")
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("nil Metrics' handler answered %d", rec.Code)
	}
}

func TestCountersAndBoundedLabels(t *testing.T) {
	m := New()
	for _, tc := range []struct {
		name string
		do   func()
		got  func() float64
		want float64
	}{
		{"operation succeeded", func() { m.OperationFinished("create", true) },
			func() float64 { return testutil.ToFloat64(m.operations.WithLabelValues("create", OutcomeSucceeded)) }, 1},
		{"operation failed", func() { m.OperationFinished("delete", false) },
			func() float64 { return testutil.ToFloat64(m.operations.WithLabelValues("delete", OutcomeFailed)) }, 1},
		{"unknown operation kind is other", func() { m.OperationFinished("sbx_123", true) },
			func() float64 { return testutil.ToFloat64(m.operations.WithLabelValues(other, OutcomeSucceeded)) }, 1},
		{"egress denied", func() { m.EgressObserver()(decisionlog.Event{Kind: decisionlog.KindHTTP}) },
			func() float64 { return testutil.ToFloat64(m.egress.WithLabelValues("http", VerdictDenied)) }, 1},
		{"egress allowed", func() { m.EgressObserver()(decisionlog.Event{Kind: decisionlog.KindDNS, Allowed: true}) },
			func() float64 { return testutil.ToFloat64(m.egress.WithLabelValues("dns", VerdictAllowed)) }, 1},
		{"bytes in", func() {
			m.StreamBytes(StreamFileUpload, DirectionIn, 10)
			m.StreamBytes(StreamFileUpload, DirectionIn, 5)
		},
			func() float64 {
				return testutil.ToFloat64(m.streamBytes.WithLabelValues(StreamFileUpload, DirectionIn))
			}, 15},
		{"bytes of an unknown direction are out", func() { m.StreamBytes(StreamStdin, "sideways", 4) },
			func() float64 { return testutil.ToFloat64(m.streamBytes.WithLabelValues(StreamStdin, DirectionOut)) }, 4},
		{"store error of an unknown call is other", func() { m.StoreError("DROP TABLE") },
			func() float64 { return testutil.ToFloat64(m.storeErrors.WithLabelValues(other)) }, 1},
		{"runtime error", func() { m.RuntimeError("runc", "start") },
			func() float64 { return testutil.ToFloat64(m.runtimeErrors.WithLabelValues("runc", "start")) }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.got()
			tc.do()
			if got := tc.got() - before; got != tc.want {
				t.Fatalf("moved by %v, want %v", got, tc.want)
			}
		})
	}
}

func TestStreamsOpenGauge(t *testing.T) {
	m := New()
	g := m.streamsOpen.WithLabelValues(StreamAttachSSE)
	a := m.StreamOpened(StreamAttachSSE)
	b := m.StreamOpened(StreamAttachSSE)
	if got := testutil.ToFloat64(g); got != 2 {
		t.Fatalf("two open streams: gauge %v", got)
	}
	a()
	b()
	if got := testutil.ToFloat64(g); got != 0 {
		t.Fatalf("closed streams: gauge %v", got)
	}
}

func TestCreateHistogram(t *testing.T) {
	m := New()
	m.CreateFinished("runc", "pool", 3*time.Millisecond)
	m.CreateFinished("runc", "cold", 2*time.Second)
	m.CreateFinished("", "cold", time.Second)
	out := scrape(t, m)
	for _, want := range []string{
		`airlock_sandbox_create_seconds_bucket{environment="runc",source="pool",le="0.005"} 1`,
		`airlock_sandbox_create_seconds_bucket{environment="runc",source="cold",le="1"} 0`,
		`airlock_sandbox_create_seconds_bucket{environment="runc",source="cold",le="2.5"} 1`,
		`airlock_sandbox_create_seconds_count{environment="none",source="cold"} 1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
}

// fakeStore answers the store collector's reads.
type fakeStore struct {
	counts []SandboxCount
	pools  []model.Pool
	err    error
	block  bool // wait for the context's end
}

func (f *fakeStore) CountSandboxes(ctx context.Context) ([]SandboxCount, error) {
	if f.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return f.counts, f.err
}

func (f *fakeStore) ListPools(context.Context) ([]model.Pool, error) { return f.pools, nil }

func TestStoreCollector(t *testing.T) {
	ref, err := model.ParseTemplateRef("python")
	if err != nil {
		t.Fatal(err)
	}
	pool := model.Pool{ID: model.NewPoolID(), Key: model.PoolKey{Template: ref, Environment: "runc", CPUs: 1, MemoryMiB: 256}, Size: 3, Hits: 7, Misses: 2}
	st := &fakeStore{
		counts: []SandboxCount{
			{State: model.StateRunning, Environment: "runc", N: 4},
			{State: model.StateRunning, Environment: "runsc", N: 1},
			{State: model.StatePending, N: 2},
			{State: model.StateRunning, Environment: "runc", Pool: pool.ID, N: 2},
			{State: model.StateCreating, Environment: "runc", Pool: pool.ID, N: 1},
			{State: model.StateDeleting, Environment: "runc", Pool: pool.ID, N: 1},
		},
		pools: []model.Pool{pool},
	}
	m := New()
	m.WatchStore(st, time.Second, quiet)
	out := scrape(t, m)
	// Labels are written in name order.
	labels := `environment="runc",pool="` + pool.ID.String() + `",template="python:latest"`
	poolState := func(state string) string {
		return `environment="runc",pool="` + pool.ID.String() + `",state="` + state + `",template="python:latest"`
	}
	for _, want := range []string{
		`airlock_store_scrape_success 1`,
		`airlock_sandboxes{environment="runc",state="running"} 4`,
		`airlock_sandboxes{environment="runsc",state="running"} 1`,
		`airlock_sandboxes{environment="none",state="pending"} 2`,
		`airlock_pool_size{` + labels + `} 3`,
		`airlock_pool_hits_total{` + labels + `} 7`,
		`airlock_pool_misses_total{` + labels + `} 2`,
		`airlock_pool_sandboxes{` + poolState("ready") + `} 2`,
		`airlock_pool_sandboxes{` + poolState("starting") + `} 1`,
		`airlock_pool_sandboxes{` + poolState("draining") + `} 1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	if strings.Contains(out, `airlock_sandboxes{environment="runc",state="creating"}`) {
		t.Error("pool sandboxes are counted among the sandboxes")
	}
	if t.Failed() {
		t.Log(out)
	}
}

func TestStoreCollectorFailureAndTimeout(t *testing.T) {
	for name, st := range map[string]*fakeStore{
		"error":   {err: errors.New("database is down")},
		"timeout": {block: true},
	} {
		t.Run(name, func(t *testing.T) {
			m := New()
			m.WatchStore(st, 50*time.Millisecond, quiet)
			start := time.Now()
			out := scrape(t, m)
			if took := time.Since(start); took > 5*time.Second {
				t.Fatalf("scrape took %s", took)
			}
			if !strings.Contains(out, "airlock_store_scrape_success 0") {
				t.Fatalf("scrape after a failed store read:\n%s", out)
			}
			if strings.Contains(out, "airlock_sandboxes{") || !strings.Contains(out, "go_goroutines") {
				t.Fatalf("scrape after a failed store read has sandboxes or lacks the rest:\n%s", out)
			}
		})
	}
}

func TestHandlerServesEveryFamily(t *testing.T) {
	m := New()
	m.WatchStore(&fakeStore{}, time.Second, quiet)
	out := scrape(t, m)
	for _, family := range []string{"go_goroutines", "airlock_process_cpu_seconds_total", "airlock_dataplane_streams_open",
		"airlock_egress_decisions_total", "airlock_store_scrape_success"} {
		if !strings.Contains(out, "# HELP "+family+" ") {
			t.Errorf("no family %s", family)
		}
	}
}

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}
