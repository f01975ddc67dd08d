package storetest

import (
	"errors"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// testDutyLease: one node run at a time holds a duty's lease; its holder
// renews it, another takes it once it expired, a fenced run never does.
func testDutyLease(e *env) {
	t := e.t
	a, b := e.node(), e.node()
	hold := func(f store.Fence, ttl time.Duration) bool {
		t.Helper()
		ok, err := e.s.HoldDutyLease(e.ctx, "duties", f, ttl)
		must(t, err)
		return ok
	}
	if !hold(e.fence(a), time.Hour) {
		t.Fatal("the first node did not take a free lease")
	}
	if hold(e.fence(b), time.Hour) {
		t.Fatal("a second node took a held lease")
	}
	if !hold(e.fence(a), 100*time.Millisecond) {
		t.Fatal("the holder could not renew its lease")
	}
	if ok, err := e.s.HoldDutyLease(e.ctx, "other duty", e.fence(b), time.Hour); err != nil || !ok {
		t.Fatalf("another duty's lease: %v, %v", ok, err)
	}
	time.Sleep(200 * time.Millisecond)
	if !hold(e.fence(b), time.Hour) {
		t.Fatal("a second node did not take an expired lease")
	}
	if hold(e.fence(a), time.Hour) {
		t.Fatal("the former holder took the lease back before it expired")
	}
	// A stale incarnation of the holder is fenced.
	old := e.restart(b)
	if hold(store.Fence{Node: b, Incarnation: old}, time.Hour) {
		t.Fatal("a fenced incarnation renewed the lease")
	}
	if hold(e.fence(a), time.Hour) {
		t.Fatal("another node took the lease of a restarted holder before it expired")
	}
	if _, err := e.s.HoldDutyLease(e.ctx, "", e.fence(a), time.Hour); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("no name: %v, want ErrInvalid", err)
	}
}
