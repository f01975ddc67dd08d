package bench

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/cgroups"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/rootfs"
)

// benchConfig is a small real benchmark on runc: Airlock on runc against
// `runc run`, in a fresh short temporary directory.
func benchConfig(t *testing.T) Config {
	t.Helper()
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runc")
	airtest.BusyboxPath(t) // the default template is built from it
	cfg := DefaultConfig()
	cfg.Runs = 2
	cfg.Warmup = 0
	cfg.Runtimes = []string{"runc"}
	cfg.Peers = []string{PeerRunc}
	cfg.Pool = false
	cfg.AgentBinary = airtest.BuildAgent(t)
	// Not t.TempDir(): sandbox sockets live below it, and test names make
	// long paths.
	dir, err := os.MkdirTemp("", "albt-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o711); err != nil { // see Run
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg.TempDir = dir
	return cfg
}

var workDirLine = regexp.MustCompile(`working directory (\S+) \(removed on exit\)`)

// assertCleanedUp checks that Run left nothing behind: no working directory
// (named in its progress output), no mount below it, no cgroup of the raw
// peers (named after it).
func assertCleanedUp(t *testing.T, tempDir, progress string) {
	t.Helper()
	m := workDirLine.FindStringSubmatch(progress)
	if m == nil {
		t.Fatalf("progress does not name the working directory:\n%s", progress)
	}
	work := m[1]
	if filepath.Dir(work) != tempDir {
		t.Errorf("working directory %s is not in %s", work, tempDir)
	}
	if _, err := os.Stat(work); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("working directory %s still there (%v)", work, err)
	}
	if mounts, err := rootfs.MountsUnder(tempDir); err != nil || len(mounts) > 0 {
		t.Errorf("mounts left under %s: %q (%v)", tempDir, mounts, err)
	}
	cg, err := cgroups.Detect()
	if err != nil {
		t.Fatal(err)
	}
	p, err := cgroups.ParsePath("/" + filepath.Base(work))
	if err != nil {
		t.Fatal(err)
	}
	if dirs, err := cg.Existing(p); err != nil || len(dirs) > 0 {
		t.Errorf("cgroup left behind: %q (%v)", dirs, err)
	}
}

func TestRunRunc(t *testing.T) {
	cfg := benchConfig(t)
	var progress bytes.Buffer
	cfg.Progress = &progress
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	assertCleanedUp(t, cfg.TempDir, progress.String())

	if len(rep.Subjects) != 2 {
		t.Fatalf("subjects = %+v", rep.Subjects)
	}
	a, r := rep.Subjects[0], rep.Subjects[1]
	if a.Name != "airlock-runc" || a.Kind != KindAirlock || a.Isolation != environment.IsolationSharedKernel {
		t.Errorf("first subject = %+v", a)
	}
	if r.Name != "runc run" || r.Kind != KindRaw {
		t.Errorf("second subject = %+v", r)
	}
	for _, s := range rep.Subjects {
		st := s.FirstOutput
		if st.N != 2 || len(s.Samples) != 2 || st.Min <= 0 || st.Min > st.P50 || st.P50 > st.P95 || st.P95 > st.Max {
			t.Errorf("%s: implausible stats %+v (samples %v)", s.Name, st, s.Samples)
		}
	}
	if len(a.Phases) != 3 {
		t.Fatalf("airlock phases = %+v", a.Phases)
	}
	for i, smp := range a.Samples {
		if smp < a.Phases[0].Stats.Min {
			t.Errorf("sample %d (%v) is shorter than the fastest create phase %v", i, smp, a.Phases[0].Stats.Min)
		}
	}
	if len(rep.Ratios) != 1 || rep.Ratios[0].Peer != "runc run" || rep.Ratios[0].P50 <= 0 {
		t.Errorf("ratios = %+v", rep.Ratios)
	}
	if !strings.HasPrefix(rep.Template, "sha256:") || rep.Host.CPUs < 1 || rep.Host.Versions["runc"] == "" {
		t.Errorf("report header = %+v", rep)
	}
	if !strings.Contains(progress.String(), "[2/2]") {
		t.Errorf("progress has no line for round 2:\n%s", progress.String())
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + table.String())
}

// cancelWriter cancels a context a little after the first counted round
// starts being reported, so the cancellation lands inside a run.
type cancelWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	cancel context.CancelFunc
	timer  *time.Timer
}

func (w *cancelWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer == nil && bytes.Contains(p, []byte("[1/")) {
		w.timer = time.AfterFunc(40*time.Millisecond, w.cancel)
	}
	return w.buf.Write(p)
}

func TestRunCancelledCleansUp(t *testing.T) {
	cfg := benchConfig(t)
	cfg.Runs = 1000
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &cancelWriter{cancel: cancel}
	cfg.Progress = w
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, cfg)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run after cancel = %v, want context.Canceled", err)
		}
		t.Logf("Run after cancel: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("Run did not return after its context was cancelled")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	assertCleanedUp(t, cfg.TempDir, w.buf.String())
}

// TestRunRuncPool runs the create benchmark with the pool-claim subject:
// every claim must have come from the pool (the run fails otherwise).
func TestRunRuncPool(t *testing.T) {
	cfg := benchConfig(t)
	cfg.Pool = true
	var progress bytes.Buffer
	cfg.Progress = &progress
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	assertCleanedUp(t, cfg.TempDir, progress.String())
	var names []string
	for _, s := range rep.Subjects {
		names = append(names, s.Name+"/"+s.Source)
	}
	if got := strings.Join(names, " "); got != "airlock-runc/cold airlock-runc-pool/pool runc run/" {
		t.Fatalf("subjects = %s", got)
	}
	pool := rep.Subjects[1]
	if pool.FirstOutput.N != 2 || len(pool.Phases) != 3 {
		t.Errorf("pool subject = %+v", pool)
	}
	if len(rep.Ratios) != 2 || rep.Ratios[1].Airlock != "airlock-runc-pool" || rep.Ratios[1].Peer != "runc run" {
		t.Errorf("ratios = %+v", rep.Ratios)
	}
	if len(rep.Targets) != 1 || !strings.Contains(rep.Targets[0].Name, "airlock-runc-pool") {
		t.Errorf("targets = %+v", rep.Targets)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + table.String())
}
