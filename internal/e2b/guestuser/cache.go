package guestuser

import (
	"context"
	"sync"
	"time"

	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// cacheTTL is how long a sandbox's accounts are reused: users added in the
// sandbox are seen this long after.
const cacheTTL = 30 * time.Second

// maxCached bounds the cache; at the bound it is emptied (cheap, rare).
const maxCached = 4096

// Cache remembers each sandbox's accounts for a short while, so a stream of
// E2B requests does not read /etc/passwd every time. Safe for concurrent use.
type Cache struct {
	mu      sync.Mutex
	entries map[model.SandboxID]cached
	now     func() time.Time
}

type cached struct {
	acc Accounts
	at  time.Time
}

// NewCache returns an empty cache.
func NewCache() *Cache {
	return &Cache{entries: make(map[model.SandboxID]cached), now: time.Now}
}

// Lookup is Lookup of the package, through the cache.
func (c *Cache) Lookup(ctx context.Context, native *client.Client, sb model.SandboxID, name string) (User, error) {
	acc, err := c.Accounts(ctx, native, sb)
	if err != nil {
		return User{}, err
	}
	return acc.Pick(name)
}

// Accounts is ReadAccounts through the cache.
func (c *Cache) Accounts(ctx context.Context, native *client.Client, sb model.SandboxID) (Accounts, error) {
	c.mu.Lock()
	e, ok := c.entries[sb]
	c.mu.Unlock()
	if ok && c.now().Sub(e.at) < cacheTTL {
		return e.acc, nil
	}
	acc, err := ReadAccounts(ctx, native, sb)
	if err != nil {
		return Accounts{}, err
	}
	c.mu.Lock()
	if len(c.entries) >= maxCached {
		clear(c.entries)
	}
	c.entries[sb] = cached{acc: acc, at: c.now()}
	c.mu.Unlock()
	return acc, nil
}
