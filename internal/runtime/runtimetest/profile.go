package runtimetest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/runtime"
)

// Profile may be implemented by the runtime values given to Run: it tells
// the suite how to run the runtime. Without it every case runs, with the
// default timeouts and no bound on concurrent sandboxes.
type Profile interface {
	// MaxParallel bounds the sandboxes alive at once across the suite
	// (each case holds as many slots as it runs sandboxes at once);
	// 0 = unlimited.
	MaxParallel() int
	// Timeout bounds one runtime operation or command; 0 = the default
	// (90 s). The suite's other waits grow in proportion.
	Timeout() time.Duration
	// NotApplicable returns "" when the case (a name Run lists) applies to
	// the runtime, else why not: the suite skips the case with
	// "not applicable to <runtime>: <reason>".
	NotApplicable(caseName string) string
	// AgentFromSpec reports whether the runtime starts the agent from
	// Spec.AgentBinary (container runtimes), rather than from its own
	// boot image (a VM's initramfs), which ignores the field.
	AgentFromSpec() bool
}

// curOpTimeout is the per-operation timeout in nanoseconds: the longest
// any Profile of this test binary asked for (profiles only lengthen it).
var curOpTimeout atomic.Int64

func init() { curOpTimeout.Store(int64(defaultOpTimeout)) }

// opTimeout bounds one runtime operation or command in the suite.
func opTimeout() time.Duration { return time.Duration(curOpTimeout.Load()) }

// lengthenTimeout raises the operation timeout to d if that is longer.
func lengthenTimeout(d time.Duration) {
	for {
		cur := curOpTimeout.Load()
		if int64(d) <= cur || curOpTimeout.CompareAndSwap(cur, int64(d)) {
			return
		}
	}
}

// scaled stretches a wait of the suite by the factor the operation
// timeout was lengthened by.
func scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) * float64(opTimeout()) / float64(defaultOpTimeout))
}

// profileOf returns rt's Profile, or nil.
func profileOf(rt runtime.Runtime) Profile {
	p, _ := rt.(Profile)
	return p
}

// agentFromSpec reports whether rt starts its agent from Spec.AgentBinary.
func agentFromSpec(rt runtime.Runtime) bool {
	if p := profileOf(rt); p != nil {
		return p.AgentFromSpec()
	}
	return true
}

// slots is a weighted semaphore bounding the sandboxes alive at once.
type slots struct {
	once sync.Once
	mu   sync.Mutex
	cond *sync.Cond
	max  int // 0: unlimited
	used int
}

// init sets the bound from the first runtime value seen.
func (s *slots) init(rt runtime.Runtime) {
	s.once.Do(func() {
		s.cond = sync.NewCond(&s.mu)
		if p := profileOf(rt); p != nil {
			s.max = p.MaxParallel()
		}
	})
}

// acquire takes n slots (at most the bound) for the rest of the test: they
// are released when t and its subtests have finished, after t's cleanups
// (registered later) deleted its sandboxes.
func (s *slots) acquire(t *testing.T, n int) {
	t.Helper()
	if s.max <= 0 || n <= 0 {
		return
	}
	n = min(n, s.max)
	s.mu.Lock()
	for s.used+n > s.max {
		s.cond.Wait()
	}
	s.used += n
	s.mu.Unlock()
	t.Cleanup(func() {
		s.mu.Lock()
		s.used -= n
		s.mu.Unlock()
		s.cond.Broadcast()
	})
}

// prepareCase applies rt's Profile to a case: it skips a case that does
// not apply, lengthens the timeouts and takes the case's sandbox slots.
func (s *suite) prepareCase(t *testing.T, name string, rt runtime.Runtime, sandboxes int) {
	t.Helper()
	s.slots.init(rt)
	if p := profileOf(rt); p != nil {
		if reason := p.NotApplicable(name); reason != "" {
			t.Skipf("not applicable to %s: %s", rt.Info().Name, reason)
		}
		if d := p.Timeout(); d > 0 {
			lengthenTimeout(d)
		}
	}
	s.slots.acquire(t, sandboxes)
}
