package model

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestSandboxMetricValidate(t *testing.T) {
	ok := SandboxMetric{SandboxID: NewSandboxID(), At: time.Unix(1, 0), CPUCount: 1, CPUUsedPct: 50, MemUsed: 1, MemTotal: 2, DiskUsed: 1, DiskTotal: 2}
	for _, tc := range []struct {
		name string
		edit func(*SandboxMetric)
		ok   bool
	}{
		{"valid", func(*SandboxMetric) {}, true},
		{"100 %", func(m *SandboxMetric) { m.CPUUsedPct = 100 }, true},
		{"no sandbox", func(m *SandboxMetric) { m.SandboxID = "" }, false},
		{"no time", func(m *SandboxMetric) { m.At = time.Time{} }, false},
		{"over 100 %", func(m *SandboxMetric) { m.CPUUsedPct = 100.5 }, false},
		{"negative %", func(m *SandboxMetric) { m.CPUUsedPct = -1 }, false},
		{"NaN", func(m *SandboxMetric) { m.CPUUsedPct = math.NaN() }, false},
		{"negative CPUs", func(m *SandboxMetric) { m.CPUCount = -1 }, false},
		{"negative memory", func(m *SandboxMetric) { m.MemUsed = -1 }, false},
		{"negative disk", func(m *SandboxMetric) { m.DiskTotal = -1 }, false},
	} {
		m := ok
		tc.edit(&m)
		err := m.Validate()
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}
