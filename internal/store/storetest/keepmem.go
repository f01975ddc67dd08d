package storetest

import (
	"errors"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func keepMemTests() []namedTest {
	return []namedTest{
		{"TimeoutSnapshotKind", testTimeoutSnapshotKind},
		{"PoolClaimTimeoutSnapshotKind", testPoolClaimTimeoutSnapshotKind},
	}
}

// What a sandbox's deadline suspend keeps (Timeouts.SnapshotKind) is stored
// with its deadline at create and by SetSandboxTimeout, and handed back by
// a get and by the reaper's ListDeadlinePassed, so the suspend the reaper
// queues (and every attempt of it) writes that kind. A kind with a delete,
// or an unknown kind, is refused and nothing changes.
func testTimeoutSnapshotKind(e *env) {
	t := e.t
	p := e.project()
	tpl := e.template()
	node := e.homeNode()

	sb := e.run(e.sandboxWith(p.ID, tpl.Digest, func(sb *model.Sandbox) {
		sb.Timeouts.OnTimeout, sb.Timeouts.SnapshotKind = model.OnTimeoutSuspend, model.SnapshotFilesystem
		sb.Timeouts.Deadline = e.now().Add(time.Second)
	}), node)
	if got := sb.Timeouts; got.OnTimeout != model.OnTimeoutSuspend || got.SnapshotKind != model.SnapshotFilesystem {
		t.Fatalf("created: timeouts %+v, want suspend keeping the filesystem", got)
	}
	due, err := e.s.ListDeadlinePassed(e.ctx, store.ReapQuery{Node: node, Now: sb.Timeouts.Deadline, Limit: 10})
	must(t, err)
	found := false
	for _, d := range due {
		if d.ID == sb.ID {
			found = true
			if d.Timeouts.SnapshotKind != model.SnapshotFilesystem {
				t.Fatalf("ListDeadlinePassed: snapshot kind %q, want filesystem", d.Timeouts.SnapshotKind)
			}
		}
	}
	if !found {
		t.Fatalf("ListDeadlinePassed did not list %s: %v", sb.ID, ids(due))
	}

	// Set again: another kind, then none (the runtime's own).
	deadline := e.now().Add(time.Minute)
	got, err := e.s.SetSandboxTimeout(e.ctx, p.ID, sb.ID, deadline, model.OnTimeoutSuspend, model.SnapshotMemory, e.now())
	must(t, err)
	if got.Timeouts.SnapshotKind != model.SnapshotMemory || e.getSandbox(sb.ID).Timeouts.SnapshotKind != model.SnapshotMemory {
		t.Fatalf("set memory: got %q, stored %q", got.Timeouts.SnapshotKind, e.getSandbox(sb.ID).Timeouts.SnapshotKind)
	}
	got, err = e.s.SetSandboxTimeout(e.ctx, p.ID, sb.ID, deadline, model.OnTimeoutSuspend, "", e.now())
	must(t, err)
	if got.Timeouts.SnapshotKind != "" {
		t.Fatalf("set none: snapshot kind %q", got.Timeouts.SnapshotKind)
	}

	// Refused, nothing changed.
	before := e.getSandbox(sb.ID)
	for name, c := range map[string]struct {
		on   model.OnTimeout
		kind model.SnapshotKind
	}{
		"a kind with a delete": {model.OnTimeoutDelete, model.SnapshotFilesystem},
		"an unknown kind":      {model.OnTimeoutSuspend, "disk"},
	} {
		_, err := e.s.SetSandboxTimeout(e.ctx, p.ID, sb.ID, deadline.Add(time.Hour), c.on, c.kind, e.now())
		if !errors.Is(err, model.ErrInvalid) {
			t.Fatalf("%s: %v, want model.ErrInvalid", name, err)
		}
		checkSandbox(t, e.getSandbox(sb.ID), before)
	}
	bad, op := e.newSandbox(p.ID, tpl.Digest, nil)
	bad.Timeouts.OnTimeout, bad.Timeouts.SnapshotKind = model.OnTimeoutDelete, model.SnapshotFilesystem
	mustIs(t, e.s.CreateSandbox(e.ctx, bad, policy.Spec{}, op, nil), model.ErrInvalid)
	if _, err := e.s.GetSandbox(e.ctx, p.ID, bad.ID); err == nil {
		t.Fatalf("a refused create stored sandbox %s", bad.ID)
	}
}

// A sandbox claimed from a warm pool gets the claim's deadline suspend
// kind too; a kind with a delete is refused and the pool keeps its
// sandbox.
func testPoolClaimTimeoutSnapshotKind(e *env) {
	t := e.t
	a := e.project()
	tpl := e.template()
	p := e.pool("python", 1)
	ready := e.poolSandbox(p, tpl.Digest, true)
	bad := e.poolClaim(p, tpl.Digest, a.ID)
	bad.Timeouts.SnapshotKind = model.SnapshotFilesystem // with OnTimeoutDelete
	if _, err := e.s.ClaimPoolSandbox(e.ctx, bad); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("a claim with a kind and a delete: %v, want model.ErrInvalid", err)
	}
	if got := e.getSandbox(ready.ID); got.Pool != p.ID {
		t.Fatalf("the refused claim took the pool sandbox: %+v", got)
	}
	c := e.poolClaim(p, tpl.Digest, a.ID)
	c.Timeouts.OnTimeout, c.Timeouts.SnapshotKind = model.OnTimeoutSuspend, model.SnapshotFilesystem
	c.Timeouts.Deadline = e.now().Add(time.Hour)
	got, err := e.s.ClaimPoolSandbox(e.ctx, c)
	must(t, err)
	if got.Timeouts.SnapshotKind != model.SnapshotFilesystem || e.getSandbox(got.ID).Timeouts.SnapshotKind != model.SnapshotFilesystem {
		t.Fatalf("claimed: timeouts %+v, want the filesystem kind", got.Timeouts)
	}
}
