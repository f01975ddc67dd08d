package api

import (
	"bufio"
	"bytes"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/egress"
	"github.com/airlockdev/airlock/internal/egress/decisionlog"
	"github.com/airlockdev/airlock/internal/metrics"
	"github.com/airlockdev/airlock/internal/metrics/storefeed"
	"github.com/airlockdev/airlock/internal/model"
)

// withMetrics gives the API metrics that read the env's store, as the
// server wires them.
func withMetrics(m *metrics.Metrics) envOption {
	return func(c *envConfig) {
		c.Metrics = m
		m.WatchStore(storefeed.New(c.Store), time.Second, nil)
	}
}

// scrape reads GET /metrics with the admin key and returns the value of
// every sample, by its series as written ("name{labels}").
func (e *testEnv) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	r := e.do("GET", "/metrics", e.admin, "").want(t, http.StatusOK)
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("GET /metrics Content-Type %q", ct)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(r.body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// TestMetricsEndpoint: GET /metrics needs an admin key and serves
// Prometheus' text format with Airlock's families; without metrics it is
// not supported.
func TestMetricsEndpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withMetrics(metrics.New()))
	e.send(req{method: "GET", path: "/metrics", invalid: true}).wantError(t, http.StatusUnauthorized, apiv1.CodeUnauthenticated)
	e.do("GET", "/metrics", "alk_nonsense", "").wantError(t, http.StatusUnauthorized, apiv1.CodeUnauthenticated)
	e.do("GET", "/metrics", e.keyA, "").wantError(t, http.StatusForbidden, apiv1.CodePermissionDenied)
	e.createSandbox(e.keyA, `{}`)
	e.createSandbox(e.keyB, `{}`)
	r := e.do("GET", "/metrics", e.admin, "").want(t, http.StatusOK)
	for _, family := range []string{"go_goroutines", "airlock_process_resident_memory_bytes", "airlock_sandboxes",
		"airlock_dataplane_streams_open", "airlock_dataplane_bytes_total", "airlock_egress_decisions_total",
		"airlock_store_scrape_success"} {
		if !bytes.Contains(r.body, []byte("# TYPE "+family+" ")) {
			t.Errorf("GET /metrics has no family %s", family)
		}
	}
	got := e.scrape(t)
	// Not placed by a controller here: no environment yet.
	if n := got[`airlock_sandboxes{environment="none",state="pending"}`]; n != 2 {
		t.Errorf("pending sandboxes = %v, want 2", n)
	}
	if got["airlock_store_scrape_success"] != 1 {
		t.Error("the store reads failed")
	}

	plain := newEnv(t)
	plain.do("GET", "/metrics", plain.admin, "").wantError(t, http.StatusNotImplemented, apiv1.CodeNotSupported)
}

// TestMetricsCountPoolClaims: a create served by a pool is observed in
// the create histogram (source pool) and counted as a succeeded create,
// and the store's hit and miss counts are exposed.
func TestMetricsCountPoolClaims(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withPoolClaims(), withMetrics(metrics.New()))
	var p apiv1.Pool
	e.do("PUT", "/v1/pools", e.admin, `{"template":"default","size":1,"memory_mib":256}`).want(t, http.StatusOK).decode(t, &p)
	res := model.Resources{CPUs: 1, MemoryMiB: 256, DiskMiB: model.DefaultDiskMiB}
	e.poolSandbox(model.PoolID(p.ID), res)
	pool := `environment="",pool="` + p.ID + `",template="default:latest"`
	before := e.scrape(t)
	if before[`airlock_pool_sandboxes{`+strings.Replace(pool, `,template`, `,state="ready",template`, 1)+`}`] != 1 ||
		before[`airlock_pool_size{`+pool+`}`] != 1 || before[`airlock_pool_hits_total{`+pool+`}`] != 0 {
		t.Fatalf("pool before the claim: %v", before)
	}

	var claimed apiv1.SandboxWithOperation
	e.do("POST", "/v1/sandboxes", e.keyA, `{"memory_mib":256}`).want(t, http.StatusCreated).decode(t, &claimed)
	e.createSandbox(e.keyA, `{"memory_mib":256}`) // the pool is empty: a miss, and a cold create
	after := e.scrape(t)
	for series, want := range map[string]float64{
		`airlock_pool_hits_total{` + pool + `}`:                                                            1,
		`airlock_pool_misses_total{` + pool + `}`:                                                          1,
		`airlock_sandbox_create_seconds_count{environment="none",source="pool"}`:                           1,
		`airlock_operations_finished_total{kind="create",outcome="succeeded"}`:                             1,
		`airlock_pool_sandboxes{` + strings.Replace(pool, `,template`, `,state="ready",template`, 1) + `}`: 0,
	} {
		if got := after[series]; got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}

// TestMetricsCountEgressDecisions: decisions logged by a sandbox's egress
// state are counted by verdict, through the registry's observer as the
// server wires it.
func TestMetricsCountEgressDecisions(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	reg := egress.NewRegistry(egress.RegistryConfig{OnDecision: m.EgressObserver()})
	e := newEnv(t, withEgress(reg), withMetrics(m))
	sb := e.createSandbox(e.keyA, `{"egress": {"allow": ["pypi.org"]}}`)
	live := e.register(reg, sb.Sandbox.ID, "10.213.0.14")
	live.Decide(decisionlog.KindDNS, "pypi.org", netip.Addr{}, 0)
	live.Decide(decisionlog.KindHTTP, "evil.example", netip.MustParseAddr("203.0.113.5"), 80)
	live.Decide(decisionlog.KindConnect, "", netip.MustParseAddr("198.51.100.1"), 22)
	got := e.scrape(t)
	for series, want := range map[string]float64{
		`airlock_egress_decisions_total{kind="dns",verdict="allowed"}`:     1,
		`airlock_egress_decisions_total{kind="http",verdict="denied"}`:     1,
		`airlock_egress_decisions_total{kind="connect",verdict="denied"}`:  1,
		`airlock_egress_decisions_total{kind="connect",verdict="allowed"}`: 0,
	} {
		if got[series] != want {
			t.Errorf("%s = %v, want %v", series, got[series], want)
		}
	}
}
