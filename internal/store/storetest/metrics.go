package storetest

import (
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func metricsTests() []namedTest {
	return []namedTest{
		{"SandboxMetricsRoundTripAndRange", testSandboxMetrics},
		{"SandboxMetricsRetentionAndDelete", testSandboxMetricsRetention},
	}
}

func sample(id model.SandboxID, at time.Time, pct float64) model.SandboxMetric {
	return model.SandboxMetric{SandboxID: id, At: at, CPUCount: 2, CPUUsedPct: pct, MemUsed: 10 << 20, MemCache: 3 << 20,
		MemTotal: 512 << 20, DiskUsed: 1 << 20, DiskTotal: 1 << 30}
}

func testSandboxMetrics(e *env) {
	t := e.t
	p, other := e.project(), e.project()
	tpl := e.template()
	node := e.homeNode()
	sb := e.run(e.sandboxWith(p.ID, tpl.Digest, func(*model.Sandbox) {}), node)
	base := e.now()
	var want []model.SandboxMetric
	for i := range 5 {
		want = append(want, sample(sb.ID, base.Add(time.Duration(i)*5*time.Second), float64(i)*12.345))
	}
	must(t, e.s.AddSandboxMetrics(e.ctx, want[:3]))
	// A sample again at the same time is skipped, not an error.
	must(t, e.s.AddSandboxMetrics(e.ctx, append(want[2:], sample(model.NewSandboxID(), base, 1))))
	list := func(q store.MetricsQuery) []model.SandboxMetric {
		t.Helper()
		if q.ProjectID == "" {
			q.ProjectID = p.ID
		}
		q.SandboxID = sb.ID
		if q.Limit == 0 {
			q.Limit = 100
		}
		got, err := e.s.ListSandboxMetrics(e.ctx, q)
		must(t, err)
		return got
	}
	got := list(store.MetricsQuery{})
	if len(got) != 5 {
		t.Fatalf("%d samples, want 5: %+v", len(got), got)
	}
	for i, m := range got {
		w := want[i]
		w.At = us(w.At)
		w.CPUUsedPct = float64(int64(w.CPUUsedPct*100+0.5)) / 100 // hundredths of a percent
		if m != w {
			t.Errorf("sample %d: %+v, want %+v", i, m, w)
		}
	}
	if got := list(store.MetricsQuery{Start: base.Add(5 * time.Second), End: base.Add(15 * time.Second)}); len(got) != 3 || !got[0].At.Equal(us(base.Add(5*time.Second))) {
		t.Errorf("range [5s, 15s]: %+v", got)
	}
	if got := list(store.MetricsQuery{End: base.Add(-time.Second)}); len(got) != 0 {
		t.Errorf("before the first sample: %+v", got)
	}
	if got := list(store.MetricsQuery{Limit: 2}); len(got) != 2 || !got[1].At.Equal(us(base.Add(5*time.Second))) {
		t.Errorf("limit 2: %+v", got)
	}
	// Another project's sandbox is not found; a bad limit is invalid; a
	// bad sample is refused whole.
	_, err := e.s.ListSandboxMetrics(e.ctx, store.MetricsQuery{ProjectID: other.ID, SandboxID: sb.ID, Limit: 10})
	mustIs(t, err, store.ErrNotFound)
	_, err = e.s.ListSandboxMetrics(e.ctx, store.MetricsQuery{ProjectID: p.ID, SandboxID: sb.ID, Limit: 0})
	mustIs(t, err, model.ErrInvalid)
	bad := sample(sb.ID, base.Add(time.Hour), 101)
	mustIs(t, e.s.AddSandboxMetrics(e.ctx, []model.SandboxMetric{sample(sb.ID, base.Add(time.Minute), 1), bad}), model.ErrInvalid)
	if got := list(store.MetricsQuery{}); len(got) != 5 {
		t.Errorf("after a refused batch: %d samples, want 5", len(got))
	}
}

func testSandboxMetricsRetention(e *env) {
	t := e.t
	p := e.project()
	tpl := e.template()
	node := e.homeNode()
	a := e.run(e.sandboxWith(p.ID, tpl.Digest, func(*model.Sandbox) {}), node)
	b := e.run(e.sandboxWith(p.ID, tpl.Digest, func(*model.Sandbox) {}), node)
	base := e.now()
	must(t, e.s.AddSandboxMetrics(e.ctx, []model.SandboxMetric{sample(a.ID, base, 1), sample(b.ID, base, 1)}))
	// The next sampling, then a prune past the window of the first: the
	// old samples go, the new stay.
	later := base.Add(time.Hour)
	must(t, e.s.AddSandboxMetrics(e.ctx, []model.SandboxMetric{sample(a.ID, later, 2), sample(b.ID, later, 2)}))
	if n, err := e.s.DeleteSandboxMetricsBefore(e.ctx, base.Add(time.Second)); err != nil || n != 2 {
		t.Fatalf("DeleteSandboxMetricsBefore: %d, %v; want the 2 old samples", n, err)
	}
	if n, err := e.s.DeleteSandboxMetricsBefore(e.ctx, base.Add(time.Second)); err != nil || n != 0 {
		t.Fatalf("DeleteSandboxMetricsBefore again: %d, %v; want none", n, err)
	}
	count := func(id model.SandboxID) int {
		t.Helper()
		got, err := e.s.ListSandboxMetrics(e.ctx, store.MetricsQuery{ProjectID: p.ID, SandboxID: id, Limit: 100})
		must(t, err)
		return len(got)
	}
	if count(a.ID) != 1 || count(b.ID) != 1 {
		t.Fatalf("after the retention window: %d and %d samples, want 1 each", count(a.ID), count(b.ID))
	}
	// A deleted sandbox's samples go with it, and a late sample of it is
	// not stored.
	_, err := e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: p.ID, SandboxID: a.ID, Operation: e.deleteOp(a), Now: e.now()})
	must(t, err)
	e.finishDelete(a, node, e.now())
	must(t, e.s.AddSandboxMetrics(e.ctx, []model.SandboxMetric{sample(a.ID, later.Add(5*time.Second), 3)}))
	if n := count(a.ID); n != 0 {
		t.Errorf("a deleted sandbox has %d samples", n)
	}
	if n := count(b.ID); n != 1 {
		t.Errorf("the other sandbox has %d samples, want 1", n)
	}
}
