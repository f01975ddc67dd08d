package bench

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/rootfs"
)

// TestRunForkRunc: a small fork bench on runc measures every figure,
// reports a filesystem fork, and leaves nothing below its directory.
func TestRunForkRunc(t *testing.T) {
	cfg := benchConfig(t)
	var progress bytes.Buffer
	opts := ForkOptions{ServerRuns: ServerRuns{Runtimes: []string{"runc"}, Runs: 1, AgentBinary: cfg.AgentBinary, TempDir: cfg.TempDir, Progress: &progress}, Count: 2}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := RunFork(ctx, opts)
	if err != nil {
		t.Fatalf("RunFork: %v\nprogress:\n%s", err, progress.String())
	}
	if len(rep.Subjects) != 1 {
		t.Fatalf("subjects = %+v", rep.Subjects)
	}
	s := rep.Subjects[0]
	if s.Runtime != "runc" || s.Kind != "filesystem" {
		t.Fatalf("subject %+v", s)
	}
	for name, st := range map[string]Stats{"snapshot": s.Snapshot, "from snapshot": s.FromSnapshot, "cold": s.Cold} {
		if st.N != 1 || st.Min <= 0 {
			t.Errorf("%s: implausible stats %+v", name, st)
		}
	}
	if s.Fork.N != 2 || s.Fork.Min <= 0 || s.ForkOverCold <= 0 {
		t.Errorf("fork: implausible stats %+v (ratio %v)", s.Fork, s.ForkOverCold)
	}
	if left, err := os.ReadDir(cfg.TempDir); err != nil || len(left) > 0 {
		t.Errorf("left in %s: %v (%v)", cfg.TempDir, left, err)
	}
	if mounts, err := rootfs.MountsUnder(cfg.TempDir); err != nil || len(mounts) > 0 {
		t.Errorf("mounts left under %s: %q (%v)", cfg.TempDir, mounts, err)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + table.String())
}
