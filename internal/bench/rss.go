package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// resetPeakRSS resets this process's peak RSS (VmHWM) to its current RSS
// (proc(5) clear_refs "5") and returns that RSS in bytes.
func resetPeakRSS() (int64, error) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return 0, fmt.Errorf("reset the peak RSS: %w", err)
	}
	st, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	return statusKB(string(st), "VmRSS")
}

// peakRSS returns this process's peak RSS (VmHWM) in bytes.
func peakRSS() (int64, error) {
	st, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	return statusKB(string(st), "VmHWM")
}

// statusKB returns the field of /proc/PID/status content ("VmRSS:  123 kB")
// in bytes.
func statusKB(status, field string) (int64, error) {
	for _, line := range strings.Split(status, "\n") {
		v, ok := strings.CutPrefix(line, field+":")
		if !ok {
			continue
		}
		num, unit, _ := strings.Cut(strings.TrimSpace(v), " ")
		kb, err := strconv.ParseInt(num, 10, 64)
		if err != nil || unit != "kB" {
			return 0, fmt.Errorf("%s: unexpected value %q", field, strings.TrimSpace(v))
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("no %s in /proc/self/status", field)
}
