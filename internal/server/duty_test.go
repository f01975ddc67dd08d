package server

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/placement"
	"github.com/airlockdev/airlock/internal/store/sqlite"
	"github.com/airlockdev/airlock/internal/usage"
)

// TestDutyEvery: a pass runs only while the lease is held: at once when
// it is taken, then every interval; a lease lost and soon taken back does
// not run it again before its interval.
func TestDutyEvery(t *testing.T) {
	d := newDuty("test")
	var passes atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.every(ctx, 300*time.Millisecond, func(context.Context) { passes.Add(1) })
	}()
	defer func() { cancel(); <-done }()
	waitFor := func(what string, n int32) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for passes.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d passes, want %d", what, passes.Load(), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if n := passes.Load(); n != 0 {
		t.Fatalf("%d passes without the lease", n)
	}
	d.set(true)
	waitFor("lease taken", 1)
	// Lost and taken back at once: no second pass before the interval.
	d.set(false)
	d.set(true)
	time.Sleep(100 * time.Millisecond)
	if n := passes.Load(); n != 1 {
		t.Fatalf("%d passes right after the lease came back, want 1", n)
	}
	waitFor("interval", 2)
	d.set(false)
	time.Sleep(400 * time.Millisecond)
	if n := passes.Load(); n != 2 {
		t.Fatalf("%d passes after the lease was lost, want 2", n)
	}
}

// TestClusterPassesOnOneNode: of two nodes on one store, one holds the
// lease of each cluster-wide pass and runs it; once it stops renewing its
// leases (it died), the other takes them over and runs the passes.
func TestClusterPassesOnOneNode(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	placer, err := placement.New(placement.Config{Store: st, DeadAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// The leases last 3 intervals: long enough that a round of the two
	// nodes' renewals fits under -race on a loaded machine.
	const interval = 100 * time.Millisecond
	type node struct {
		m      *membership
		passes map[string]*atomic.Int32 // runs of each pass
		stop   context.CancelFunc
		done   chan struct{}
	}
	names := []string{purgeLease, templateGCLease, metricsLease}
	nodes := make([]*node, 2)
	for i := range nodes {
		n := &node{passes: map[string]*atomic.Int32{}, done: make(chan struct{})}
		n.m = &membership{st: st, interval: interval, deadAfter: time.Hour, placer: placer,
			node: model.Node{ID: model.NewNodeID(), Incarnation: model.NewIncarnation(), Role: model.RoleAll, AdvertiseURL: "http://127.0.0.1:1"},
			log:  slog.New(slog.DiscardHandler)}
		if err := n.m.register(ctx); err != nil {
			t.Fatal(err)
		}
		var pctx context.Context
		pctx, n.stop = context.WithCancel(ctx)
		running := 0
		for _, name := range names {
			d := newDuty(name)
			n.m.passes = append(n.m.passes, d)
			c := &atomic.Int32{}
			n.passes[name] = c
			running++
			go func() {
				defer func() { n.done <- struct{}{} }()
				d.every(pctx, time.Hour, func(context.Context) { c.Add(1) })
			}()
		}
		t.Cleanup(func() {
			n.stop()
			for range running {
				<-n.done
			}
		})
		nodes[i] = n
	}
	held := func(n *node, name string) bool {
		for _, d := range n.m.passes {
			if d.name == name {
				return d.Held()
			}
		}
		t.Fatalf("no duty %s", name)
		return false
	}
	for range 5 {
		for _, n := range nodes {
			n.m.duties(ctx)
		}
		for _, name := range names {
			if held(nodes[0], name) == held(nodes[1], name) {
				t.Fatalf("%s held by %v, %v; want exactly one", name, held(nodes[0], name), held(nodes[1], name))
			}
		}
		time.Sleep(interval / 2)
	}
	waitRuns := func(n *node, name string, want int32) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for n.passes[name].Load() < want {
			if time.Now().After(deadline) {
				t.Fatalf("%s ran %d times on %s, want %d", name, n.passes[name].Load(), n.m.node.ID, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for _, name := range names {
		holder, other := nodes[0], nodes[1]
		if !held(holder, name) {
			holder, other = other, holder
		}
		waitRuns(holder, name, 1)
		if n := other.passes[name].Load(); n != 0 {
			t.Fatalf("%s ran %d times on the node without its lease", name, n)
		}
	}
	// The purge's holder stops: its passes and its renewals. The other
	// node renews on and takes each lease over once it expired.
	holder, other := nodes[0], nodes[1]
	if !held(holder, purgeLease) {
		holder, other = other, holder
	}
	holder.stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := st.Heartbeat(ctx, other.m.fence()); err != nil {
			t.Fatal(err)
		}
		other.m.duties(ctx)
		if held(other, purgeLease) && held(other, templateGCLease) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the remaining node did not take the leases over")
		}
		time.Sleep(interval)
	}
	for _, name := range names {
		waitRuns(other, name, 1)
	}
}

type countingPrune struct {
	calls  atomic.Int32
	before atomic.Int64 // the last cut-off, Unix microseconds
}

func (c *countingPrune) DeleteSandboxMetricsBefore(_ context.Context, before time.Time) (int, error) {
	c.calls.Add(1)
	c.before.Store(before.UnixMicro())
	return 0, nil
}

// TestMetricsRetentionOnTheHolder: old resource samples are removed by the
// holder of the metrics-retention lease only, once per interval (it was a
// DELETE by every node at every 5 s sampling).
func TestMetricsRetentionOnTheHolder(t *testing.T) {
	const interval = 100 * time.Millisecond
	d := newDuty(metricsLease)
	st := &countingPrune{}
	c := metricsRetention(st, d, interval, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.run(ctx) }()
	defer func() { cancel(); <-done }()

	time.Sleep(3 * interval)
	if n := st.calls.Load(); n != 0 {
		t.Fatalf("%d prunes without the lease", n)
	}
	start := time.Now()
	d.set(true)
	time.Sleep(interval / 2)
	if n := st.calls.Load(); n != 1 {
		t.Fatalf("%d prunes right after the lease was taken, want 1", n)
	}
	if cut := time.UnixMicro(st.before.Load()); cut.Sub(start.Add(-usage.Retention)).Abs() > time.Second {
		t.Errorf("cut-off %v, want about %v", cut, start.Add(-usage.Retention))
	}
	time.Sleep(3 * interval)
	d.set(false)
	n := st.calls.Load()
	if n < 3 || n > 5 {
		t.Fatalf("%d prunes in 3.5 intervals, want about one an interval", n)
	}
	time.Sleep(3 * interval)
	if m := st.calls.Load(); m != n {
		t.Fatalf("%d prunes after the lease was lost, want %d", m, n)
	}
}
