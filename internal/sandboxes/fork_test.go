package sandboxes

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// snapshotter plays the controller's part in a fork: it finishes every
// snapshot operation of the fixture's node (the snapshot ready, the source
// running again) until ctx ends.
func (f *fixture) snapshotter(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	for ctx.Err() == nil {
		op, err := f.st.ClaimOperation(ctx, store.Claim{Owner: f.node, Incarnation: f.inc, Lease: time.Hour, Now: f.now})
		if err != nil || op.Kind != model.OpSnapshot {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		snap, err := f.st.SnapshotOfOperation(ctx, op.ID)
		if err == nil {
			err = f.st.FinishSnapshot(ctx, snap.ID, model.SnapshotRecord{Kind: model.SnapshotMemory, Format: "f/1", Location: "/x/" + snap.ID.String(), SizeBytes: 1}, f.now)
		}
		if err == nil {
			err = f.st.FinishOperation(ctx, store.Finish{OperationID: op.ID, Owner: f.node, Incarnation: f.inc, State: model.OpSucceeded,
				SandboxFrom: model.StateSnapshotting, SandboxTo: model.StateRunning, Now: f.now})
		}
		if err != nil && ctx.Err() == nil {
			f.t.Errorf("finish the snapshot operation %s: %v", op.ID, err)
		}
	}
}

// TestForkIdempotencyInItsTransaction: a fork's idempotency record is
// built from the forks about to be stored and stored with them, so a retry
// of the request (a twin that found no record yet) makes no second fork
// and is told of the first's record.
func TestForkIdempotencyInItsTransaction(t *testing.T) {
	f := newFixture(t)
	s := f.service(Config{}, true)
	src, err := f.create(s, nil)
	must(t, err)
	f.run(src.Sandbox.ID)
	ctx, cancel := context.WithCancel(f.ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go f.snapshotter(ctx, &wg)
	defer func() { cancel(); wg.Wait() }()

	key := sha256.Sum256([]byte("fork-key"))
	record := func(made []Created) (*store.IdempotencyRecord, error) {
		ids := make([]string, len(made))
		for i, cr := range made {
			ids[i] = cr.Sandbox.ID.String()
		}
		return &store.IdempotencyRecord{ProjectID: f.proj, KeyHash: key[:], Method: "POST", Path: "/v1/sandboxes/" + src.Sandbox.ID.String() + "/fork",
			RequestHash: key[:], Status: 202, SealedBody: []byte(strings.Join(ids, ",")), CreatedAt: f.now}, nil
	}
	made, err := s.Fork(ctx, ForkRequest{Project: f.proj, Sandbox: src.Sandbox.ID, Count: 2, Now: f.now, Idempotency: record})
	must(t, err)
	if len(made) != 2 {
		t.Fatalf("%d forks, want 2", len(made))
	}
	first, err := f.st.GetIdempotency(ctx, f.proj, key[:])
	must(t, err)
	if want := made[0].Sandbox.ID.String() + "," + made[1].Sandbox.ID.String(); string(first.SealedBody) != want {
		t.Fatalf("stored record %q, want the forks made %q", first.SealedBody, want)
	}

	_, err = s.Fork(ctx, ForkRequest{Project: f.proj, Sandbox: src.Sandbox.ID, Count: 2, Now: f.now, Idempotency: record})
	var conflict *store.IdempotencyConflictError
	if !errors.As(err, &conflict) || !bytes.Equal(conflict.Existing.SealedBody, first.SealedBody) {
		t.Fatalf("the retried fork: %v, want *IdempotencyConflictError with the first record", err)
	}
	page, err := f.st.ListSandboxes(ctx, store.SandboxQuery{ProjectID: f.proj, Limit: 100})
	must(t, err)
	if len(page.Sandboxes) != 3 {
		t.Fatalf("%d sandboxes after a fork of 2 and its retry, want 3 (the source and the first fork's)", len(page.Sandboxes))
	}
}
