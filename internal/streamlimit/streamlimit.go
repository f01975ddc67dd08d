// Package streamlimit caps how many long-lived streams (a live list, a
// process attachment) are open at once under several keys together — the
// caller's key, its project, … — so that no one key holds thousands.
package streamlimit

import (
	"slices"
	"sync"
)

// Limits counts open streams under each of its caps.
type Limits struct {
	max []int

	mu   sync.Mutex
	open []map[string]int // by cap, by key
}

// New returns Limits with one cap per value of max: at most max[i]
// streams under any one key of cap i.
func New(max ...int) *Limits {
	l := &Limits{max: max, open: make([]map[string]int, len(max))}
	for i := range l.open {
		l.open[i] = map[string]int{}
	}
	return l
}

// Acquire counts one more stream under keys (keys[i] under cap i, one key
// for each cap) and returns its release, to be called once the stream ends
// (later calls do nothing). If a key already holds its cap's maximum,
// nothing is counted: release is nil and full is the index of the first
// such cap; otherwise full is -1.
func (l *Limits) Acquire(keys ...string) (release func(), full int) {
	if len(keys) != len(l.max) {
		panic("streamlimit: Acquire needs one key for each cap")
	}
	keys = slices.Clone(keys) // release's, whatever the caller does with its slice
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, k := range keys {
		if l.open[i][k] >= l.max[i] {
			return nil, i
		}
	}
	for i, k := range keys {
		l.open[i][k]++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			for i, k := range keys {
				if l.open[i][k] <= 1 {
					delete(l.open[i], k)
				} else {
					l.open[i][k]--
				}
			}
		})
	}, -1
}

// Max is the maximum of cap i.
func (l *Limits) Max(i int) int { return l.max[i] }

// Idle reports whether no stream is counted (every release was called).
func (l *Limits) Idle() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.open {
		if len(m) != 0 {
			return false
		}
	}
	return true
}

// Open is how many streams key holds under cap i.
func (l *Limits) Open(i int, key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[i][key]
}
