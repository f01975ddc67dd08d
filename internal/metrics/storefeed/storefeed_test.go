package storefeed

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/airlockdev/airlock/internal/metrics"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// countingStore answers the two reads of the metrics' store collector.
type countingStore struct {
	store.Store // nil: any other call panics
	counts      []store.SandboxCount
	pools       []model.Pool
	err         error
}

func (s countingStore) CountSandboxes(context.Context) ([]store.SandboxCount, error) {
	return s.counts, s.err
}

func (s countingStore) ListPools(context.Context) ([]model.Pool, error) { return s.pools, s.err }

func TestFeed(t *testing.T) {
	ctx := context.Background()
	pool := model.NewPoolID()
	st := countingStore{
		counts: []store.SandboxCount{
			{State: model.StateRunning, Runtime: "runc", N: 4},
			{State: model.StatePending, N: 2},
			{State: model.StateCreating, Runtime: "runsc", Pool: pool, N: 1},
		},
		pools: []model.Pool{{ID: pool, Size: 3}},
	}
	got, err := New(st).CountSandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []metrics.SandboxCount{
		{State: model.StateRunning, Environment: "runc", N: 4},
		{State: model.StatePending, N: 2},
		{State: model.StateCreating, Environment: "runsc", Pool: pool, N: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("CountSandboxes = %+v, want %+v", got, want)
	}
	pools, err := New(st).ListPools(ctx)
	if err != nil || !reflect.DeepEqual(pools, st.pools) {
		t.Fatalf("ListPools = %+v, %v", pools, err)
	}

	boom := errors.New("boom")
	if _, err := New(countingStore{err: boom}).CountSandboxes(ctx); !errors.Is(err, boom) {
		t.Fatalf("CountSandboxes of a failing store = %v", err)
	}
}
