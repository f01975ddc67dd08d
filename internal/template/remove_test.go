package template

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestRemove(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	imp, err := s.ImportDir(ctx, makeSample(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	trees, err := s.Trees()
	if err != nil || len(trees) != 1 || trees[0].Digest != imp.Digest || time.Since(trees[0].Published) > time.Minute {
		t.Fatalf("Trees = %+v, %v", trees, err)
	}
	no := func(context.Context) (bool, error) { return false, nil }
	yes := func(context.Context) (bool, error) { return true, nil }
	if ok, err := s.Remove(ctx, imp.Digest, no); ok || err != nil || !s.Has(imp.Digest) {
		t.Fatalf("Remove with a check that says no = %v, %v", ok, err)
	}

	// A held guard makes Remove busy, without calling the check.
	release, err := s.Guard(ctx)
	if err != nil {
		t.Fatal(err)
	}
	release2, err := s.Guard(ctx) // guards share
	if err != nil {
		t.Fatal(err)
	}
	called := false
	if ok, err := s.Remove(ctx, imp.Digest, func(context.Context) (bool, error) { called = true; return true, nil }); ok || !errors.Is(err, ErrBusy) || called {
		t.Fatalf("Remove under a guard = %v, %v (check called: %v)", ok, err, called)
	}
	release()
	release2()

	if ok, err := s.Remove(ctx, imp.Digest, yes); !ok || err != nil {
		t.Fatalf("Remove = %v, %v", ok, err)
	}
	if s.Has(imp.Digest) {
		t.Fatal("tree still there")
	}
	requireEmptyStore(t, s)
	if ok, err := s.Remove(ctx, imp.Digest, yes); ok || err != nil {
		t.Fatalf("Remove of a missing tree = %v, %v", ok, err)
	}
	// Importing again publishes it again.
	again, err := s.ImportDir(ctx, makeSample(t), nil)
	if err != nil || again.Digest != imp.Digest || again.Reused {
		t.Fatalf("re-import = %+v, %v", again, err)
	}
	if err := s.Verify(ctx, imp.Digest); err != nil {
		t.Fatal(err)
	}
}
