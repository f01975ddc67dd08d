package procfs

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/airlockdev/airlock/internal/textclip"
)

// SizeField returns, in bytes, the field name of text in the "Name:  123 kB"
// format of /proc/meminfo, /proc/PID/status and /proc/PID/smaps_rollup (the
// first line for name). It fails if no line is for name or its value is
// not a whole number of kB.
func SizeField(text, name string) (int64, error) {
	for line := range strings.Lines(text) {
		v, ok := strings.CutPrefix(line, name+":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("odd %s line %q", name, textclip.Bytes(strings.TrimSpace(line), 80))
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb < 0 || kb > math.MaxInt64>>10 {
			return 0, fmt.Errorf("odd %s line %q", name, textclip.Bytes(strings.TrimSpace(line), 80))
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("no %s line", name)
}
