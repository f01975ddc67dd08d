package agent

import (
	"bytes"
	"fmt"
	"sync"
)

// LogRing keeps the agent's newest log lines in memory, at most max bytes:
// once the agent has started, it logs here instead of to its stderr, which
// the runtime connected to a host file that a guest could write to
// (/proc/1/fd/2) without bound. The host reads it with GET /v1/logs.
type LogRing struct {
	mu      sync.Mutex
	buf     []byte
	max     int
	dropped int // lines dropped to stay within max
}

// NewLogRing returns a ring of at most max bytes.
func NewLogRing(max int) *LogRing { return &LogRing{max: max} }

// Write appends p, dropping the oldest whole lines beyond max. It never
// fails.
func (r *LogRing) Write(p []byte) (int, error) {
	n := len(p) // all of p is taken, even where only its tail is kept
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(p) > r.max {
		p = p[len(p)-r.max:]
	}
	r.buf = append(r.buf, p...)
	for len(r.buf) > r.max {
		i := bytes.IndexByte(r.buf, '\n')
		if i < 0 || i+1 >= len(r.buf) {
			r.buf = r.buf[len(r.buf)-r.max:]
			r.dropped++
			break
		}
		r.buf = r.buf[i+1:]
		r.dropped++
	}
	if cap(r.buf) > 4*r.max { // do not keep growing the backing array
		r.buf = append([]byte(nil), r.buf...)
	}
	return n, nil
}

// Snapshot returns a copy of the kept lines, preceded by a note if older
// ones were dropped.
func (r *LogRing) Snapshot() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []byte
	if r.dropped > 0 {
		out = fmt.Appendf(out, "(%d older lines dropped)\n", r.dropped)
	}
	return append(out, r.buf...)
}
