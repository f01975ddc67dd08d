package storetest

import (
	"errors"
	"sync"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func concurrencyTests() []namedTest {
	return []namedTest{
		{"ConcurrentSameIdempotencyKey", testConcurrentSameKey},
		{"ConcurrentClaims", testConcurrentClaims},
		{"ConcurrentTransition", testConcurrentTransition},
		{"ConcurrentRequestDelete", testConcurrentRequestDelete},
	}
}

// parallel runs fn(i) for i in [0, n) on n goroutines started together.
func parallel(n int, fn func(i int)) {
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			fn(i)
		}()
	}
	close(start)
	wg.Wait()
}

func testConcurrentSameKey(e *env) {
	t := e.t
	const n = 8
	a := e.project()
	tpl := e.template()
	type attempt struct {
		sb  model.Sandbox
		op  model.Operation
		rec *store.IdempotencyRecord
		err error
	}
	attempts := make([]attempt, n)
	for i := range attempts {
		attempts[i].sb, attempts[i].op = e.newSandbox(a.ID, tpl.Digest, nil)
		attempts[i].rec = e.idem(a.ID, "same-key") // same key, different bodies
	}
	parallel(n, func(i int) {
		at := &attempts[i]
		at.err = e.s.CreateSandbox(e.ctx, at.sb, policy.Spec{}, at.op, at.rec)
	})
	winner := -1
	for i, at := range attempts {
		if at.err == nil {
			if winner >= 0 {
				t.Fatalf("attempts %d and %d both succeeded with one key", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatalf("no attempt succeeded: %v", attempts[0].err)
	}
	for i, at := range attempts {
		if i == winner {
			continue
		}
		conflict(t, at.err, attempts[winner].rec)
		_, err := e.s.GetSandboxByID(e.ctx, at.sb.ID)
		mustIs(t, err, store.ErrNotFound)
	}
	page, err := e.s.ListSandboxes(e.ctx, store.SandboxQuery{ProjectID: a.ID, Limit: 100})
	must(t, err)
	if len(page.Sandboxes) != 1 || page.Sandboxes[0].ID != attempts[winner].sb.ID {
		t.Fatalf("listed %d sandboxes, want only the winner's", len(page.Sandboxes))
	}
}

// testConcurrentClaims: workers of several nodes claim at once; every
// operation is claimed exactly once, by its sandbox's node.
func testConcurrentClaims(e *env) {
	t := e.t
	const (
		nodes          = 3
		workersPerNode = 2
		opCount        = 24
	)
	a := e.project()
	tpl := e.template()
	var owners []model.NodeID
	for range nodes {
		owners = append(owners, e.node())
	}
	want := map[model.OperationID]model.NodeID{}
	for i := 0; i < opCount; i++ {
		sb, op := e.newSandbox(a.ID, tpl.Digest, nil)
		sb.NodeID = owners[i%nodes]
		must(t, e.s.CreateSandbox(e.ctx, sb, policy.Spec{}, op, nil))
		want[op.ID] = sb.NodeID
	}
	now := e.now()
	var (
		mu      sync.Mutex
		claimed = map[model.OperationID]model.NodeID{}
		errs    []error
	)
	parallel(nodes*workersPerNode, func(i int) {
		owner := owners[i%nodes]
		for {
			op, err := e.s.ClaimOperation(e.ctx, store.Claim{Owner: owner, Incarnation: e.inc(owner), Lease: time.Minute, Now: now})
			mu.Lock()
			switch {
			case errors.Is(err, store.ErrNoWork):
				mu.Unlock()
				return
			case err != nil:
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			if prev, dup := claimed[op.ID]; dup {
				errs = append(errs, errors.New("operation "+string(op.ID)+" claimed by "+string(prev)+" and "+string(owner)))
			}
			claimed[op.ID] = owner
			mu.Unlock()
		}
	})
	for _, err := range errs {
		t.Error(err)
	}
	if len(claimed) != opCount {
		t.Fatalf("claimed %d operations, want %d", len(claimed), opCount)
	}
	for id, owner := range claimed {
		if node, ok := want[id]; !ok || node != owner {
			t.Fatalf("operation %s claimed by %s, want its sandbox's node %q", id, owner, node)
		}
		if op, err := e.s.GetOperation(e.ctx, a.ID, id); err != nil || op.Attempts != 1 {
			t.Fatalf("operation %s: %+v, %v; want exactly one attempt", id, op, err)
		}
	}
}

func testConcurrentTransition(e *env) {
	t := e.t
	const n = 8
	a := e.project()
	tpl := e.template()
	sb, _ := e.sandbox(a.ID, tpl.Digest, nil)
	errs := make([]error, n)
	now := e.now()
	parallel(n, func(i int) {
		errs[i] = e.s.TransitionSandbox(e.ctx, sb.ID, model.StatePending, model.StateCreating, "", now)
	})
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, store.ErrStateChanged):
			t.Fatalf("concurrent transition: %v, want nil or ErrStateChanged", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d concurrent compare-and-swaps succeeded, want 1", ok)
	}
}

func testConcurrentRequestDelete(e *env) {
	t := e.t
	const n = 6
	a := e.project()
	tpl := e.template()
	sb, _ := e.sandbox(a.ID, tpl.Digest, nil)
	errs := make([]error, n)
	ops := make([]model.Operation, n)
	for i := range ops {
		ops[i] = e.deleteOp(sb)
	}
	now := e.now()
	parallel(n, func(i int) {
		_, errs[i] = e.s.RequestDelete(e.ctx, store.DeleteRequest{ProjectID: a.ID, SandboxID: sb.ID, Operation: ops[i], Now: now})
	})
	ok := 0
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, model.ErrInvalidTransition):
			_, gerr := e.s.GetOperation(e.ctx, a.ID, ops[i].ID)
			mustIs(t, gerr, store.ErrNotFound)
		default:
			t.Fatalf("concurrent delete: %v, want nil or ErrInvalidTransition", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d concurrent deletes succeeded, want 1", ok)
	}
}
