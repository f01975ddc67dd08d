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
)

// BenchmarkPass measures one reaper pass in the steady state (nothing due)
// over a store of many sandboxes, most of them deleted, 200 running on the
// node with idle limits and deadlines not yet reached: the pass reads two
// indexes and writes nothing.
func BenchmarkPass(b *testing.B) {
	for _, total := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("sandboxes=%d", total), func(b *testing.B) {
			t := &testing.T{}
			f := newFixture(t)
			ctx := context.Background()
			to := model.Timeouts{Idle: time.Hour, Deadline: t0.Add(2 * time.Hour), OnTimeout: model.OnTimeoutSuspend}
			for i := range total {
				sb := model.Sandbox{
					ID: model.NewSandboxID(), ProjectID: f.proj, Template: f.tpl, Resources: model.DefaultResources(),
					State: model.StatePending, Timeouts: to, LastActivity: f.now, CreatedAt: f.now, UpdatedAt: f.now,
				}
				op := model.Operation{ID: model.NewOperationID(), ProjectID: f.proj, SandboxID: sb.ID, Kind: model.OpCreate,
					State: model.OpSucceeded, CreatedAt: f.now, UpdatedAt: f.now}
				op.State = model.OpPending
				if err := f.st.CreateSandbox(ctx, sb, policy.Spec{}, op, nil); err != nil {
					b.Fatal(err)
				}
				state := model.StateDeleted
				if i < 200 {
					state = model.StateRunning
				}
				// Straight to the end state: the benchmark is about reads.
				db := f.st.DB()
				if _, err := db.ExecContext(ctx, `UPDATE sandboxes SET state = ?, node_id = ? WHERE id = ?`, string(state), string(f.node), string(sb.ID)); err != nil {
					b.Fatal(err)
				}
				if _, err := db.ExecContext(ctx, `UPDATE operations SET state = 'succeeded', finished_at = 1 WHERE id = ?`, string(op.ID)); err != nil {
					b.Fatal(err)
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
		})
	}
}
