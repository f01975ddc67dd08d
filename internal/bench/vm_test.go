package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/guestboot/guestboottest"
)

func TestParseSmapsRollup(t *testing.T) {
	const in = `55d0c0a00000-7ffd4b9fe000 ---p 00000000 00:00 0                          [rollup]
Rss:              106496 kB
Pss:               94812 kB
Pss_Anon:          12000 kB
Pss_File:          82812 kB
Pss_Shmem:             0 kB
Shared_Clean:      22216 kB
Shared_Dirty:          0 kB
Private_Clean:       200 kB
Private_Dirty:     84080 kB
Referenced:       106496 kB
Anonymous:         12000 kB
`
	u, err := parseSmapsRollup(in)
	if err != nil {
		t.Fatal(err)
	}
	want := VMMemUsage{Rss: 106496 << 10, Pss: 94812 << 10, PrivateDirty: 84080 << 10, PrivateClean: 200 << 10, SharedClean: 22216 << 10}
	if u != want {
		t.Fatalf("parseSmapsRollup = %+v, want %+v", u, want)
	}
	if _, err := parseSmapsRollup("Rss: 1 kB\n"); err == nil {
		t.Fatal("a rollup without Pss parsed")
	}
	if _, err := parseSmapsRollup(strings.Replace(in, "94812 kB", "x kB", 1)); err == nil {
		t.Fatal("a bad number parsed")
	}
}

func TestTimingHandler(t *testing.T) {
	var warn bytes.Buffer
	h := &timingHandler{next: slog.NewTextHandler(&warn, nil).WithAttrs(nil), store: &timingStore{byID: map[string]map[string]time.Duration{}}}
	log := slog.New(h)
	log.Debug("restored the base snapshot", "sandbox", "sb-1", "disk", 3*time.Millisecond, "launch", 60*time.Millisecond, "load", 90*time.Millisecond)
	log.With("component", "x").Debug("guest agent not answering yet", "err", "eof")
	log.Debug("started", "sandbox", "sb-1", "cont", 5*time.Millisecond, "configure", 170*time.Millisecond, "err", nil)
	log.Debug("started", "sandbox", "sb-2", "cont", time.Millisecond)
	log.Warn("something odd")
	got, retries := h.take("sb-1")
	want := map[string]time.Duration{"disk": 3 * time.Millisecond, "launch": 60 * time.Millisecond, "load": 90 * time.Millisecond,
		"cont": 5 * time.Millisecond, "configure": 170 * time.Millisecond}
	if len(got) != len(want) || retries != 1 {
		t.Fatalf("take = %v, %d retries; want %v, 1", got, retries, want)
	}
	for k, d := range want {
		if got[k] != d {
			t.Errorf("%s = %v, want %v", k, got[k], d)
		}
	}
	if _, n := h.take("sb-1"); n != 0 {
		t.Errorf("retries not reset: %d", n)
	}
	if !strings.Contains(warn.String(), "something odd") || strings.Contains(warn.String(), "restored") {
		t.Errorf("passed on: %q; want the warning only", warn.String())
	}
}

func TestBusyboxTree(t *testing.T) {
	bb := airtest.BusyboxPath(t)
	dir := t.TempDir()
	if err := BusyboxTree(dir, bb); err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(filepath.Join(dir, "bin", "sh")); err != nil || target != "busybox" {
		t.Fatalf("bin/sh → %q, %v", target, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "tmp")); err != nil || fi.Mode()&os.ModeSticky == 0 {
		t.Fatalf("tmp: %v %v", fi, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "etc", "passwd")); err != nil || !strings.HasPrefix(string(b), "root:x:0:0:") {
		t.Fatalf("etc/passwd: %q %v", b, err)
	}
}

