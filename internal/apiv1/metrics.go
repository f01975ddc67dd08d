package apiv1

import "time"

// SandboxMetric is one sample of a sandbox's resource use (GET
// /v1/sandboxes/{id}/metrics), taken on its node every 5 s while it runs
// or is paused.
type SandboxMetric struct {
	At         time.Time `json:"at"`
	CPUCount   int       `json:"cpu_count"`    // CPUs it may use
	CPUUsedPct float64   `json:"cpu_used_pct"` // of CPUCount, since the previous sample, 0..100
	MemUsed    int64     `json:"mem_used_bytes"`
	MemCache   int64     `json:"mem_cache_bytes"` // page cache, not in MemUsed
	MemTotal   int64     `json:"mem_total_bytes"` // its memory limit
	DiskUsed   int64     `json:"disk_used_bytes"`
	DiskTotal  int64     `json:"disk_total_bytes"`
}

// SandboxMetricList is the answer of GET /v1/sandboxes/{id}/metrics: the
// samples in the asked range, oldest first.
type SandboxMetricList struct {
	Metrics []SandboxMetric `json:"metrics"`
}
