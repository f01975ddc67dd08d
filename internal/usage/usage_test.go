package usage

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

type fakeStore struct {
	list  []model.Sandbox
	added []model.SandboxMetric
}

func (f *fakeStore) ListSandboxesOnNode(context.Context, model.NodeID) ([]model.Sandbox, error) {
	return f.list, nil
}

func (f *fakeStore) AddSandboxMetrics(_ context.Context, m []model.SandboxMetric) error {
	for _, x := range m {
		if err := x.Validate(); err != nil {
			return err
		}
	}
	f.added = append(f.added, m...)
	return nil
}

type fakeReader map[model.SandboxID]runtime.Usage

// hang is the ID of a sandbox whose reading never answers (a frozen
// guest): only the read timeout ends it.
const hang model.SandboxID = "sbx_hanghanghanghanghanghangha"

func (f fakeReader) Usage(ctx context.Context, sb model.Sandbox) (runtime.Usage, error) {
	if sb.ID == hang {
		<-ctx.Done()
		return runtime.Usage{}, ctx.Err()
	}
	u, ok := f[sb.ID]
	if !ok {
		return runtime.Usage{}, fmt.Errorf("sandbox %s: %w", sb.ID, runtime.ErrNotFound)
	}
	return u, nil
}

func TestSample(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	now := t0
	sb := func(state model.SandboxState, cpus int) model.Sandbox {
		return model.Sandbox{ID: model.NewSandboxID(), State: state, Resources: model.Resources{CPUs: cpus, MemoryMiB: 512, DiskMiB: 1024}}
	}
	busy, frozen, gone, suspended := sb(model.StateRunning, 2), sb(model.StatePaused, 1), sb(model.StateRunning, 1), sb(model.StateSuspended, 1)
	st := &fakeStore{list: []model.Sandbox{busy, frozen, gone, suspended}}
	rd := fakeReader{
		busy.ID:      {CPU: 10 * time.Second, MemUsed: 100 << 20, MemCache: 5 << 20, DiskUsed: 3 << 20, DiskTotal: 1 << 30},
		frozen.ID:    {CPU: time.Second, MemUsed: 50 << 20},
		suspended.ID: {CPU: time.Second},
	}
	s, err := New(Config{Store: st, Reader: rd, Node: "node_x", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The first reading is the base: nothing stored.
	if n, err := s.Sample(ctx); err != nil || n != 0 {
		t.Fatalf("first sample: %d, %v", n, err)
	}
	now = now.Add(5 * time.Second)
	u := rd[busy.ID]
	u.CPU += 5 * time.Second // 5 s of CPU over 5 s on 2 CPUs: 50 %
	rd[busy.ID] = u
	if n, err := s.Sample(ctx); err != nil || n != 2 {
		t.Fatalf("second sample: %d, %v", n, err)
	}
	want := []model.SandboxMetric{
		{SandboxID: busy.ID, At: now, CPUCount: 2, CPUUsedPct: 50, MemUsed: 100 << 20, MemCache: 5 << 20, MemTotal: 512 << 20, DiskUsed: 3 << 20, DiskTotal: 1 << 30},
		{SandboxID: frozen.ID, At: now, CPUCount: 1, CPUUsedPct: 0, MemUsed: 50 << 20, MemTotal: 512 << 20},
	}
	if len(st.added) != 2 || st.added[0] != want[0] || st.added[1] != want[1] {
		t.Fatalf("stored %+v\nwant %+v", st.added, want)
	}
	// A CPU reading below the last (the sandbox was made again: a wake)
	// starts a new base; an overshoot of the quota is clipped at 100 %.
	now = now.Add(5 * time.Second)
	rd[busy.ID] = runtime.Usage{CPU: time.Second}
	rd[frozen.ID] = runtime.Usage{CPU: time.Second + 6*time.Second}
	st.added = nil
	if n, err := s.Sample(ctx); err != nil || n != 1 || st.added[0].SandboxID != frozen.ID || st.added[0].CPUUsedPct != 100 {
		t.Fatalf("third sample: %d, %v, %+v", n, err, st.added)
	}
	// A sandbox no longer listed leaves no base behind.
	st.list = []model.Sandbox{busy}
	if _, err := s.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.prev[frozen.ID]; ok || len(s.prev) != 1 {
		t.Errorf("bases kept: %v", s.prev)
	}
}

// TestSampleReadTimeout: a reading that does not answer is given up after
// ReadTimeout; the other sandboxes are sampled all the same.
func TestSampleReadTimeout(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	ok := model.Sandbox{ID: model.NewSandboxID(), State: model.StateRunning, Resources: model.Resources{CPUs: 1, MemoryMiB: 256}}
	st := &fakeStore{list: []model.Sandbox{{ID: hang, State: model.StateRunning}, ok}}
	rd := fakeReader{ok.ID: {CPU: time.Second}}
	s, err := New(Config{Store: st, Reader: rd, Node: "node_x", ReadTimeout: 10 * time.Millisecond, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := s.Sample(context.Background()); err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
		now = now.Add(5 * time.Second)
	}
	if len(st.added) != 1 || st.added[0].SandboxID != ok.ID {
		t.Fatalf("stored %+v, want one sample of %s", st.added, ok.ID)
	}
	if !s.failing[hang] {
		t.Error("the hung reading was not noted (logged once)")
	}
}

type pruneStore struct {
	before []time.Time
	err    error
}

func (p *pruneStore) DeleteSandboxMetricsBefore(_ context.Context, before time.Time) (int, error) {
	p.before = append(p.before, before)
	return 3, p.err
}

// TestPrune: one pass removes what is older than Retention.
func TestPrune(t *testing.T) {
	now := time.Date(2026, 12, 8, 1, 0, 0, 0, time.UTC)
	st := &pruneStore{}
	if n, err := Prune(context.Background(), st, now); err != nil || n != 3 || len(st.before) != 1 || !st.before[0].Equal(now.Add(-Retention)) {
		t.Fatalf("Prune = %d, %v; deleted before %v, want %v", n, err, st.before, now.Add(-Retention))
	}
	st.err = errors.New("down")
	if _, err := Prune(context.Background(), st, now); !errors.Is(err, st.err) {
		t.Fatalf("Prune with a failing store: %v", err)
	}
}
