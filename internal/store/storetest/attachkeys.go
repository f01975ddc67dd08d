package storetest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func attachKeyTests() []namedTest {
	return []namedTest{
		{"AttachKeys/PublishAndGet", testPublishAttachKeys},
		{"AttachKeys/RetireAndExpire", testRetireAttachKeys},
		{"AttachKeys/KidOfAnotherNode", testAttachKeyOfAnotherNode},
		{"AttachKeys/Invalid", testInvalidAttachKeys},
	}
}

func newAttachKey(t interface{ Fatal(...any) }, kid string, created time.Time) store.AttachKey {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return store.AttachKey{ID: kid, PublicKey: pub, CreatedAt: created}
}

func (e *env) checkAttachKey(kid string, want store.AttachKey) {
	e.t.Helper()
	got, err := e.s.GetAttachKey(e.ctx, kid)
	if err != nil {
		e.t.Fatalf("GetAttachKey(%s): %v", kid, err)
	}
	if got.ID != want.ID || got.Node != want.Node || !bytes.Equal(got.PublicKey, want.PublicKey) ||
		!got.CreatedAt.Equal(us(want.CreatedAt)) || !got.NotAfter.Equal(us(want.NotAfter)) && !(got.NotAfter.IsZero() && want.NotAfter.IsZero()) {
		e.t.Fatalf("GetAttachKey(%s) = %+v, want %+v", kid, got, want)
	}
	if !got.NotAfter.IsZero() && got.NotAfter.Location() != time.UTC || got.CreatedAt.Location() != time.UTC {
		e.t.Fatalf("GetAttachKey(%s): times not in UTC: %+v", kid, got)
	}
}

func testPublishAttachKeys(e *env) {
	node := model.NewNodeID()
	k1 := newAttachKey(e.t, "aaaaaaaaaaaaaaaa", e.now())
	if err := e.s.PublishAttachKeys(e.ctx, node, []store.AttachKey{k1}, e.now()); err != nil {
		e.t.Fatal(err)
	}
	k1.Node = node
	e.checkAttachKey(k1.ID, k1)
	// Publishing the same keys again (every start) changes nothing.
	if err := e.s.PublishAttachKeys(e.ctx, node, []store.AttachKey{k1}, e.now()); err != nil {
		e.t.Fatalf("publish again: %v", err)
	}
	e.checkAttachKey(k1.ID, k1)
	if _, err := e.s.GetAttachKey(e.ctx, "bbbbbbbbbbbbbbbb"); !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("GetAttachKey(unpublished) = %v, want ErrNotFound", err)
	}
	// Nothing but the exact kid matches.
	if _, err := e.s.GetAttachKey(e.ctx, "AAAAAAAAAAAAAAAA"); !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("GetAttachKey(other case) = %v, want ErrNotFound", err)
	}
	if _, err := e.s.GetAttachKey(e.ctx, "' OR 1=1 --"); !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("GetAttachKey(injection) = %v, want ErrNotFound", err)
	}
}

func testRetireAttachKeys(e *env) {
	node := model.NewNodeID()
	k1 := newAttachKey(e.t, "aaaaaaaaaaaaaaaa", e.now())
	if err := e.s.PublishAttachKeys(e.ctx, node, []store.AttachKey{k1}, e.now()); err != nil {
		e.t.Fatal(err)
	}
	// Rotation: the new key is published with the old one's end.
	k2 := newAttachKey(e.t, "bbbbbbbbbbbbbbbb", e.now())
	k1.NotAfter = e.clock.Add(10 * time.Minute)
	if err := e.s.PublishAttachKeys(e.ctx, node, []store.AttachKey{k1, k2}, e.now()); err != nil {
		e.t.Fatal(err)
	}
	k1.Node, k2.Node = node, node
	e.checkAttachKey(k1.ID, k1)
	e.checkAttachKey(k2.ID, k2)
	// Past k1's end, any publish (of any node) deletes it.
	other := model.NewNodeID()
	k3 := newAttachKey(e.t, "cccccccccccccccc", e.now())
	if err := e.s.PublishAttachKeys(e.ctx, other, []store.AttachKey{k3}, k1.NotAfter.Add(time.Second)); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.s.GetAttachKey(e.ctx, k1.ID); !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("expired key: GetAttachKey = %v, want ErrNotFound", err)
	}
	e.checkAttachKey(k2.ID, k2)
	k3.Node = other
	e.checkAttachKey(k3.ID, k3)
	// An empty publish only tidies.
	if err := e.s.PublishAttachKeys(e.ctx, node, nil, e.now()); err != nil {
		e.t.Fatal(err)
	}
	e.checkAttachKey(k2.ID, k2)
}

func testAttachKeyOfAnotherNode(e *env) {
	n1, n2 := model.NewNodeID(), model.NewNodeID()
	k := newAttachKey(e.t, "aaaaaaaaaaaaaaaa", e.now())
	if err := e.s.PublishAttachKeys(e.ctx, n1, []store.AttachKey{k}, e.now()); err != nil {
		e.t.Fatal(err)
	}
	// Another node cannot take over (or retire) the kid, with the same
	// public key or another; nothing of its batch is written.
	k.NotAfter = e.clock.Add(time.Minute)
	fresh := newAttachKey(e.t, "bbbbbbbbbbbbbbbb", e.now())
	if err := e.s.PublishAttachKeys(e.ctx, n2, []store.AttachKey{fresh, k}, e.now()); !errors.Is(err, store.ErrAlreadyExists) {
		e.t.Fatalf("publish another node's kid = %v, want ErrAlreadyExists", err)
	}
	forged := newAttachKey(e.t, k.ID, e.now())
	if err := e.s.PublishAttachKeys(e.ctx, n1, []store.AttachKey{forged}, e.now()); !errors.Is(err, store.ErrAlreadyExists) {
		e.t.Fatalf("republish a kid with another public key = %v, want ErrAlreadyExists", err)
	}
	if _, err := e.s.GetAttachKey(e.ctx, fresh.ID); !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("a refused batch was partly written: %v", err)
	}
	k.Node, k.NotAfter = n1, time.Time{}
	e.checkAttachKey(k.ID, k)
}

func testInvalidAttachKeys(e *env) {
	node := model.NewNodeID()
	for _, k := range []store.AttachKey{
		{ID: "", PublicKey: make([]byte, ed25519.PublicKeySize), CreatedAt: e.now()},
		{ID: "aaaaaaaaaaaaaaaa", PublicKey: make([]byte, 7), CreatedAt: e.now()},
		{ID: "aaaaaaaaaaaaaaaa", PublicKey: make([]byte, ed25519.PublicKeySize)},
	} {
		if err := e.s.PublishAttachKeys(e.ctx, node, []store.AttachKey{k}, e.now()); !errors.Is(err, model.ErrInvalid) {
			e.t.Fatalf("publish %+v = %v, want ErrInvalid", k, err)
		}
	}
	if err := e.s.PublishAttachKeys(e.ctx, "", nil, e.now()); err == nil {
		e.t.Fatal("publish without a node ID succeeded")
	}
}
