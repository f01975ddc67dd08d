package reaper

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/pgtest"
	"github.com/airlockdev/airlock/internal/store/postgres"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// BenchmarkPass measures one reaper pass in the steady state (nothing due)
// over a store of many sandboxes, most of them deleted, 200 running on the
// node with idle limits and deadlines not yet reached: the pass reads two
// indexes and writes nothing, so its cost does not grow with the table.
func BenchmarkPass(b *testing.B) {
	stores := []struct {
		name string
		open func(testing.TB) sqlStore
	}{
		{"sqlite", openSQLite},
		{"postgres", func(t testing.TB) sqlStore {
			st, err := postgres.Open(context.Background(), pgtest.DSN(t), slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		}},
	}
	for _, db := range stores {
		for _, total := range []int{1000, 10000} {
			b.Run(fmt.Sprintf("%s/sandboxes=%d", db.name, total), func(b *testing.B) {
				benchPass(b, newFixtureOn(b, db.open(b)), total)
			})
		}
	}
}

func benchPass(b *testing.B, f *fixture, total int) {
	ctx := context.Background()
	to := model.Timeouts{Idle: time.Hour, Deadline: t0.Add(2 * time.Hour), OnTimeout: model.OnTimeoutSuspend}
	for i := range total {
		sb := model.Sandbox{
			ID: model.NewSandboxID(), ProjectID: f.proj, Template: f.tpl, Resources: model.DefaultResources(),
			State: model.StatePending, Timeouts: to, LastActivity: f.now, CreatedAt: f.now, UpdatedAt: f.now,
		}
		op := model.Operation{ID: model.NewOperationID(), ProjectID: f.proj, SandboxID: sb.ID, Kind: model.OpCreate,
			State: model.OpPending, CreatedAt: f.now, UpdatedAt: f.now}
		if err := f.st.CreateSandbox(ctx, sb, policy.Spec{}, op, nil); err != nil {
			b.Fatal(err)
		}
		state := model.StateDeleted
		if i < 200 {
			state = model.StateRunning
		}
		// Straight to the end state (IDs are plain [a-z0-9_]): the
		// benchmark is about the reads.
		for _, q := range []string{
			fmt.Sprintf(`UPDATE sandboxes SET state = '%s', node_id = '%s' WHERE id = '%s'`, state, f.node, sb.ID),
			fmt.Sprintf(`UPDATE operations SET state = 'succeeded', finished_at = 1 WHERE id = '%s'`, op.ID),
		} {
			if _, err := f.st.DB().ExecContext(ctx, q); err != nil {
				b.Fatal(err)
			}
		}
	}
	r, err := New(Config{Store: f.st, Node: f.node, Now: f.clock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		res, err := r.Pass(ctx)
		if err != nil || res != (Result{}) {
			b.Fatalf("Pass = %+v, %v; want nothing due", res, err)
		}
	}
}

// BenchmarkFlush measures one activity flush (TouchSandboxes) of 200
// sandboxes touched since the last one: what a busy node writes every few
// seconds instead of a row per API call or output chunk.
func BenchmarkFlush(b *testing.B) {
	f := newFixtureOn(b, openSQLite(b))
	ctx := context.Background()
	at := map[model.SandboxID]time.Time{}
	for range 200 {
		sb := f.sandbox(model.Timeouts{Idle: time.Hour, OnTimeout: model.OnTimeoutDelete}, model.StatePending)
		at[sb.ID] = f.now
	}
	b.ResetTimer()
	for b.Loop() {
		for id, t := range at {
			at[id] = t.Add(time.Millisecond) // forward: every row is written
		}
		n, err := f.st.TouchSandboxes(ctx, at)
		if err != nil || n != len(at) {
			b.Fatalf("TouchSandboxes = %d, %v", n, err)
		}
	}
}

// BenchmarkPurge measures one purge run over 5000 deleted sandboxes (each
// with a finished create and delete) in batches of DefaultPurgeBatch: run it
// with -benchtime 1x, as each iteration builds its own store.
func BenchmarkPurge(b *testing.B) {
	const deleted = 5000
	for b.Loop() {
		b.StopTimer()
		f := newFixtureOn(b, openSQLite(b))
		ctx := context.Background()
		for range deleted {
			sb := model.Sandbox{
				ID: model.NewSandboxID(), ProjectID: f.proj, Template: f.tpl, Resources: model.DefaultResources(),
				State: model.StatePending, Timeouts: model.Timeouts{OnTimeout: model.OnTimeoutDelete}, CreatedAt: f.now, UpdatedAt: f.now,
			}
			op := model.Operation{ID: model.NewOperationID(), ProjectID: f.proj, SandboxID: sb.ID, Kind: model.OpCreate,
				State: model.OpPending, CreatedAt: f.now, UpdatedAt: f.now}
			if err := f.st.CreateSandbox(ctx, sb, policy.Spec{}, op, nil); err != nil {
				b.Fatal(err)
			}
			for _, q := range []string{
				fmt.Sprintf(`UPDATE sandboxes SET state = 'deleted', node_id = '%s' WHERE id = '%s'`, f.node, sb.ID),
				fmt.Sprintf(`UPDATE operations SET state = 'succeeded', finished_at = 1 WHERE id = '%s'`, op.ID),
			} {
				if _, err := f.st.DB().ExecContext(ctx, q); err != nil {
					b.Fatal(err)
				}
			}
		}
		f.now = f.now.Add(DefaultRetention + time.Hour)
		p, err := NewPurger(PurgeConfig{Store: f.st, Now: f.clock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		tot, err := p.Once(ctx)
		if err != nil || tot.Sandboxes != deleted {
			b.Fatalf("Once = %+v, %v", tot, err)
		}
	}
}