func TestVMReportOutput(t *testing.T) {
	rep := VMReport{
		Benchmark: "b", Runs: 2, Accel: "tcg", MemoryMiB: 256, DiskBytes: vmDiskBytes,
		Figures: []VMFigure{
			{VMCold, "m", Summarize([]time.Duration{4 * time.Second, 4200 * time.Millisecond})},
			{VMBase, "m", Summarize([]time.Duration{400 * time.Millisecond, 500 * time.Millisecond})},
		},
		Phases:           map[string][]Phase{VMBase: phasesOf(map[string][]time.Duration{"load": {90 * time.Millisecond}, "run": {170 * time.Millisecond}})},
		ConfigureRetries: map[string]float64{VMBase: 0},
		RestoreOverCold:  9.1,
		Memory:           &VMMemoryReport{PerKind: 2, IdleSeconds: 5, Clones: VMMemUsage{N: 2, Pss: 90 << 20}, Cold: VMMemUsage{N: 2, Pss: 260 << 20}},
		Met:              map[string]bool{VMTarget: true},
	}
	var tbl bytes.Buffer
	if err := rep.WriteTable(&tbl); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{VMCold, VMBase, "9.10×", "target ≥ 8×: true", "load", "90.0 MiB", "260.0 MiB"} {
		if !strings.Contains(tbl.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tbl.String())
		}
	}
	// Phases come in phaseOrder.
	if strings.Index(tbl.String(), "  load") > strings.Index(tbl.String(), "  run") {
		t.Errorf("phases out of order:\n%s", tbl.String())
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back VMReport
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Figures[1].Stats.P50 != rep.Figures[1].Stats.P50 || back.Memory.Cold.Pss != 260<<20 || !back.Met[VMTarget] {
		t.Fatalf("JSON round trip lost data: %s", js.String())
	}
}

// TestRunVM runs one tiny round (one idle VM of each kind). It needs root
// and QEMU, and skips without them unless CI is set.
func TestRunVM(t *testing.T) {
	airtest.SkipShort(t, "QEMU")
	ci := os.Getenv("CI") != ""
	if os.Geteuid() != 0 && !ci {
		t.Skip("needs root")
	}
	for _, b := range []string{"qemu-system-x86_64", "qemu-img", "mkfs.ext4"} {
		if _, err := exec.LookPath(b); err != nil {
			if ci {
				t.Fatalf("CI must run the VM benchmark: %s not installed", b)
			}
			t.Skipf("%s not installed", b)
		}
	}
	airtest.RequireRoot(t)
	bb := airtest.BusyboxPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tmp, err := os.MkdirTemp("", "albvm-") // short: sockets live below it
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	var progress bytes.Buffer
	rep, err := RunVM(ctx, VMOptions{Runs: 1, Idle: 1, IdleWait: time.Second, AgentBinary: airtest.BuildAgent(t),
		GuestbootDir: guestboottest.Cache(t), Busybox: bb, TempDir: tmp, Progress: &progress})
	t.Log(progress.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Figures {
		if f.Stats.N != 1 || f.Stats.P50 <= 0 {
			t.Errorf("figure %q: %+v", f.Name, f.Stats)
		}
	}
	if rep.Memory == nil || rep.Memory.Clones.N != 1 || rep.Memory.Cold.N != 1 || rep.Memory.Cold.Pss <= 0 {
		t.Errorf("idle memory: %+v", rep.Memory)
	}
	if len(rep.Phases[VMBase]) == 0 || len(rep.Phases[VMProfile]) == 0 {
		t.Errorf("phases: %+v", rep.Phases)
	}
	// Everything is gone: the temporary directory is empty and no QEMU
	// mentions it.
	if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
		t.Errorf("left in %s: %v", tmp, entries)
	}
	if pids := processesMentioning(tmp); len(pids) > 0 {
		t.Errorf("QEMU processes left: %v", pids)
	}
}

func TestGuestRAMUsage(t *testing.T) {
	const smaps = `7f0000000000-7f0010000000 rw-p 00000000 fd:01 123 /tmp/x/state/.base/k/memory
Size:             262144 kB
Rss:               90000 kB
Pss:               50000 kB
Private_Dirty:     40000 kB
7f0010000000-7f0020000000 rwxp 00000000 00:00 0 
Size:             262144 kB
Pss:               20000 kB
Private_Dirty:     20000 kB
7f0020000000-7f0020001000 r--p 00000000 fd:01 99 /usr/lib/libc.so.6
Pss:                 100 kB
Private_Dirty:         4 kB
`
	pss, dirty := guestRAMUsage(smaps, func(p string) bool { return strings.HasPrefix(p, "/tmp/x/") && filepath.Base(p) == "memory" })
	if pss != 50000<<10 || dirty != 40000<<10 {
		t.Fatalf("guestRAMUsage = %d, %d; want the memory mapping's 50000 kB and 40000 kB", pss>>10, dirty>>10)
	}
}
