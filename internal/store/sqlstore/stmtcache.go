package sqlstore

import (
	"context"
	"database/sql"
	"sync"
)

// MaxCachedStatements bounds a Store's statement cache: queries built with
// a varying number of placeholders (IN lists) would otherwise fill it; past
// the bound, new queries run unprepared.
const MaxCachedStatements = 512

// stmtCache holds a *sql.Stmt per query text, prepared once per Store (and
// by database/sql once per connection it runs on). modernc.org/sqlite
// compiles every query that is not a prepared statement anew, which costs
// more than running the short statements the store issues.
type stmtCache struct {
	mu     sync.Mutex
	m      map[string]*sql.Stmt
	closed bool
}

// stmt returns the prepared statement of query (already rebound), preparing
// it on first use; nil when the Store caches none, the cache is full or
// closed, or the query does not prepare (the caller runs it unprepared and
// reports its error).
func (s *Store) stmt(ctx context.Context, query string) *sql.Stmt {
	c := s.stmts
	if c == nil {
		return nil
	}
	c.mu.Lock()
	st, ok := c.m[query]
	full := c.closed || len(c.m) >= MaxCachedStatements
	c.mu.Unlock()
	if ok || full {
		return st
	}
	// Prepared outside the lock: a slow prepare holds up no other query.
	st, err := s.db.PrepareContext(ctx, query)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev, ok := c.m[query]; ok || c.closed || len(c.m) >= MaxCachedStatements {
		_ = st.Close()
		return prev
	}
	c.m[query] = st
	return st
}

// close closes every cached statement; later queries run unprepared.
func (c *stmtCache) close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	var first error
	for q, st := range c.m {
		if err := st.Close(); err != nil && first == nil {
			first = err
		}
		delete(c.m, q)
	}
	return first
}
