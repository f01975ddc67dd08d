package oci

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

// suspendFixture is a started sandbox with a file written in it.
type suspendFixture struct {
	cfg  Config
	spec runtime.Spec
}

func newSuspendFixture(t *testing.T, flavor Flavor, diskBytes int64) (*Runtime, suspendFixture) {
	t.Helper()
	airtest.RequireRoot(t)
	cfg := testConfig(t, flavor)
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	spec := runtime.Spec{ID: model.NewSandboxID(), RootFS: runtime.RootFS{Lower: airtest.BusyboxRootfs(t)}, AgentBinary: airtest.BuildAgent(t),
		Resources: runtime.Resources{CPUs: 1, MemoryBytes: 256 << 20, PidsLimit: 64, DiskBytes: diskBytes}}
	t.Cleanup(func() {
		if err := r.Delete(context.Background(), spec.ID); err != nil {
			t.Errorf("Delete: %v", err)
		}
		if dirExists(r.dirs(spec.ID).state) {
			t.Errorf("state dir left after Delete")
		}
		if err := r.ReleaseAgentFS(context.Background()); err != nil {
			t.Errorf("ReleaseAgentFS: %v", err)
		}
	})
	ctx := testCtx(t)
	if err := r.Create(ctx, spec); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if err := r.Start(ctx, spec.ID); err != nil {
		t.Fatalf("Start: %v", err)
	}
	runIn(t, r, spec.ID, "sh", "-c", "echo kept > /kept.txt")
	return r, suspendFixture{cfg: cfg, spec: spec}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// runIn runs a command in the sandbox over a fresh agent connection and
// returns its stdout.
func runIn(t testing.TB, r *Runtime, id model.SandboxID, args ...string) string {
	t.Helper()
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) { return r.DialAgent(ctx, id) }, slog.New(slog.DiscardHandler))
	defer c.Close()
	res, err := c.Run(testCtx(t), agentproto.StartRequest{ID: model.NewProcessID().String(), Args: args})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("run %q: %+v, %v", args, res, err)
	}
	return string(res.Stdout)
}

// TestSuspendFinishesAfterCrash leaves a suspend at each step a crash of
// the server can stop it at, then checks that a new Runtime value (a
// restarted server) refuses a Create without Restore, finishes the suspend
// with Suspend, and that the sandbox wakes with its file.
func TestSuspendFinishesAfterCrash(t *testing.T) {
	steps := []struct {
		name string
		do   func(ctx context.Context, r *Runtime, id model.SandboxID) error
	}{
		{"MarkerWritten", func(ctx context.Context, r *Runtime, id model.SandboxID) error {
			// A crash right after the marker: the sandbox still runs.
			return writeFileAtomic(filepath.Join(r.dirs(id).state, suspendingName), nil)
		}},
		{"ProcessesGone", func(ctx context.Context, r *Runtime, id model.SandboxID) error {
			// runc, crun: after the container's removal; runsc: after the
			// checkpoint (the sandbox exited), before the clean-up.
			st, err := r.state(ctx, id)
			if err != nil {
				return err
			}
			d := r.dirs(id)
			if err := writeFileAtomic(filepath.Join(d.state, suspendingName), nil); err != nil {
				return err
			}
			if r.flavor == FlavorRunsc {
				return r.checkpoint(ctx, id, d, st.Phase)
			}
			return r.removeContainer(ctx, id)
		}},
		{"ReleasedWithoutManifest", func(ctx context.Context, r *Runtime, id model.SandboxID) error {
			st, err := r.state(ctx, id)
			if err != nil {
				return err
			}
			d := r.dirs(id)
			if err := writeFileAtomic(filepath.Join(d.state, suspendingName), nil); err != nil {
				return err
			}
			if r.flavor == FlavorRunsc {
				if err := r.checkpoint(ctx, id, d, st.Phase); err != nil {
					return err
				}
			}
			return r.releaseRunning(ctx, id)
		}},
	}
	for _, flavor := range allFlavors {
		for _, step := range steps {
			t.Run(string(flavor)+"/"+step.name, func(t *testing.T) {
				t.Parallel()
				r, fx := newSuspendFixture(t, flavor, 64<<20)
				ctx := testCtx(t)
				if err := step.do(ctx, r, fx.spec.ID); err != nil {
					t.Fatalf("making the crash state: %v", err)
				}
				r2, err := New(fx.cfg)
				if err != nil {
					t.Fatal(err)
				}
				if step.name != "MarkerWritten" {
					if err := r2.Create(ctx, fx.spec); err == nil {
						t.Fatal("Create without Restore over a half-suspended sandbox succeeded")
					}
				}
				snap, err := r2.Suspend(ctx, fx.spec.ID)
				if err != nil {
					t.Fatalf("Suspend after the crash: %v", err)
				}
				if ids, err := r2.List(ctx); err != nil || !slices.Contains(ids, fx.spec.ID) {
					t.Fatalf("List = %v, %v", ids, err)
				}
				wake := fx.spec
				wake.Restore = &snap
				if err := r2.Create(ctx, wake); err != nil {
					t.Fatalf("Create with Restore: %v", err)
				}
				if err := r2.Start(ctx, fx.spec.ID); err != nil {
					t.Fatalf("Start: %v", err)
				}
				if got := runIn(t, r2, fx.spec.ID, "cat", "/kept.txt"); got != "kept\n" {
					t.Fatalf("file after wake = %q", got)
				}
			})
		}
	}
}

