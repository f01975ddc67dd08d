package sqlite

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/store/sqlstore"
)

// benchStores runs bench over a store with one registered node, with and
// without the statement cache (sqlstore.Dialect.CacheStatements).
func benchStores(b *testing.B, bench func(b *testing.B, s store.Store, f store.Fence)) {
	s, f := benchNode(b)
	uncachedDialect := Dialect()
	uncachedDialect.CacheStatements = false
	uncached := sqlstore.New(s.db, uncachedDialect)
	b.Run("cached", func(b *testing.B) { bench(b, s, f) })
	b.Run("uncached", func(b *testing.B) { bench(b, uncached, f) })
}

// benchNode opens a store with one registered node.
func benchNode(b *testing.B) (*Store, store.Fence) {
	b.Helper()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "airlock.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	n := model.Node{ID: model.NodeID("node_aaaaaaaaaaaaaaaaaaaaaaaaaa"), Incarnation: model.NewIncarnation(), Role: model.RoleAll,
		AdvertiseURL: "http://127.0.0.1:1"}
	if _, err := s.RegisterNode(ctx, n); err != nil {
		b.Fatal(err)
	}
	return s, store.Fence{Node: n.ID, Incarnation: n.Incarnation}
}

// BenchmarkGetNode: a one-row read outside a transaction.
func BenchmarkGetNode(b *testing.B) {
	benchStores(b, func(b *testing.B, s store.Store, f store.Fence) {
		ctx := context.Background()
		for b.Loop() {
			if _, err := s.GetNode(ctx, f.Node); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkTemplateState: a one-row read of a digest with no row.
func BenchmarkTemplateState(b *testing.B) {
	benchStores(b, func(b *testing.B, s store.Store, _ store.Fence) {
		ctx := context.Background()
		d := model.DigestFromSHA256([32]byte{1})
		for b.Loop() {
			if _, err := s.TemplateState(ctx, d); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkHeartbeat: a fenced write transaction.
func BenchmarkHeartbeat(b *testing.B) {
	benchStores(b, func(b *testing.B, s store.Store, f store.Fence) {
		ctx := context.Background()
		for b.Loop() {
			if _, err := s.Heartbeat(ctx, f); err != nil {
				b.Fatal(err)
			}
		}
	})
}
