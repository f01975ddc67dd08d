package cgroups

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/procfs"
	"github.com/airlockdev/airlock/internal/retry"
	"github.com/airlockdev/airlock/internal/textclip"
)

// Unlimited is the value readers return for a limit set to "max".
const Unlimited int64 = -1

// v1 reports "no limit" for memory as a huge page-aligned number.
const v1MemoryUnlimited = int64(1) << 62

// Limits are the resource limits set on a cgroup.
type Limits struct {
	MemoryBytes     int64 // Unlimited if none
	PidsMax         int64 // Unlimited if none
	CPUQuotaMicros  int64 // per period; Unlimited if none
	CPUPeriodMicros int64
}

// Limits reads the memory, pids and cpu limits of cgroup p.
func (h Host) Limits(p Path) (Limits, error) {
	var l Limits
	dir, err := h.ControllerDir("memory", p)
	if err != nil {
		return l, err
	}
	if h.isV1("memory") {
		l.MemoryBytes, err = readLimit(filepath.Join(dir, "memory.limit_in_bytes"))
		if err == nil && l.MemoryBytes >= v1MemoryUnlimited {
			l.MemoryBytes = Unlimited
		}
	} else {
		l.MemoryBytes, err = readLimit(filepath.Join(dir, "memory.max"))
	}
	if err != nil {
		return l, err
	}
	if dir, err = h.ControllerDir("pids", p); err != nil {
		return l, err
	}
	if l.PidsMax, err = readLimit(filepath.Join(dir, "pids.max")); err != nil {
		return l, err
	}
	if dir, err = h.ControllerDir("cpu", p); err != nil {
		return l, err
	}
	if h.isV1("cpu") {
		if l.CPUQuotaMicros, err = readLimit(filepath.Join(dir, "cpu.cfs_quota_us")); err != nil {
			return l, err
		}
		if l.CPUQuotaMicros < 0 {
			l.CPUQuotaMicros = Unlimited
		}
		l.CPUPeriodMicros, err = readLimit(filepath.Join(dir, "cpu.cfs_period_us"))
		return l, err
	}
	data, err := os.ReadFile(filepath.Join(dir, "cpu.max"))
	if err != nil {
		return l, fmt.Errorf("read cgroup: %w", err)
	}
	l.CPUQuotaMicros, l.CPUPeriodMicros, err = ParseCPUMax(string(data))
	return l, err
}

// IsV1 reports whether controller lives in a cgroup v1 hierarchy.
func (h Host) IsV1(controller string) bool { return h.isV1(controller) }

func (h Host) isV1(controller string) bool {
	for _, x := range h.Hierarchies {
		if x.Version == 1 && x.Has(controller) {
			return true
		}
	}
	return false
}

// OOMKills returns how many processes the kernel's OOM killer killed in
// cgroup p (and below it): v1 memory.oom_control "oom_kill", v2
// memory.events "oom_kill".
func (h Host) OOMKills(p Path) (int64, error) {
	dir, err := h.ControllerDir("memory", p)
	if err != nil {
		return 0, err
	}
	file := "memory.events"
	if h.isV1("memory") {
		file = "memory.oom_control"
	}
	data, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return 0, fmt.Errorf("read cgroup: %w", err)
	}
	v, ok, err := KeyedValue(string(data), "oom_kill")
	if err != nil {
		return 0, fmt.Errorf("%s: %w", filepath.Join(dir, file), err)
	}
	if !ok {
		return 0, fmt.Errorf("%s has no oom_kill counter (kernel too old?)", filepath.Join(dir, file))
	}
	return v, nil
}

// PidsCurrent returns the number of tasks in cgroup p (pids.current).
func (h Host) PidsCurrent(p Path) (int64, error) {
	dir, err := h.ControllerDir("pids", p)
	if err != nil {
		return 0, err
	}
	return readLimit(filepath.Join(dir, "pids.current"))
}