// TestRestoreFinishesAfterCrash: a restore that made the container but
// crashed before it consumed the snapshot is finished by a repeated Create
// with Restore (a no-op for the container), and the sandbox suspends
// again afterwards.
func TestRestoreFinishesAfterCrash(t *testing.T) {
	for _, flavor := range allFlavors {
		t.Run(string(flavor), func(t *testing.T) {
			t.Parallel()
			r, fx := newSuspendFixture(t, flavor, 0)
			ctx := testCtx(t)
			snap, err := r.Suspend(ctx, fx.spec.ID)
			if err != nil {
				t.Fatalf("Suspend: %v", err)
			}
			wake := fx.spec
			wake.Restore = &snap
			d := r.dirs(fx.spec.ID)
			if _, err := r.checkRestore(wake, d); err != nil {
				t.Fatal(err)
			}
			if err := r.restore(ctx, wake, d); err != nil { // no consumeSnapshot: the crash
				t.Fatalf("restore: %v", err)
			}
			if !hasSnapshot(d) {
				t.Fatal("the crash state has no snapshot files")
			}
			if err := r.Create(ctx, wake); err != nil {
				t.Fatalf("Create with Restore again: %v", err)
			}
			if err := r.Start(ctx, fx.spec.ID); err != nil {
				t.Fatalf("Start: %v", err)
			}
			if !hasSnapshot(d) {
				t.Error("the snapshot went before the woken sandbox answered")
			}
			if err := r.ForgetSnapshot(ctx, fx.spec.ID); err != nil {
				t.Fatal(err)
			}
			if hasSnapshot(d) {
				t.Error("ForgetSnapshot left the snapshot")
			}
			if got := runIn(t, r, fx.spec.ID, "cat", "/kept.txt"); got != "kept\n" {
				t.Fatalf("file after wake = %q", got)
			}
			snap2, err := r.Suspend(ctx, fx.spec.ID)
			if err != nil {
				t.Fatalf("Suspend after wake: %v", err)
			}
			if !snap2.CreatedAt.After(snap.CreatedAt) {
				t.Errorf("second snapshot %+v is not newer than the first %+v", snap2, snap)
			}
		})
	}
}

// TestCreateRefusesWrongSnapshot: a snapshot of another flavor's format is
// refused with ErrNotSupported, and the snapshot stays usable.
func TestCreateRefusesWrongSnapshot(t *testing.T) {
	r, fx := newSuspendFixture(t, FlavorRunc, 0)
	ctx := testCtx(t)
	snap, err := r.Suspend(ctx, fx.spec.ID)
	if err != nil {
		t.Fatal(err)
	}
	foreign := snap
	foreign.Kind, foreign.Format = model.SnapshotMemory, FormatRunscCheckpoint
	wrong := fx.spec
	wrong.Restore = &foreign
	if err := r.Create(ctx, wrong); !errors.Is(err, runtime.ErrNotSupported) {
		t.Fatalf("Create restoring a runsc snapshot on runc = %v, want ErrNotSupported", err)
	}
	withDisk := fx.spec
	withDisk.Restore = &snap
	withDisk.Resources.DiskBytes = 64 << 20
	if err := r.Create(ctx, withDisk); err == nil {
		t.Fatal("Create restoring a snapshot without a disk image with a disk limit succeeded")
	}
	if again, err := r.Suspend(ctx, fx.spec.ID); err != nil || again != snap {
		t.Fatalf("Suspend after refused restores = %+v, %v; want %+v", again, err, snap)
	}
	if _, err := os.Stat(filepath.Join(r.dirs(fx.spec.ID).upper, "kept.txt")); err != nil {
		t.Fatalf("the kept file after refused restores: %v", err)
	}
}

