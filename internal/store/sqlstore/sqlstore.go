// Package sqlstore is the one implementation of store.Store over
// database/sql. The SQLite and PostgreSQL packages open a *sql.DB, run the
// shared migrations and wrap a Store built here with their Dialect; every
// query is written once, with '?' placeholders, in SQL both databases accept.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/tracing"
)

// Dialect is what differs between the databases.
type Dialect struct {
	// Name is used in errors and logs.
	Name string
	// Rebind rewrites the '?' placeholders of a query into the database's
	// syntax; nil leaves them alone (SQLite). PostgreSQL uses RebindDollar.
	Rebind func(query string) string
	// ClaimLock is appended to the SELECT that picks the operation to claim,
	// whose operations table is aliased "o": PostgreSQL
	// "FOR UPDATE OF o SKIP LOCKED"; empty for SQLite, whose immediate
	// transactions already serialize writers.
	ClaimLock string
	// RowLock is appended to a SELECT of a row the transaction is about to
	// change: PostgreSQL "FOR UPDATE"; empty for SQLite.
	RowLock string
	// QuotaLock is appended to the SELECT of a project's quota in
	// CreateSandbox, to serialize the creates of one project: PostgreSQL
	// "FOR NO KEY UPDATE" (it does not block inserts that merely reference
	// the project); empty for SQLite, whose immediate transactions already
	// serialize writers.
	QuotaLock string
	// TemplateUseLock is appended to the SELECT of a live template's row by
	// a transaction that makes it used (a sandbox create, a tag), so that a
	// concurrent delete or collection, which locks the row exclusively,
	// waits for it: PostgreSQL "FOR SHARE"; empty for SQLite.
	TemplateUseLock string
	// ShareLock is appended to a SELECT of a row whose state a write
	// depends on (a node's incarnation, for fencing): PostgreSQL "FOR
	// SHARE"; empty for SQLite.
	ShareLock string
	// NowMicro is the database's clock in unix microseconds, as an SQL
	// expression; empty: SQLite's julianday('now') (the host's clock, the
	// only one an embedded database has).
	NowMicro string
	// IsUniqueViolation reports whether err is a unique/primary-key violation.
	IsUniqueViolation func(err error) bool
	// IsForeignKeyViolation reports whether err is a foreign-key violation.
	IsForeignKeyViolation func(err error) bool
	// NotifyTx, if set, is called inside every transaction that changes an
	// operation, sandbox, node, pool or build row, so other processes
	// sharing the database learn of it at commit (PostgreSQL: pg_notify).
	// payload names what the change concerns (see watch.go's topics: space
	// separated, "*" for every watcher); the other processes hand it to
	// Store.Notify. Watchers in this process are woken after the commit in
	// any case.
	NotifyTx func(ctx context.Context, tx *sql.Tx, payload string) error
	// CacheStatements prepares each query once per Store (per connection)
	// and keeps it (see stmtCache): SQLite, whose driver compiles every
	// unprepared query anew.
	CacheStatements bool
}

// Store implements store.Store over a *sql.DB.
type Store struct {
	db     *sql.DB
	d      Dialect
	watch  *broadcaster
	onErr  atomic.Pointer[func(op string)] // see OnError
	tracer trace.Tracer                    // nil: not traced (trace.go)
	stmts  *stmtCache                      // nil: Dialect.CacheStatements unset
}

var _ store.Store = (*Store)(nil)

