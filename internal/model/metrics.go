package model

import (
	"fmt"
	"time"
)

// SandboxMetric is one sample of a sandbox's resource use, taken on its
// node every few seconds while it runs or is paused (internal/usage).
type SandboxMetric struct {
	SandboxID SandboxID
	At        time.Time // when it was sampled (stored to the microsecond)
	// CPUCount is the number of CPUs the sandbox may use (its limit,
	// rounded up; the node's CPUs without one).
	CPUCount int
	// CPUUsedPct is the CPU time the sandbox used since the previous
	// sample over the wall time between them times CPUCount, in percent
	// (0..100; a runtime may briefly overshoot its quota, which is
	// clipped).
	CPUUsedPct float64
	MemUsed    int64 // bytes of memory in use, page cache excluded
	MemCache   int64 // bytes of page cache charged to it
	MemTotal   int64 // its memory limit in bytes
	DiskUsed   int64 // bytes used on its writable filesystem
	DiskTotal  int64 // that filesystem's size in bytes
}

// Validate checks a sample before it is stored.
func (m SandboxMetric) Validate() error {
	switch {
	case m.SandboxID == "":
		return fmt.Errorf("%w: metric without a sandbox ID", ErrInvalid)
	case m.At.IsZero():
		return fmt.Errorf("%w: metric of %s without a time", ErrInvalid, m.SandboxID)
	case m.CPUCount < 0 || m.CPUUsedPct < 0 || m.CPUUsedPct > 100 || m.CPUUsedPct != m.CPUUsedPct:
		return fmt.Errorf("%w: metric of %s: cpu %d, %v%%", ErrInvalid, m.SandboxID, m.CPUCount, m.CPUUsedPct)
	case m.MemUsed < 0 || m.MemCache < 0 || m.MemTotal < 0 || m.DiskUsed < 0 || m.DiskTotal < 0:
		return fmt.Errorf("%w: metric of %s: a negative size", ErrInvalid, m.SandboxID)
	}
	return nil
}
