package bench

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestRunBurstSmall runs the burst benchmark small on runc: a pool of 3,
// a burst of 3 from 3 clients, two sustained steps of 3 cold creates.
func TestRunBurstSmall(t *testing.T) {
	cfg := benchConfig(t)
	var progress bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := RunBurst(ctx, BurstOptions{
		Runtime: "runc", Size: 3, Clients: 3, MemoryMiB: 64, Steps: []int{1, 2}, StepCreates: 3, Degrade: 1000,
		AgentBinary: cfg.AgentBinary, TempDir: cfg.TempDir, Progress: &progress,
	})
	if err != nil {
		t.Fatalf("RunBurst: %v\nprogress:\n%s", err, progress.String())
	}
	assertCleanedUp(t, cfg.TempDir, progress.String())
	if rep.Fill.Sandboxes != 3 || rep.Fill.PerSecond <= 0 {
		t.Errorf("fill = %+v", rep.Fill)
	}
	// The pool was full and nothing else claimed from it: every create
	// of the burst is a hit.
	if b := rep.Burst; b.Creates != 3 || b.Hits != 3 || b.Misses != 0 || b.Rate.PerSecond <= 0 || b.HitLatency.N != 3 {
		t.Errorf("burst = %+v", b)
	}
	if rep.Refill.Sandboxes != 3-rep.Burst.ReadyAtEnd || rep.Refill.Duration <= 0 {
		t.Errorf("refill = %+v (ready at the burst's end %d)", rep.Refill, rep.Burst.ReadyAtEnd)
	}
	if len(rep.Sustained) != 2 || rep.Sustained[1].Clients != 2 || rep.Sustained[1].Creates != 6 || rep.SustainedBest <= 0 {
		t.Errorf("sustained = %+v, best %v", rep.Sustained, rep.SustainedBest)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + table.String())
}
