package storetest

import (
	"bytes"
	"errors"
	"sync"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// Creates whose Idempotency-Key record is written in their own
// transaction: a retried request (here, racing twins) stores the first
// result once and never a second volume or fork.
func idempotentCreateTests() []namedTest {
	return []namedTest{
		{"VolumeCreateIdempotentInOneTransaction", testVolumeCreateIdempotent},
		{"ForkIdempotentInOneTransaction", testForkIdempotent},
	}
}

// conflictOf checks that err is the store's answer to a retried key: the
// record of the first request, which its twin replays.
func (e *env) conflictOf(err error, first *store.IdempotencyRecord) {
	e.t.Helper()
	var conflict *store.IdempotencyConflictError
	if !errors.As(err, &conflict) {
		e.t.Fatalf("the retried request: %v, want *IdempotencyConflictError", err)
	}
	if conflict.Existing.Status != first.Status || !bytes.Equal(conflict.Existing.SealedBody, first.SealedBody) ||
		!bytes.Equal(conflict.Existing.RequestHash, first.RequestHash) {
		e.t.Fatalf("the retried request found %+v, want the first's record", conflict.Existing)
	}
}

// twinsMade counts the racing twins that stored their change; every other
// must have been told of the first's record.
func (e *env) twinsMade(errs []error) int {
	e.t.Helper()
	made := 0
	for _, err := range errs {
		var conflict *store.IdempotencyConflictError
		switch {
		case err == nil:
			made++
		case !errors.As(err, &conflict):
			e.t.Fatalf("a twin: %v, want nil or *IdempotencyConflictError", err)
		}
	}
	return made
}

func testVolumeCreateIdempotent(e *env) {
	t := e.t
	p := e.project()
	newVol := func(name string) model.Volume {
		return model.Volume{ID: model.NewVolumeID(), ProjectID: p.ID, Name: model.VolumeName(name), SizeMiB: 64, CreatedAt: e.now()}
	}
	// One after the other: the retry (same key, a volume of its own made
	// by its handler) stores nothing and gets the first record.
	first := e.idem(p.ID, "vol-key")
	must(t, e.s.CreateVolume(e.ctx, newVol("data"), 0, first))
	retry := *first
	retry.SealedBody = []byte("the retry's own answer")
	e.conflictOf(e.s.CreateVolume(e.ctx, newVol("data-2"), 0, &retry), first)
	if vols, err := e.s.ListVolumes(e.ctx, p.ID); err != nil || len(vols) != 1 || vols[0].Name != "data" {
		t.Fatalf("volumes after a retry: %+v, %v; want only the first", vols, err)
	}
	rec, err := e.s.GetIdempotency(e.ctx, p.ID, first.KeyHash)
	if err != nil || !bytes.Equal(rec.SealedBody, first.SealedBody) {
		t.Fatalf("the stored record: %+v, %v", rec, err)
	}

	// Racing twins: one volume, one record; the other is told of it.
	key := e.idem(p.ID, "vol-race")
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range errs {
		v := newVol("race-" + string(rune('a'+i)))
		rec := *key
		rec.SealedBody = []byte{byte(i)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.s.CreateVolume(e.ctx, v, 0, &rec)
		}()
	}
	wg.Wait()
	made := e.twinsMade(errs)
	vols, err := e.s.ListVolumes(e.ctx, p.ID)
	must(t, err)
	if made != 1 || len(vols) != 2 {
		t.Fatalf("racing twins made %d volumes (%d listed with the first), want 1", made, len(vols))
	}
}

func testForkIdempotent(e *env) {
	t := e.t
	p := e.project()
	tpl := e.template()
	snap := e.readySnapshot(e.runningSandbox(p.ID, tpl.Digest), true)
	count := func() int {
		t.Helper()
		page, err := e.s.ListSandboxes(e.ctx, store.SandboxQuery{ProjectID: p.ID, Limit: 100})
		must(t, err)
		return len(page.Sandboxes)
	}
	before := count()
	first := e.idem(p.ID, "fork-key")
	sbs, ops := e.fromSnapshot(snap, 2)
	must(t, e.s.CreateSandboxes(e.ctx, sbs, policy.Spec{}, ops, first))
	// The retry made forks of its own; none is stored.
	again, againOps := e.fromSnapshot(snap, 2)
	retry := *first
	retry.SealedBody = []byte("the retry's own answer")
	e.conflictOf(e.s.CreateSandboxes(e.ctx, again, policy.Spec{}, againOps, &retry), first)
	if n := count(); n != before+2 {
		t.Fatalf("%d sandboxes after a fork and its retry, want %d", n, before+2)
	}
	for _, sb := range again {
		if _, err := e.s.GetSandbox(e.ctx, p.ID, sb.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the retry's fork %s: %v, want ErrNotFound", sb.ID, err)
		}
	}

	// Racing twins: one fork of 2 stored.
	key := e.idem(p.ID, "fork-race")
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range errs {
		sbs, ops := e.fromSnapshot(snap, 2)
		rec := *key
		rec.SealedBody = []byte{byte(i)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.s.CreateSandboxes(e.ctx, sbs, policy.Spec{}, ops, &rec)
		}()
	}
	wg.Wait()
	made := e.twinsMade(errs)
	if n := count(); made != 1 || n != before+4 {
		t.Fatalf("racing twins: %d forks made, %d sandboxes; want 1 and %d", made, n, before+4)
	}
}
