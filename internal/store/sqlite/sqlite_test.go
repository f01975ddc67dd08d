package sqlite

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/store/migrations"
	"github.com/airlockdev/airlock/internal/store/storetest"
)

func open(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path, nil)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// TestConformance gives every case a fresh store: a copy of one migrated
// once, since migrating costs ~0.4 s of CPU under -race and the suite has
// 136 cases (an empty database migrated: the other tests here, each on its
// own, and the migrations package).
func TestConformance(t *testing.T) {
	migrated := filepath.Join(t.TempDir(), "migrated.db")
	s, err := Open(context.Background(), migrated, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // checkpoints the WAL into the file
		t.Fatal(err)
	}
	storetest.Run(t, func(t *testing.T) store.Store {
		path := filepath.Join(t.TempDir(), "airlock.db")
		copyDatabase(t, migrated, path)
		return open(t, path)
	})
}

// copyDatabase copies the closed SQLite database src (and its WAL, if one
// was left) to dst.
func copyDatabase(t *testing.T, src, dst string) {
	t.Helper()
	for _, suffix := range []string{"", "-wal"} {
		data, err := os.ReadFile(src + suffix)
		if suffix != "" && errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst+suffix, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReopenKeepsDataAndSettings(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "dir with spaces", "a?b#c.db")
	if _, err := Open(ctx, path, nil); err == nil {
		t.Fatal("Open succeeded in a directory that does not exist")
	}
	path = filepath.Join(t.TempDir(), "a b?c#d.db")
	s, err := Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := model.Project{ID: model.NewProjectID(), Name: "p", CreatedAt: time.Now()}
	if err := s.CreateProject(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := filepath.Glob(path); err != nil {
		t.Fatal(err)
	}
	s = open(t, path)
	if _, err := s.GetProject(ctx, p.ID); err != nil {
		t.Fatalf("project lost across reopen: %v", err)
	}
	db := s.DB()
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	all, _ := migrations.Load()
	if n != len(all) {
		t.Fatalf("schema_migrations has %d rows, want %d (migrations re-applied?)", n, len(all))
	}
	for pragma, want := range map[string]string{"journal_mode": "wal", "foreign_keys": "1", "busy_timeout": "10000"} {
		var got string
		if err := db.QueryRowContext(ctx, "PRAGMA "+pragma).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("PRAGMA %s = %s, want %s", pragma, got, want)
		}
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "airlock.db")
	s := open(t, path)
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, '999_future', 0)`); err != nil {
		t.Fatal(err)
	}
	_, err := Open(ctx, path, nil)
	if !errors.Is(err, migrations.ErrTooNew) {
		t.Fatalf("Open of a newer schema: %v, want ErrTooNew", err)
	}
}

func TestCloseEndsWatchers(t *testing.T) {
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "airlock.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	w := s.Watch(context.Background())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case _, ok := <-w:
		if ok {
			t.Fatal("watch delivered a value on Close instead of closing")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch channel still open after Close")
	}
}

// TestCorruptRowsAreRefused: a value in the database that does not parse as
// its domain type (written by hand, by a bug, or by an attacker with write
// access to the file) makes reads fail instead of travelling on unchecked.
func TestCorruptRowsAreRefused(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "airlock.db"))
	ctx := context.Background()
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO projects (id, name, created_at) VALUES (?, ?, ?)`, "prj_../../etc", "evil", 1); err != nil {
		t.Fatal(err)
	}
	_, err := s.ListProjects(ctx)
	if err == nil || !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("ListProjects over a corrupt row: %v, want an error wrapping model.ErrInvalid", err)
	}
}
