// Package migrations holds Airlock's versioned store schema and the runner
// that applies it. The SQL files (NNN_name.sql, embedded) are written in the
// subset of SQL that both SQLite and PostgreSQL accept; the only
// dialect-specific piece is the binary column type, written {{BYTES}} and
// replaced by the Dialect. Applied versions are recorded in schema_migrations.
package migrations

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

//go:embed *.sql
var files embed.FS

// bytesPlaceholder is the column type that each dialect replaces.
const bytesPlaceholder = "{{BYTES}}"

// Migration is one versioned schema change.
type Migration struct {
	Version int    // from the file name's numeric prefix, starting at 1
	Name    string // file name without extension, e.g. "001_init"
	SQL     string // with placeholders; see Dialect.Render
}

// Dialect says how to turn the neutral migrations into one database's SQL
// and how to keep concurrent runners apart.
type Dialect struct {
	// Name is used in log lines and errors ("sqlite", "postgres").
	Name string
	// BytesType replaces {{BYTES}}: "BLOB" for SQLite, "BYTEA" for PostgreSQL.
	BytesType string
	// Lock, if set, is called on the runner's dedicated connection before it
	// reads schema_migrations, and the returned function is called when it is
	// done. PostgreSQL uses an advisory lock so two servers starting at once do
	// not race. SQLite needs none: each migration runs in an immediate
	// transaction that re-checks whether it was applied.
	Lock func(ctx context.Context, conn *sql.Conn) (unlock func() error, err error)
}

// Render returns the migration's SQL for the dialect.
func (d Dialect) Render(m Migration) (string, error) {
	if d.BytesType == "" {
		return "", fmt.Errorf("migrations: dialect %q has no BytesType", d.Name)
	}
	out := strings.ReplaceAll(m.SQL, bytesPlaceholder, d.BytesType)
	if i := strings.Index(out, "{{"); i >= 0 {
		end := min(i+20, len(out))
		return "", fmt.Errorf("migrations: %s: unknown placeholder near %q", m.Name, out[i:end])
	}
	return out, nil
}

// Load returns the embedded migrations in version order. Versions must be
// 1, 2, 3, … without gaps or duplicates.
func Load() ([]Migration, error) {
	return load(files)
}

func load(fsys fs.FS) ([]Migration, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("migrations: list: %w", err)
	}
	var out []Migration
	for _, name := range names {
		v, err := ParseVersion(name)
		if err != nil {
			return nil, err
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("migrations: read %s: %w", name, err)
		}
		out = append(out, Migration{Version: v, Name: strings.TrimSuffix(path.Base(name), ".sql"), SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migrations: %s: expected version %d (versions must be contiguous from 1)", m.Name, i+1)
		}
	}
	return out, nil
}

// ParseVersion extracts the version from a file name "NNN_name.sql": one to
// nine digits, an underscore, a name of [a-z0-9_], and ".sql".
func ParseVersion(file string) (int, error) {
	base := path.Base(file)
	stem, ok := strings.CutSuffix(base, ".sql")
	if !ok {
		return 0, fmt.Errorf("migrations: %q does not end in .sql", base)
	}
	num, name, ok := strings.Cut(stem, "_")
	if !ok || num == "" || len(num) > 9 || name == "" {
		return 0, fmt.Errorf("migrations: %q is not NNN_name.sql", base)
	}
	for _, c := range num {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("migrations: %q: version %q is not decimal", base, num)
		}
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return 0, fmt.Errorf("migrations: %q: name may contain only a-z, 0-9 and '_'", base)
		}
	}
	v, err := strconv.Atoi(num)
	if err != nil || v < 1 {
		return 0, fmt.Errorf("migrations: %q: version must be a positive number", base)
	}
	return v, nil
}

// ErrTooNew is wrapped when the database holds a schema version newer than
// any migration this binary knows: an older binary must not run against it.
var ErrTooNew = errors.New("database schema is newer than this binary")

// Apply brings db up to the latest embedded migration. Each pending migration
// runs in its own transaction together with its schema_migrations row. It
// returns the versions it applied (empty when the schema was current).
func Apply(ctx context.Context, db *sql.DB, d Dialect, logger *slog.Logger) ([]int, error) {
	all, err := Load()
	if err != nil {
		return nil, err
	}
	return apply(ctx, db, d, all, logger)
}

func apply(ctx context.Context, db *sql.DB, d Dialect, all []Migration, logger *slog.Logger) ([]int, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: connect: %w", err)
	}
	defer conn.Close()
	if d.Lock != nil {
		unlock, err := d.Lock(ctx, conn)
		if err != nil {
			return nil, fmt.Errorf("migrations: lock: %w", err)
		}
		defer func() {
			if err := unlock(); err != nil {
				// The connection may still hold the lock: make database/sql
				// discard it instead of handing it to the next user.
				logger.Warn("migrations: unlock failed; discarding the connection", "dialect", d.Name, "err", err)
				_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			}
		}()
	}
	const createTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    BIGINT NOT NULL PRIMARY KEY,
		name       TEXT   NOT NULL,
		applied_at BIGINT NOT NULL
	)`
	if _, err := conn.ExecContext(ctx, createTable); err != nil {
		return nil, fmt.Errorf("migrations: create schema_migrations: %w", err)
	}
	var newest sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&newest); err != nil {
		return nil, fmt.Errorf("migrations: read schema_migrations: %w", err)
	}
	if latest := len(all); newest.Valid && newest.Int64 > int64(latest) {
		return nil, fmt.Errorf("migrations: %w: database is at version %d, this binary knows up to %d", ErrTooNew, newest.Int64, latest)
	}
	var applied []int
	for _, m := range all {
		did, err := applyOne(ctx, conn, d, m)
		if err != nil {
			return applied, err
		}
		if did {
			logger.Info("applied store migration", "dialect", d.Name, "version", m.Version, "name", m.Name)
			applied = append(applied, m.Version)
		}
	}
	return applied, nil
}

// applyOne runs m unless it is already recorded, in one transaction. The
// version and timestamp are integers formatted into the SQL, so no
// placeholder syntax is needed.
func applyOne(ctx context.Context, conn *sql.Conn, d Dialect, m Migration) (bool, error) {
	body, err := d.Render(m)
	if err != nil {
		return false, err
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("migrations: %s: begin: %w", m.Name, err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	var n int
	q := fmt.Sprintf(`SELECT COUNT(*) FROM schema_migrations WHERE version = %d`, m.Version)
	if err := tx.QueryRowContext(ctx, q).Scan(&n); err != nil {
		return false, fmt.Errorf("migrations: %s: check: %w", m.Name, err)
	}
	if n > 0 {
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, body); err != nil {
		return false, fmt.Errorf("migrations: %s (%s): %w", m.Name, d.Name, err)
	}
	ins := fmt.Sprintf(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (%d, '%s', %d)`,
		m.Version, m.Name, time.Now().UnixMicro())
	if _, err := tx.ExecContext(ctx, ins); err != nil {
		return false, fmt.Errorf("migrations: %s: record: %w", m.Name, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("migrations: %s: commit: %w", m.Name, err)
	}
	return true, nil
}