// Procs returns the processes in cgroup p and below it, across every
// hierarchy, without duplicates.
func (h Host) Procs(p Path) ([]int, error) {
	dirs, err := h.Existing(p)
	if err != nil {
		return nil, err
	}
	seen := map[int]bool{}
	var out []int
	for _, d := range dirs {
		err := walkDirs(d, func(dir string) error {
			data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			if err != nil {
				if errors.Is(err, os.ErrNotExist) {
					return nil
				}
				return fmt.Errorf("read cgroup: %w", err)
			}
			for _, f := range strings.Fields(string(data)) {
				pid, err := strconv.Atoi(f)
				if err != nil {
					return fmt.Errorf("%s: bad pid %q", dir, f)
				}
				if !seen[pid] {
					seen[pid] = true
					out = append(out, pid)
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Kill thaws cgroup p and SIGKILLs every process in it and below it, in every
// hierarchy, until none is left or ctx ends.
func (h Host) Kill(ctx context.Context, p Path) error {
	dirs, err := h.Existing(p)
	if err != nil {
		return err
	}
	for _, d := range dirs {
		// Frozen tasks do not die; thaw first. Errors are fine: the file
		// exists only in the freezer (v1) or cgroup2 hierarchies.
		_ = os.WriteFile(filepath.Join(d, "freezer.state"), []byte("THAWED"), 0)
		_ = os.WriteFile(filepath.Join(d, "cgroup.freeze"), []byte("0"), 0)
		_ = os.WriteFile(filepath.Join(d, "cgroup.kill"), []byte("1"), 0)
	}
	wait := pollBackoff().Start(retry.SystemClock())
	for {
		procs, err := h.Procs(p)
		if err != nil {
			return err
		}
		live := 0
		for _, pid := range procs {
			if !procfs.Alive(pid) {
				continue
			}
			live++
			if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("kill pid %d of cgroup %s: %w", pid, p, err)
			}
		}
		if live == 0 {
			return nil
		}
		if err := wait.Wait(ctx); err != nil {
			return fmt.Errorf("kill cgroup %s: %d processes left: %w", p, live, err)
		}
	}
}

// pollBackoff is how Kill and Remove wait for the kernel to finish with
// exiting tasks: from 2 ms, doubling, at most 64 ms (±20%).
func pollBackoff() retry.Policy {
	return retry.Policy{Initial: 2 * time.Millisecond, Max: 64 * time.Millisecond, Jitter: 0.2}
}

// walkDirs calls fn for dir and every directory below it, parents first.
func walkDirs(dir string, fn func(string) error) error {
	if err := fn(dir); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("read cgroup dir: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := walkDirs(filepath.Join(dir, e.Name()), fn); err != nil {
				return err
			}
		}
	}
	return nil
}

// removeTree removes a cgroup directory and its child cgroups, deepest
// first, retrying while the kernel still counts exiting tasks (EBUSY).
func removeTree(ctx context.Context, dir string, deadline time.Time) error {
	var dirs []string
	if err := walkDirs(dir, func(d string) error { dirs = append(dirs, d); return nil }); err != nil {
		return err
	}
	clock := retry.SystemClock()
	for i := len(dirs) - 1; i >= 0; i-- {
		wait := pollBackoff().Start(clock)
		for {
			err := unix.Rmdir(dirs[i])
			if err == nil || errors.Is(err, unix.ENOENT) {
				break
			}
			if !errors.Is(err, unix.EBUSY) || clock.Now().After(deadline) {
				return fmt.Errorf("remove cgroup %s: %w", dirs[i], err)
			}
			if werr := wait.Wait(ctx); werr != nil {
				return fmt.Errorf("remove cgroup %s: %w (%w)", dirs[i], err, werr)
			}
		}
	}
	return nil
}

func readLimit(file string) (int64, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, fmt.Errorf("read cgroup: %w", err)
	}
	v, err := ParseLimit(string(data))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", file, err)
	}
	return v, nil
}

// ParseLimit parses a single-value cgroup file: an integer, or "max"
// (Unlimited).
func ParseLimit(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "max" {
		return Unlimited, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad cgroup value %q", textclip.Bytes(s, maxEcho))
	}
	return v, nil
}

// ParseCPUMax parses cgroup v2 cpu.max: "QUOTA PERIOD" where QUOTA may be
// "max" (Unlimited).
func ParseCPUMax(s string) (quota, period int64, err error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("bad cpu.max %q", textclip.Bytes(s, maxEcho))
	}
	if quota, err = ParseLimit(f[0]); err != nil {
		return 0, 0, err
	}
	if period, err = strconv.ParseInt(f[1], 10, 64); err != nil || period <= 0 {
		return 0, 0, fmt.Errorf("bad cpu.max period %q", textclip.Bytes(f[1], maxEcho))
	}
	return quota, period, nil
}

// KeyedValue finds key in a flat-keyed cgroup file ("key value" lines, as in
// memory.events or memory.oom_control) and parses its integer value.
func KeyedValue(data, key string) (int64, bool, error) {
	for _, line := range strings.Split(data, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || k != key {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("bad value for %s: %q", key, textclip.Bytes(v, maxEcho))
		}
		return n, true, nil
	}
	return 0, false, nil
}

