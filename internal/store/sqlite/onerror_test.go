package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// The store reports failed database calls to OnError, and not the answers
// it maps (a missing row).
func TestOnErrorReportsFailedCalls(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "airlock.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var mu sync.Mutex
	var ops []string
	s.OnError(func(op string) {
		mu.Lock()
		defer mu.Unlock()
		ops = append(ops, op)
	})
	if _, err := s.GetSandboxByID(ctx, model.NewSandboxID()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetSandboxByID of a missing sandbox: %v", err)
	}
	if _, err := s.CountSandboxes(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(ops) != 0 {
		t.Fatalf("answers counted as errors: %v", ops)
	}
	mu.Unlock()
	_ = s.DB().Close() // every call fails from now on
	if _, err := s.CountSandboxes(ctx); err == nil {
		t.Fatal("CountSandboxes on a closed database succeeded")
	}
	if _, err := s.GetSandboxByID(ctx, model.NewSandboxID()); err == nil || errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetSandboxByID on a closed database: %v", err)
	}
	if err := s.RevokeAPIKey(ctx, model.APIKeyID("key_x"), model.Project{}.CreatedAt); err == nil {
		t.Fatal("RevokeAPIKey on a closed database succeeded")
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(ops)
	if !slices.Contains(ops, "query") || !slices.Contains(ops, "query_row") || len(ops) < 3 {
		t.Fatalf("failed calls reported = %v, want query, query_row and the revoke's", ops)
	}
}
