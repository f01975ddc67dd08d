package server

import (
	"fmt"
	"os"
	"runtime"

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