// FreezerState is a cgroup's freezer state.
type FreezerState string

// Freezer states.
const (
	Thawed   FreezerState = "thawed"
	Freezing FreezerState = "freezing" // asked to freeze, some task not frozen yet
	Frozen   FreezerState = "frozen"
)

// Freezer reports cgroup p's freezer state: v1 freezer.state, v2
// cgroup.freeze with cgroup.events "frozen". A cgroup that does not exist,
// or a host without a freezer, is thawed.
func (h Host) Freezer(p Path) (FreezerState, error) {
	read := func(file string) (string, bool, error) {
		data, err := os.ReadFile(file)
		if errors.Is(err, os.ErrNotExist) {
			return "", false, nil
		}
		if err != nil {
			return "", false, fmt.Errorf("read cgroup: %w", err)
		}
		return strings.TrimSpace(string(data)), true, nil
	}
	if h.isV1("freezer") {
		dir, err := h.ControllerDir("freezer", p)
		if err != nil {
			return "", err
		}
		state, ok, err := read(filepath.Join(dir, "freezer.state"))
		switch {
		case err != nil:
			return "", err
		case !ok || state == "THAWED":
			return Thawed, nil
		case state == "FROZEN":
			return Frozen, nil
		case state == "FREEZING":
			return Freezing, nil
		}
		return "", fmt.Errorf("%s: unknown freezer state %q", filepath.Join(dir, "freezer.state"), state)
	}
	unified, ok := h.Unified()
	if !ok {
		return Thawed, nil
	}
	dir := unified.Dir(p)
	freeze, ok, err := read(filepath.Join(dir, "cgroup.freeze"))
	if err != nil || !ok || freeze != "1" {
		return Thawed, err
	}
	events, ok, err := read(filepath.Join(dir, "cgroup.events"))
	if err != nil || !ok {
		return Freezing, err
	}
	if v, _, err := KeyedValue(events, "frozen"); err != nil {
		return "", err
	} else if v == 1 {
		return Frozen, nil
	}
	return Freezing, nil
}

// maxEcho is how many bytes of a cgroup file's content an error message quotes (textclip.Bytes).
const maxEcho = 80

// Usage is what a cgroup's tasks used.
type Usage struct {
	CPU time.Duration // CPU time so far (user and system)
	// Memory is the memory charged to it without its page cache; Cache is
	// that page cache (reclaimable).
	Memory, Cache int64
}

// Usage reads the CPU time and memory of cgroup p: cgroup v1's
// cpuacct.usage, memory.usage_in_bytes and memory.stat total_cache, or
// cgroup v2's cpu.stat usage_usec, memory.current and memory.stat file.
func (h Host) Usage(p Path) (Usage, error) {
	var u Usage
	v1CPU := h.isV1("cpuacct")
	controller := "cpu"
	if v1CPU {
		controller = "cpuacct"
	}
	cpuDir, err := h.ControllerDir(controller, p)
	if err != nil {
		return u, err
	}
	if v1CPU {
		ns, err := readLimit(filepath.Join(cpuDir, "cpuacct.usage"))
		if err != nil {
			return u, err
		}
		u.CPU = time.Duration(ns)
	} else {
		data, err := os.ReadFile(filepath.Join(cpuDir, "cpu.stat"))
		if err != nil {
			return u, fmt.Errorf("read cgroup: %w", err)
		}
		us, ok, err := KeyedValue(string(data), "usage_usec")
		if err != nil || !ok {
			return u, fmt.Errorf("%s: no usage_usec: %v", filepath.Join(cpuDir, "cpu.stat"), err)
		}
		u.CPU = time.Duration(us) * time.Microsecond
	}
	memDir, err := h.ControllerDir("memory", p)
	if err != nil {
		return u, err
	}
	usageFile, cacheKey := "memory.current", "file"
	if h.isV1("memory") {
		usageFile, cacheKey = "memory.usage_in_bytes", "total_cache"
	}
	total, err := readLimit(filepath.Join(memDir, usageFile))
	if err != nil {
		return u, err
	}
	data, err := os.ReadFile(filepath.Join(memDir, "memory.stat"))
	if err != nil {
		return u, fmt.Errorf("read cgroup: %w", err)
	}
	cache, _, err := KeyedValue(string(data), cacheKey)
	if err != nil {
		return u, fmt.Errorf("%s: %w", filepath.Join(memDir, "memory.stat"), err)
	}
	u.Cache = min(max(cache, 0), total)
	u.Memory = total - u.Cache
	return u, nil
}
