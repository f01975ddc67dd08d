// Package postgres is Airlock's shared store: store.Store on PostgreSQL
// through pgx/v5 (queries via database/sql and pgx's stdlib driver). Several
// server processes may share one database: ClaimOperation takes work with
// FOR UPDATE SKIP LOCKED, migrations run under an advisory lock, and every
// change to operations or sandboxes sends a NOTIFY in its transaction that
// each Store's listener turns into wake-ups of the watchers it concerns:
// its payload names the nodes whose sandboxes changed (WatchNode), "builds"
// (WatchBuilds) or "*" (every watcher); Watch wakes on every one.
package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/airlockdev/airlock/internal/store/migrations"
	"github.com/airlockdev/airlock/internal/store/sqlstore"
)

// Channel is the NOTIFY channel of changes to operations, sandboxes, nodes,
// pools and builds; a notification's payload says what it concerns
// (sqlstore.Dialect.NotifyTx). An empty payload concerns every watcher.
const Channel = "airlock_changes"

// MigrationLockKey is the pg_advisory_lock key held while migrating.
const MigrationLockKey int64 = 0x6169726c6f636b01 // "airlock" + 1

// MaxOpenConns bounds the query pool of one Store (the listener's
// connection is extra).
const MaxOpenConns = 16

// ApplicationName is reported in pg_stat_activity for the query pool;
// ListenerApplicationName for the LISTEN connection.
const (
	ApplicationName         = "airlock"
	ListenerApplicationName = "airlock-listen"
)

// PostgreSQL SQLSTATE codes the dialect maps.
const (
	codeUniqueViolation     = "23505"
	codeForeignKeyViolation = "23503"
)

// Dialect is PostgreSQL's sqlstore dialect.
func Dialect() sqlstore.Dialect {
	return sqlstore.Dialect{
		Name:                  "postgres",
		Rebind:                sqlstore.RebindDollar,
		ClaimLock:             "FOR UPDATE OF o SKIP LOCKED",
		RowLock:               "FOR UPDATE",
		ShareLock:             "FOR SHARE",
		NowMicro:              "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)",
		QuotaLock:             "FOR NO KEY UPDATE",
		TemplateUseLock:       "FOR SHARE",
		IsUniqueViolation:     func(err error) bool { return hasCode(err, codeUniqueViolation) },
		IsForeignKeyViolation: func(err error) bool { return hasCode(err, codeForeignKeyViolation) },
		NotifyTx: func(ctx context.Context, tx *sql.Tx, payload string) error {
			_, err := tx.ExecContext(ctx, `SELECT pg_notify($1, $2)`, Channel, payload)
			return err
		},
	}
}

// MigrationDialect is PostgreSQL's migrations dialect: BYTEA for binary
// columns and an advisory lock around the runner.
func MigrationDialect() migrations.Dialect {
	return migrations.Dialect{
		Name:      "postgres",
		BytesType: "BYTEA",
		Lock: func(ctx context.Context, conn *sql.Conn) (func() error, error) {
			if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, MigrationLockKey); err != nil {
				return nil, err
			}
			return func() error {
				_, err := conn.ExecContext(context.Background(), `SELECT pg_advisory_unlock($1)`, MigrationLockKey)
				return err
			}, nil
		},
	}
}

func hasCode(err error, code string) bool {
	var e *pgconn.PgError
	return errors.As(err, &e) && e.Code == code
}

// Store is store.Store on a PostgreSQL database.
type Store struct {
	*sqlstore.Store
	db        *sql.DB
	stop      context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// IdleInTransactionTimeout is the idle_in_transaction_session_timeout of
// the store's connections (unless the DSN sets one): PostgreSQL ends the
// session of a client idle that long inside a transaction, and its locks
// are released.
const IdleInTransactionTimeout = 5 * time.Second

// Open connects to the database at dsn (a URL or key=value string that pgx
// understands), applies pending migrations under an advisory lock and starts
// listening for changes. The listener is connected before Open returns, so
// a Watch made right after Open sees every later change of any process.
func Open(ctx context.Context, dsn string, logger *slog.Logger, opts ...sqlstore.Option) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("open postgres store: parse DSN: %w", err)
	}
	listenCfg := cfg.Copy()
	cfg.RuntimeParams["application_name"] = ApplicationName
	// A process that stops in the middle of a transaction (SIGSTOP, a
	// frozen VM, a partition) must not hold its row locks for ever: they
	// would block every other process's writes, the declaration of that
	// very node's death included. The store's transactions never wait on
	// anything but the database between two statements.
	if _, set := cfg.RuntimeParams["idle_in_transaction_session_timeout"]; !set {
		cfg.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.Itoa(int(IdleInTransactionTimeout.Milliseconds()))
	}
	listenCfg.RuntimeParams["application_name"] = ListenerApplicationName
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(MaxOpenConns)
	db.SetMaxIdleConns(MaxOpenConns / 2)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open postgres store %s: %w", redact(cfg), err)
	}
	if _, err := migrations.Apply(ctx, db, MigrationDialect(), logger); err != nil {
		db.Close()
		return nil, fmt.Errorf("open postgres store %s: %w", redact(cfg), err)
	}
	s := &Store{Store: sqlstore.New(db, Dialect(), opts...), db: db, done: make(chan struct{})}
	l := &listener{cfg: listenCfg, logger: logger, notify: s.Store.Notify, wake: s.Store.Broadcast}
	conn, err := l.connect(ctx)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open postgres store %s: listen: %w", redact(cfg), err)
	}
	lctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	go func() {
		defer close(s.done)
		l.run(lctx, conn)
	}()
	return s, nil
}

// redact names the database without its password for error messages.
func redact(cfg *pgx.ConnConfig) string {
	return fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
}

// Close stops the listener, closes the watcher channels and the database.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.stop()
		<-s.done
		werr := s.Store.Close()
		if err := s.db.Close(); err != nil {
			s.closeErr = fmt.Errorf("close postgres store: %w", err)
			return
		}
		s.closeErr = werr
	})
	return s.closeErr
}