// BenchmarkSuspendWake measures, per flavor, Suspend of a started sandbox
// and its wake: Create with Restore, Start and the first command's answer
// (a fresh agent connection), and for runsc the bare `runsc checkpoint`
// and `runsc restore` inside them. It reports p50 of each.
func BenchmarkSuspendWake(b *testing.B) {
	for _, flavor := range []Flavor{FlavorRunc, FlavorRunsc} {
		b.Run(string(flavor), func(b *testing.B) {
			cfg := testConfig(b, flavor)
			rec := &durationRecorder{}
			cfg.Logger = slog.New(rec)
			r, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			ctx := testCtx(b)
			spec := runtime.Spec{ID: model.NewSandboxID(), RootFS: runtime.RootFS{Lower: airtest.BusyboxRootfs(b)}, AgentBinary: airtest.BuildAgent(b),
				Resources: runtime.Resources{CPUs: 1, MemoryBytes: 256 << 20, PidsLimit: 64, DiskBytes: 128 << 20}}
			b.Cleanup(func() {
				_ = r.Delete(context.Background(), spec.ID)
				_ = r.ReleaseAgentFS(context.Background())
			})
			if err := r.Create(ctx, spec); err != nil {
				b.Fatal(err)
			}
			if err := r.Start(ctx, spec.ID); err != nil {
				b.Fatal(err)
			}
			runIn(b, r, spec.ID, "sh", "-c", "echo kept > /kept.txt")
			var suspends, wakes []time.Duration
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				snap, err := r.Suspend(ctx, spec.ID)
				if err != nil {
					b.Fatal(err)
				}
				suspends = append(suspends, time.Since(start))
				wake := spec
				wake.Restore = &snap
				start = time.Now()
				if err := r.Create(ctx, wake); err != nil {
					b.Fatal(err)
				}
				if err := r.Start(ctx, spec.ID); err != nil {
					b.Fatal(err)
				}
				if got := runIn(b, r, spec.ID, "cat", "/kept.txt"); got != "kept\n" {
					b.Fatalf("after wake: %q", got)
				}
				wakes = append(wakes, time.Since(start))
			}
			b.StopTimer()
			b.ReportMetric(p50(suspends), "suspend-p50-ms")
			b.ReportMetric(p50(wakes), "wake-p50-ms")
			if flavor == FlavorRunsc {
				b.ReportMetric(p50(rec.get("runsc checkpoint")), "bare-checkpoint-p50-ms")
				b.ReportMetric(p50(rec.get("runsc restore")), "bare-restore-p50-ms")
			}
			b.Logf("%s: suspend %v; wake %v", flavor, suspends, wakes)
		})
	}
}

func p50(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return float64(s[len(s)/2].Microseconds()) / 1000
}

// durationRecorder is a slog handler that records the "took" attribute
// of each message.
type durationRecorder struct {
	mu   sync.Mutex
	took map[string][]time.Duration
}

func (d *durationRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (d *durationRecorder) WithAttrs([]slog.Attr) slog.Handler       { return d }
func (d *durationRecorder) WithGroup(string) slog.Handler            { return d }
func (d *durationRecorder) Handle(_ context.Context, rec slog.Record) error {
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "took" {
			d.mu.Lock()
			if d.took == nil {
				d.took = map[string][]time.Duration{}
			}
			d.took[rec.Message] = append(d.took[rec.Message], a.Value.Duration())
			d.mu.Unlock()
		}
		return true
	})
	return nil
}

func (d *durationRecorder) get(msg string) []time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.took[msg])
}
