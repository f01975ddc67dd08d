package server

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/model"
)

func TestMemTotal(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		content string
		want    int64
		err     string
	}{
		{"MemTotal:       24683648 kB\nMemFree: 1 kB\n", 24683648, ""},
		{"MemFree: 1 kB\n", 0, "no MemTotal"},
		{"MemTotal: lots kB\n", 0, "odd"},
		{"MemTotal: 5 MB\n", 0, "odd"},
		{"MemTotal: 0 kB\n", 0, "odd"},
	} {
		p := filepath.Join(dir, "meminfo")
		if err := os.WriteFile(p, []byte(tt.content), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := memTotalKiB(p)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: %d, %v; want error %q", tt.content, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%q: %d, %v", tt.content, got, err)
		}
	}
	c, err := nodeCapacity(1.5)
	if err != nil || c.CPUs < 1 || c.MemoryMiB < 64 {
		t.Fatalf("nodeCapacity: %+v, %v", c, err)
	}
}

// TestDerivePidsBudget: min(pid_max, threads-max) less 10%, at least 1024,
// kept for the host.
func TestDerivePidsBudget(t *testing.T) {
	for _, tt := range []struct{ pidMax, threadsMax, want int }{
		{32768, 192735, 29492},      // this CI host: pid_max bounds it
		{4194304, 192735, 173462},   // a systemd host: threads-max does
		{4194304, 4194304, 3774874}, // 10% kept
		{8192, 100000, 7168},        // the floor of 1024 kept
		{1024, 100000, 0},           // nothing left
		{301, 301, 0},
	} {
		if got := derivePidsBudget(tt.pidMax, tt.threadsMax); got != tt.want {
			t.Errorf("derivePidsBudget(%d, %d) = %d, want %d", tt.pidMax, tt.threadsMax, got, tt.want)
		}
	}
}

// TestPidsBudget: --pids-budget wins; 0 derives it from the kernel's files
// (a low pid_max is logged); bad files and negative budgets are errors.
func TestPidsBudget(t *testing.T) {
	for _, tt := range []struct {
		name               string
		given              int
		pidMax, threadsMax string // "" : no file
		want               int
		err                string
		warns              bool
	}{
		{"given", 500, "", "", 500, "", false},
		{"negative", -1, "32768", "192735", 0, "must not be negative", false},
		{"derived, pid_max low", 0, "32768\n", "192735\n", 29492, "", true},
		{"derived, systemd host", 0, "4194304\n", "192735\n", 173462, "", false},
		{"no pid_max", 0, "", "192735", 0, "pid_max", false},
		{"garbage", 0, "lots", "192735", 0, "not a positive integer", false},
		{"nothing left", 0, "1000", "192735", 0, "leaves no pids budget", false},
	} {
		dir := t.TempDir()
		for name, content := range map[string]string{"pid_max": tt.pidMax, "threads-max": tt.threadsMax} {
			if content == "" {
				continue
			}
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		var logged strings.Builder
		got, err := pidsBudget(tt.given, dir, slog.New(slog.NewTextHandler(&logged, nil)))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: %d, %v; want error %q", tt.name, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: %d, %v; want %d", tt.name, got, err, tt.want)
		}
		if warned := strings.Contains(logged.String(), "kernel.pid_max bounds the node's pids budget"); warned != tt.warns {
			t.Errorf("%s: warned %t, want %t: %s", tt.name, warned, tt.warns, logged.String())
		}
	}
	// This host's own files.
	if b, err := pidsBudget(0, procSysKernel, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil || b <= 0 {
		t.Fatalf("this host's pids budget: %d, %v", b, err)
	}
}

// TestPoolPids: the pools' pids budget is the share of the node's that
// their memory budget is of the node's memory.
func TestPoolPids(t *testing.T) {
	for _, tt := range []struct {
		c       model.NodeCapacity
		poolMem int
		want    int
	}{
		{model.NodeCapacity{MemoryMiB: 24000, Pids: 29492}, 6000, 7373},
		{model.NodeCapacity{MemoryMiB: 24000, Pids: 29492}, 48000, 29492},
		{model.NodeCapacity{MemoryMiB: 24000, Pids: 29492}, 0, 1},
		{model.NodeCapacity{MemoryMiB: 24000}, 6000, 0},
	} {
		if got := poolPids(tt.c, tt.poolMem); got != tt.want {
			t.Errorf("poolPids(%+v, %d) = %d, want %d", tt.c, tt.poolMem, got, tt.want)
		}
	}
}
