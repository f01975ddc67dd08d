package blobstoretest

import (
	"errors"
	"testing"

	"github.com/airlockdev/airlock/internal/blobstore"
)

// testLinks checks blobstore.Linker, for stores that implement it: a link
// reads back, is replaced by a later PutLink, is kept apart by kind, is
// not a blob (List does not yield it) and a missing one is ErrNotFound.
func testLinks(t *testing.T, h Harness) {
	s := h.New(t)
	l, ok := s.(blobstore.Linker)
	if !ok {
		t.Skipf("%T does not implement blobstore.Linker", s)
	}
	ctx := ctx(t)
	kind, _ := blobstore.ParseLinkKind("template-archive")
	other, _ := blobstore.ParseLinkKind("other")
	from := put(t, s, content(1, 100))
	to1 := blobstore.FromBytes([]byte("one"))
	to2 := blobstore.FromBytes([]byte("two"))
	if _, err := l.GetLink(ctx, kind, from); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("GetLink of a missing link: %v, want ErrNotFound", err)
	}
	if err := l.PutLink(ctx, kind, from, to1); err != nil {
		t.Fatal(err)
	}
	if got, err := l.GetLink(ctx, kind, from); err != nil || got != to1 {
		t.Fatalf("GetLink = %s, %v; want %s", got, err, to1)
	}
	if err := l.PutLink(ctx, kind, from, to2); err != nil {
		t.Fatal(err)
	}
	if got, err := l.GetLink(ctx, kind, from); err != nil || got != to2 {
		t.Fatalf("GetLink after replacing = %s, %v; want %s", got, err, to2)
	}
	if _, err := l.GetLink(ctx, other, from); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("GetLink of another kind: %v, want ErrNotFound", err)
	}
	if err := l.PutLink(ctx, blobstore.LinkKind{}, from, to1); err == nil {
		t.Fatal("PutLink with the zero kind succeeded")
	}
	n := 0
	for info, err := range s.List(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if info.Digest != from {
			t.Errorf("List yields %s, which is not a blob", info.Digest)
		}
		n++
	}
	if n != 1 {
		t.Errorf("List yields %d blobs, want 1", n)
	}
}
