// Package sqlite is Airlock's embedded store: store.Store on a SQLite file
// through modernc.org/sqlite (pure Go, no cgo). The database runs in WAL mode
// with foreign keys on and a busy timeout, and every transaction begins
// IMMEDIATE, so writers queue on the database lock instead of failing at
// commit. Watchers are woken in-process after each committed change to
// operations or sandboxes: only one server process may use a SQLite store.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/airlockdev/airlock/internal/store/migrations"
	"github.com/airlockdev/airlock/internal/store/sqlstore"
)

// BusyTimeoutMillis is how long a connection waits for the database lock.
const BusyTimeoutMillis = 10000

// Dialect is SQLite's sqlstore dialect.
func Dialect() sqlstore.Dialect {
	return sqlstore.Dialect{
		Name:            "sqlite",
		CacheStatements: true,
		IsUniqueViolation: func(err error) bool {
			return hasCode(err, sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY)
		},
		IsForeignKeyViolation: func(err error) bool { return hasCode(err, sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY) },
	}
}

// MigrationDialect is SQLite's migrations dialect.
func MigrationDialect() migrations.Dialect {
	return migrations.Dialect{Name: "sqlite", BytesType: "BLOB"}
}

func hasCode(err error, codes ...int) bool {
	var e *sqlite.Error
	if !errors.As(err, &e) {
		return false
	}
	for _, c := range codes {
		if e.Code() == c {
			return true
		}
	}
	return false
}

// Store is store.Store on a SQLite database file.
type Store struct {
	*sqlstore.Store
	db *sql.DB
}

// DSN returns the modernc.org/sqlite data source name Open uses for path.
func DSN(path string) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", BusyTimeoutMillis))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

// MaxIdleConns is how many idle connections the store keeps open.
const MaxIdleConns = 16

// Open opens (creating if needed) the SQLite database at path and applies
// pending migrations.
func Open(ctx context.Context, path string, logger *slog.Logger, opts ...sqlstore.Option) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if path == "" {
		return nil, errors.New("open sqlite store: empty path")
	}
	db, err := sql.Open("sqlite", DSN(path))
	if err != nil {
		return nil, fmt.Errorf("open sqlite store %s: %w", path, err)
	}
	// Keep as many idle connections as bursts of requests use: opening one
	// (and running its pragmas) for each request of a burst and closing it
	// after cost more than the statements themselves.
	db.SetMaxIdleConns(MaxIdleConns)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open sqlite store %s: %w", path, err)
	}
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		db.Close()
		return nil, fmt.Errorf("open sqlite store %s: journal mode is %q, want wal (err %v)", path, mode, err)
	}
	if _, err := migrations.Apply(ctx, db, MigrationDialect(), logger); err != nil {
		db.Close()
		return nil, fmt.Errorf("open sqlite store %s: %w", path, err)
	}
	return &Store{Store: sqlstore.New(db, Dialect(), opts...), db: db}, nil
}

// Close stops the watchers and closes the database.
func (s *Store) Close() error {
	werr := s.Store.Close()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close sqlite store: %w", err)
	}
	return werr
}
