package server

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/procfs"
)

// DefaultMemoryOvercommit is the default of Options.MemoryOvercommit.
const DefaultMemoryOvercommit = 1.0

// nodeCapacity is what one sandbox may ask for on this host: its CPUs, and
// its memory times overcommit.
func nodeCapacity(overcommit float64) (model.NodeCapacity, error) {
	memKiB, err := memTotalKiB("/proc/meminfo")
	if err != nil {
		return model.NodeCapacity{}, err
	}
	return model.NodeCapacity{
		CPUs:      runtime.NumCPU(),
		MemoryMiB: int(float64(memKiB>>10) * overcommit),
	}, nil
}

// memTotalKiB reads MemTotal from a meminfo file.
func memTotalKiB(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read host memory: %w", err)
	}
	n, err := procfs.SizeField(string(data), "MemTotal")
	if err != nil {
		return 0, fmt.Errorf("read host memory from %s: %w", path, err)
	}
	if n <= 0 {
		return 0, fmt.Errorf("read host memory from %s: odd MemTotal of %d bytes", path, n)
	}
	return n >> 10, nil
}

// procSysKernel is where the host's kernel limits are read.
const procSysKernel = "/proc/sys/kernel"

// The host's share of its process table: a node's pids budget is what
// min(pid_max, threads-max) leaves after pidsReservePercent of it, and at
// least minPidsReserve, are kept for the host itself (its daemons, the
// server's threads, the runtime, mount and network helpers a create
// forks outside any sandbox's cgroup, and anything the operator runs),
// so that sandboxes that use all of their limits leave the host and the
// server able to fork.
const (
	pidsReservePercent = 10
	minPidsReserve     = 1024
	// systemdPidMax is the kernel.pid_max systemd sets at boot
	// (50-pid-max.conf); a lower one makes pid_max, not threads-max,
	// bound the node's pids budget.
	systemdPidMax = 4194304
)

// derivePidsBudget is the pids budget of a host of these limits; 0 if
// the reserve leaves nothing.
func derivePidsBudget(pidMax, threadsMax int) int {
	limit := min(pidMax, threadsMax)
	reserve := max(limit*pidsReservePercent/100, minPidsReserve)
	return max(limit-reserve, 0)
}

// pidsBudget is the node's pids budget: given (--pids-budget), or, for 0,
// derived from the pid_max and threads-max files in dir. A derived budget
// that pid_max bounds below threads-max is logged: the operator may raise
// pid_max (the server changes no host sysctl).
func pidsBudget(given int, dir string, log *slog.Logger) (int, error) {
	if given < 0 {
		return 0, fmt.Errorf("--pids-budget must not be negative (0: derived from the host), not %d", given)
	}
	if given > 0 {
		return given, nil
	}
	pidMax, err := readKernelInt(filepath.Join(dir, "pid_max"))
	if err != nil {
		return 0, err
	}
	threadsMax, err := readKernelInt(filepath.Join(dir, "threads-max"))
	if err != nil {
		return 0, err
	}
	budget := derivePidsBudget(pidMax, threadsMax)
	if budget <= 0 {
		return 0, fmt.Errorf("the host's process table (pid_max %d, threads-max %d) leaves no pids budget for sandboxes after the host's reserve of %d; raise kernel.pid_max or give --pids-budget",
			pidMax, threadsMax, max(min(pidMax, threadsMax)*pidsReservePercent/100, minPidsReserve))
	}
	if pidMax < threadsMax && pidMax < systemdPidMax {
		log.Warn("kernel.pid_max bounds the node's pids budget: raise it (sysctl kernel.pid_max=4194304, as systemd sets it) for more sandboxes",
			"pid_max", pidMax, "threads_max", threadsMax, "pids_budget", budget,
			"runc_sandboxes_of_256MiB", budget/environment.HostPids(environment.NameRunc, model.GuestPids(256)),
			"runsc_sandboxes_of_256MiB", budget/environment.HostPids(environment.NameRunsc, model.GuestPids(256)))
	}
	return budget, nil
}

// readKernelInt reads a /proc/sys file holding one positive integer.
func readKernelInt(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read the host's process limits: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("read the host's process limits: %s holds %q, not a positive integer", path, strings.TrimSpace(string(data)))
	}
	return n, nil
}

// HostPidsBudget is the pids budget a server derives on this host when
// --pids-budget is 0 (for the benchmarks, which size it as they size
// --max-sandboxes).
func HostPidsBudget() (int, error) {
	return pidsBudget(0, procSysKernel, slog.New(slog.DiscardHandler))
}