// New returns a Store over db, which must already be migrated. The Store
// does not own db: Close only stops the watchers; the caller closes db.
func New(db *sql.DB, d Dialect, opts ...Option) *Store {
	s := &Store{db: db, d: d, watch: newBroadcaster()}
	if d.CacheStatements {
		s.stmts = &stmtCache{m: map[string]*sql.Stmt{}}
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// DB returns the underlying database handle.
func (s *Store) DB() *sql.DB { return s.db }

// Broadcast wakes every watcher of this Store. The PostgreSQL listener calls
// it when it reconnected (notifications sent meanwhile are lost).
func (s *Store) Broadcast() { s.watch.Broadcast() }

// Notify wakes the watchers of this Store that a change with the NOTIFY
// payload (Dialect.NotifyTx's) concerns. The PostgreSQL listener calls it
// for notifications from every process (its own included).
func (s *Store) Notify(payload string) { s.watch.Notify(parsePayload(payload)) }

// Watch implements store.Store.
func (s *Store) Watch(ctx context.Context) <-chan struct{} { return s.watch.Subscribe(ctx) }

// WatchNode implements store.Store.
func (s *Store) WatchNode(ctx context.Context, node model.NodeID) <-chan struct{} {
	return s.watch.SubscribeTopic(ctx, nodeTopic(node))
}

// WatchBuilds implements store.Store.
func (s *Store) WatchBuilds(ctx context.Context) <-chan struct{} {
	return s.watch.SubscribeTopic(ctx, topicBuilds)
}

// Close closes every watcher channel and the cached statements. It does not
// close the database.
func (s *Store) Close() error {
	s.watch.Close()
	if err := s.stmts.close(); err != nil {
		return fmt.Errorf("close prepared statements: %w", err)
	}
	return nil
}

// q rebinds a query for the dialect.
func (s *Store) q(query string) string {
	if s.d.Rebind == nil {
		return query
	}
	return s.d.Rebind(query)
}

// RebindDollar rewrites '?' placeholders as $1, $2, … . Question marks inside
// single-quoted literals, double-quoted identifiers and comments are left
// alone.
func RebindDollar(query string) string {
	var b strings.Builder
	b.Grow(len(query) + 16)
	n := 0
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(query) && query[j] != c {
				j++
			}
			if j >= len(query) {
				b.WriteString(query[i:])
				return b.String()
			}
			b.WriteString(query[i : j+1])
			i = j
		case c == '-' && i+1 < len(query) && query[i+1] == '-':
			j := strings.IndexByte(query[i:], '\n')
			if j < 0 {
				b.WriteString(query[i:])
				return b.String()
			}
			b.WriteString(query[i : i+j+1])
			i += j
		case c == '?':
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// OnError makes the store call f with the name of every database call
// that fails (begin, commit, exec, query, query_row; metrics). Absent
// rows, unique and foreign-key violations (answers the store maps) and
// cancelled contexts are not failures.
func (s *Store) OnError(f func(op string)) { s.onErr.Store(&f) }

// observe reports err of the database call op to OnError's function.
func (s *Store) observe(op string, err error) {
	if err == nil || errors.Is(err, sql.ErrNoRows) || errors.Is(err, context.Canceled) ||
		s.d.IsUniqueViolation != nil && s.d.IsUniqueViolation(err) ||
		s.d.IsForeignKeyViolation != nil && s.d.IsForeignKeyViolation(err) {
		return
	}
	if f := s.onErr.Load(); f != nil && *f != nil {
		(*f)(op)
	}
}

// exec, queryRow and query run outside a transaction.
func (s *Store) exec(ctx context.Context, query string, args ...any) (_ sql.Result, err error) {
	ctx, span := s.startSpan(ctx, 1)
	defer func() { tracing.End(span, err) }()
	var res sql.Result
	if st := s.stmt(ctx, s.q(query)); st != nil {
		res, err = st.ExecContext(ctx, args...)
	} else {
		res, err = s.db.ExecContext(ctx, s.q(query), args...)
	}
	s.observe("exec", err)
	return res, err
}

func (s *Store) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	ctx, span := s.startSpan(ctx, 1)
	var row *sql.Row
	if st := s.stmt(ctx, s.q(query)); st != nil {
		row = st.QueryRowContext(ctx, args...)
	} else {
		row = s.db.QueryRowContext(ctx, s.q(query), args...)
	}
	s.observe("query_row", row.Err())
	tracing.End(span, row.Err())
	return row
}

func (s *Store) query(ctx context.Context, query string, args ...any) (_ *sql.Rows, err error) {
	ctx, span := s.startSpan(ctx, 1)
	defer func() { tracing.End(span, err) }()
	var rows *sql.Rows
	if st := s.stmt(ctx, s.q(query)); st != nil {
		rows, err = st.QueryContext(ctx, args...)
	} else {
		rows, err = s.db.QueryContext(ctx, s.q(query), args...)
	}
	s.observe("query", err)
	return rows, err
}

// tx is a transaction with the dialect's rebinding.
type tx struct {
	s  *Store
	tx *sql.Tx
	// ch collects what the transaction's change concerns (concerns and its
	// kin), for the watchers woken at commit.
	ch *change
}

// concerns records that the transaction changes operations or sandboxes
// placed on nodes (or the nodes' own rows): their WatchNode watchers are
// woken at commit, with the coarse ones. An empty ID (an unplaced sandbox,
// which no node's operation loop may take) adds no node; with none the
// change wakes coarse watchers only.
func (t tx) concerns(nodes ...model.NodeID) {
	t.ch.add()
	for _, n := range nodes {
		if n != "" {
			t.ch.add(nodeTopic(n))
		}
	}
}

// concernsAll records that the change concerns every node (a cluster-wide
// change: nodes declared dead, pools set).
func (t tx) concernsAll() { t.ch.add(topicAll) }

// concernsBuilds records that the change is of template builds.
func (t tx) concernsBuilds() { t.ch.add(topicBuilds) }

func (t tx) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	var res sql.Result
	var err error
	if st := t.s.stmt(ctx, t.s.q(query)); st != nil {
		res, err = t.tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	} else {
		res, err = t.tx.ExecContext(ctx, t.s.q(query), args...)
	}
	t.s.observe("exec", err)
	return res, err
}

func (t tx) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	var row *sql.Row
	if st := t.s.stmt(ctx, t.s.q(query)); st != nil {
		row = t.tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	} else {
		row = t.tx.QueryRowContext(ctx, t.s.q(query), args...)
	}
	t.s.observe("query_row", row.Err())
	return row
}

