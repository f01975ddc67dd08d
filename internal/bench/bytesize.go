package bench

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// byteUnits are the suffixes ParseBytes accepts, longest first.
var byteUnits = []struct {
	suffix string
	factor int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40},
	{"B", 1},
}

// ParseBytes parses a positive byte count: a number with an optional unit,
// binary (KiB, MiB, GiB, TiB, and K, M, G, T) or decimal (KB, MB, GB, TB),
// e.g. "1GiB", "256M", "1.5GB", "4096".
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	factor := int64(1)
	for _, u := range byteUnits {
		if rest, ok := strings.CutSuffix(t, u.suffix); ok {
			t, factor = strings.TrimSpace(rest), u.factor
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("byte count %q: want a number with an optional unit (e.g. 1GiB, 256MiB, 4096)", s)
	}
	n := v * float64(factor)
	if n < 1 || n > math.MaxInt64/2 {
		return 0, fmt.Errorf("byte count %q: out of range", s)
	}
	return int64(math.Round(n)), nil
}
