package metrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"

	"github.com/airlockdev/airlock/internal/model"
)

// SandboxCount is how many live sandboxes share a state, an execution
// environment ("" before placement) and a pool ("": not an unclaimed pool
// sandbox).
type SandboxCount struct {
	State       model.SandboxState
	Environment string
	Pool        model.PoolID
	N           int
}

// Store is what the store collector reads at each scrape. This package
// imports no store: whoever wires the metrics (internal/server) adapts
// its store to this.
type Store interface {
	// CountSandboxes counts the sandboxes of every node that are not
	// deleted, grouped by state, environment and pool, in one read.
	CountSandboxes(ctx context.Context) ([]SandboxCount, error)
	ListPools(ctx context.Context) ([]model.Pool, error)
}

// DefaultStoreTimeout bounds the store reads of one scrape.
const DefaultStoreTimeout = 5 * time.Second

// WatchStore registers the collector that reads, at each scrape, the
// sandboxes by state and environment and the pools' fill, hits and misses
// from st (within timeout; 0: DefaultStoreTimeout). They are the whole
// deployment's, the same on every replica sharing the store: aggregate
// them across replicas with max, not sum. A scrape whose reads fail
// leaves them out and sets airlock_store_scrape_success to 0.
func (m *Metrics) WatchStore(st Store, timeout time.Duration, log *slog.Logger) {
	if m == nil {
		return
	}
	if timeout <= 0 {
		timeout = DefaultStoreTimeout
	}
	if log == nil {
		log = slog.Default()
	}
	m.reg.MustRegister(&storeCollector{st: st, timeout: timeout, log: log})
}

var (
	sandboxesDesc = prometheus.NewDesc(Namespace+"_sandboxes",
		"Sandboxes that are not deleted, by state and execution environment (\"none\": not placed yet), on every node; unclaimed warm-pool sandboxes are counted in airlock_pool_sandboxes instead.",
		[]string{"state", "environment"}, nil)
	poolSizeDesc = prometheus.NewDesc(Namespace+"_pool_size",
		"Target size of each warm pool: ready sandboxes each node keeps per template release.",
		[]string{"pool", "template", "environment"}, nil)
	poolSandboxesDesc = prometheus.NewDesc(Namespace+"_pool_sandboxes",
		"Unclaimed sandboxes of each warm pool on every node, by state: ready (running, claimable), starting, draining (being deleted or failed).",
		[]string{"pool", "template", "environment", "state"}, nil)
	poolHitsDesc = prometheus.NewDesc(Namespace+"_pool_hits_total",
		"Creates served by a claim from each warm pool, counted by the store (the deployment's total, not this process's).",
		[]string{"pool", "template", "environment"}, nil)
	poolMissesDesc = prometheus.NewDesc(Namespace+"_pool_misses_total",
		"Creates that matched each warm pool but found no ready sandbox, counted by the store (the deployment's total).",
		[]string{"pool", "template", "environment"}, nil)
	storeUpDesc = prometheus.NewDesc(Namespace+"_store_scrape_success",
		"Whether this scrape's store reads (sandboxes and pools) succeeded (1) or failed or timed out (0).",
		nil, nil)
)

// storeCollector is WatchStore's collector. Scrapes that arrive while
// the store is being read share that read (singleflight), so scrapes (the
// unauthenticated --metrics-listen ones included) keep at most one read of
// each kind in flight per process, however many arrive; a scrape never
// sees counts older than the scrape itself began.
type storeCollector struct {
	st      Store
	timeout time.Duration
	log     *slog.Logger
	reads   singleflight.Group
}

// storeRead is one read of the store for the collector.
type storeRead struct {
	counts []SandboxCount
	pools  []model.Pool
}

// read returns the store's counts and pools, sharing a read in flight.
func (c *storeCollector) read() ([]SandboxCount, []model.Pool, error) {
	v, err, _ := c.reads.Do("store", func() (any, error) {
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		defer cancel()
		counts, err := c.st.CountSandboxes(ctx)
		if err != nil {
			return nil, err
		}
		pools, err := c.st.ListPools(ctx)
		if err != nil {
			return nil, err
		}
		return storeRead{counts, pools}, nil
	})
	if err != nil {
		return nil, nil, err
	}
	r := v.(storeRead)
	return r.counts, r.pools, nil
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{sandboxesDesc, poolSizeDesc, poolSandboxesDesc, poolHitsDesc, poolMissesDesc, storeUpDesc} {
		ch <- d
	}
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	counts, pools, err := c.read()
	if err != nil {
		c.log.Warn("metrics: cannot read sandboxes and pools from the store", "err", err)
		ch <- prometheus.MustNewConstMetric(storeUpDesc, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(storeUpDesc, prometheus.GaugeValue, 1)

	type sbKey struct{ state, env string }
	sandboxes := map[sbKey]int{}
	poolFill := map[model.PoolID]map[string]int{}
	for _, n := range counts {
		if n.Pool != "" {
			if poolFill[n.Pool] == nil {
				poolFill[n.Pool] = map[string]int{}
			}
			poolFill[n.Pool][poolState(n.State)] += n.N
			continue
		}
		env := n.Environment
		if env == "" {
			env = "none"
		}
		sandboxes[sbKey{string(n.State), env}] += n.N
	}
	for k, n := range sandboxes {
		ch <- prometheus.MustNewConstMetric(sandboxesDesc, prometheus.GaugeValue, float64(n), k.state, k.env)
	}
	for _, p := range pools {
		labels := []string{p.ID.String(), p.Key.Template.String(), p.Key.Environment}
		ch <- prometheus.MustNewConstMetric(poolSizeDesc, prometheus.GaugeValue, float64(p.Size), labels...)
		ch <- prometheus.MustNewConstMetric(poolHitsDesc, prometheus.CounterValue, float64(p.Hits), labels...)
		ch <- prometheus.MustNewConstMetric(poolMissesDesc, prometheus.CounterValue, float64(p.Misses), labels...)
		for _, s := range []string{"ready", "starting", "draining"} {
			ch <- prometheus.MustNewConstMetric(poolSandboxesDesc, prometheus.GaugeValue, float64(poolFill[p.ID][s]), append(labels, s)...)
		}
	}
}

// poolState is the fill state of an unclaimed pool sandbox in state s (as
// GET /v1/pools counts them).
func poolState(s model.SandboxState) string {
	switch s {
	case model.StateRunning:
		return "ready"
	case model.StatePending, model.StateCreating:
		return "starting"
	}
	return "draining"
}
