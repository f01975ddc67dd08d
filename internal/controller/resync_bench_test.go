package controller

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime/oci"
)

// BenchmarkResync measures one resync pass over many sandboxes (item 6 of
// the lifecycle issue): its time and how many times it executes the
// runtime binary (counted by a wrapper script in front of it). Running
// sandboxes are observed from /proc and the runtime's state files, so a
// pass should exec the runtime once (its list), not once per sandbox.
//
//	go test -run '^$' -bench Resync -benchtime 20x ./internal/controller
//
// AIRLOCK_BENCH_RESYNC_N sets the number of sandboxes (default 200).
func BenchmarkResync(b *testing.B) {
	n := 200
	if v := os.Getenv("AIRLOCK_BENCH_RESYNC_N"); v != "" {
		if _, err := fmt.Sscan(v, &n); err != nil {
			b.Fatalf("AIRLOCK_BENCH_RESYNC_N: %v", err)
		}
	}
	for _, flavor := range []string{"runc", "runsc"} {
		for _, paused := range []bool{false, true} {
			name := fmt.Sprintf("%s/%d", flavor, n)
			if paused {
				name += "/half-paused"
			}
			b.Run(name, func(b *testing.B) { benchResync(b, flavor, n, paused) })
		}
	}
}

func benchResync(b *testing.B, flavor string, n int, halfPaused bool) {
	real, err := exec.LookPath(flavor)
	if err != nil {
		b.Skipf("%s not installed", flavor)
	}
	dir := b.TempDir()
	counter := filepath.Join(dir, "execs")
	wrapper := filepath.Join(dir, flavor)
	// Records the subcommand: the first argument that is neither a flag
	// nor a path (the value of --root).
	script := fmt.Sprintf("#!/bin/sh\nfor a; do case $a in -*|/*) ;; *) echo $a >> %s; break;; esac; done\nexec %s \"$@\"\n", counter, real)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		b.Fatal(err)
	}
	e := newEnvWith(b, flavor, nil, Config{Parallel: 4}, func(c *oci.Config) { c.Binary = wrapper })
	e.run()
	ids := make([]model.SandboxID, n)
	ops := make([]model.OperationID, n)
	for i := range ids {
		ids[i], ops[i] = e.create()
	}
	for i, op := range ops {
		if got := e.waitOp(op); got.State != model.OpSucceeded {
			b.Fatalf("create %d: %+v", i, got)
		}
	}
	if halfPaused {
		pauses := make([]model.OperationID, 0, n/2)
		for _, id := range ids[:n/2] {
			pauses = append(pauses, e.request(id, model.OpPause))
		}
		for _, op := range pauses {
			if got := e.waitOp(op); got.State != model.OpSucceeded {
				b.Fatalf("pause: %+v", got)
			}
		}
	}
	ctx := context.Background()
	// The first pass after a start fills the runtime's cache of live
	// processes (a restarted server asks the runtime once per sandbox).
	if err := e.ctrl.Resync(ctx); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(counter, nil, 0o644); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if err := e.ctrl.Resync(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	data, err := os.ReadFile(counter)
	if err != nil {
		b.Fatal(err)
	}
	lines := strings.Fields(string(data))
	b.ReportMetric(float64(len(lines))/float64(b.N), "execs/op")
	subs := map[string]int{}
	for _, l := range lines {
		subs[l]++
	}
	b.Logf("%d sandboxes (half paused: %v): runtime execs over %d passes by subcommand: %v", n, halfPaused, b.N, subs)
	dels := make([]model.OperationID, 0, n)
	for _, id := range ids {
		dels = append(dels, e.delete(id))
	}
	for _, op := range dels {
		if got := e.waitOp(op); got.State != model.OpSucceeded {
			b.Fatalf("delete: %+v", got)
		}
	}
}