// write runs fn in a transaction and commits it. With notify set (the
// transaction changes operations, sandboxes, nodes, pools or builds) it
// also calls the dialect's NotifyTx inside the transaction and wakes local
// watchers after the commit: those of what fn said the change concerns
// (tx.concerns and its kin), or every watcher if fn said nothing.
func (s *Store) write(ctx context.Context, notify bool, fn func(t tx) error) (err error) {
	ctx, span := s.startSpan(ctx, 1)
	defer func() { tracing.End(span, err) }()
	sqlTx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		s.observe("begin", err)
		return fmt.Errorf("begin: %w", err)
	}
	var ch change
	t := tx{s: s, tx: sqlTx, ch: &ch}
	if err := fn(t); err != nil {
		_ = sqlTx.Rollback()
		return err
	}
	if notify && !ch.scoped {
		ch.add(topicAll)
	}
	if notify && s.d.NotifyTx != nil {
		if err := s.d.NotifyTx(ctx, sqlTx, ch.payload()); err != nil {
			_ = sqlTx.Rollback()
			return fmt.Errorf("notify: %w", err)
		}
	}
	if err := sqlTx.Commit(); err != nil {
		s.observe("commit", err)
		return fmt.Errorf("commit: %w", err)
	}
	if notify {
		s.watch.Notify(ch)
	}
	return nil
}

// errNotFound maps sql.ErrNoRows to store.ErrNotFound.
func errNotFound(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	return err
}

// insertErr maps a failed INSERT's error: unique violations become
// store.ErrAlreadyExists and foreign-key violations store.ErrNotFound (a
// referenced row is missing).
func (s *Store) insertErr(err error) error {
	switch {
	case s.d.IsUniqueViolation != nil && s.d.IsUniqueViolation(err):
		return fmt.Errorf("%w: %v", store.ErrAlreadyExists, err)
	case s.d.IsForeignKeyViolation != nil && s.d.IsForeignKeyViolation(err):
		return fmt.Errorf("%w: referenced row: %v", store.ErrNotFound, err)
	}
	return err
}

// micro converts a time to the stored unix microseconds.
func micro(t time.Time) int64 { return t.UnixMicro() }

// fromMicro converts stored unix microseconds to a UTC time.
func fromMicro(v int64) time.Time { return time.UnixMicro(v).UTC() }

// microPtr converts an optional time.
func microPtr(t *time.Time) sql.NullInt64 {
	if t == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMicro(), Valid: true}
}

// fromMicroPtr converts an optional stored time.
func fromMicroPtr(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMicro(v.Int64)
	return &t
}

// nonNil returns b, or an empty slice when b is nil, so NOT NULL binary
// columns never receive NULL.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// placeholders returns "?, ?, …" with n marks.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}
