package server

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/airlockdev/airlock/internal/model"
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
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("read host memory: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("read host memory: odd MemTotal line %q", sc.Text())
		}
		n, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("read host memory: odd MemTotal line %q", sc.Text())
		}
		return n, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read host memory: %w", err)
	}
	return 0, fmt.Errorf("read host memory: no MemTotal in %s", path)
}
