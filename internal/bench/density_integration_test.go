package bench

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestRunDensitySmall measures 3 idle runc sandboxes and 3 idle `runc run`
// containers, and checks that all of them are gone afterwards.
func TestRunDensitySmall(t *testing.T) {
	cfg := benchConfig(t)
	var progress bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := RunDensity(ctx, DensityOptions{
		Runtimes: []string{"runc"}, Count: 3, Idle: time.Second, Peers: true,
		AgentBinary: cfg.AgentBinary, TempDir: cfg.TempDir, Progress: &progress,
	})
	if err != nil {
		t.Fatalf("RunDensity: %v\nprogress:\n%s", err, progress.String())
	}
	assertCleanedUp(t, cfg.TempDir, progress.String())
	if len(rep.Rows) != 2 || rep.Rows[0].Name != "airlock-runc" || rep.Rows[1].Name != "runc run --detach" {
		t.Fatalf("rows = %+v", rep.Rows)
	}
	for _, r := range rep.Rows {
		// Every sandbox runs at least one process (the agent, or sleep)
		// that has memory in its cgroup.
		if r.Count != 3 || r.Procs < 1 || r.PssMiB <= 0 || r.CgroupMiB <= 0 || r.FootprintMiB < r.PssMiB {
			t.Errorf("row %+v", r)
		}
	}
	if c := rep.Cleanup; c.Containers+c.Cgroups+c.Mounts != 0 {
		t.Errorf("cleanup = %+v", c)
	}
	if len(rep.Targets) != 1 {
		t.Errorf("targets = %+v", rep.Targets)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + table.String())
}
