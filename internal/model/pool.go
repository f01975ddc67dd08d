package model

import (
	"fmt"
	"time"

	"github.com/airlockdev/airlock/internal/textclip"
)

// SystemProject owns the sandboxes of warm pools until a create claims
// one: no API key belongs to it, so no project sees them, and they count
// against no project's quota. Its row is made by the store's migrations.
const SystemProject ProjectID = "prj_systemaaaaaaaaaaaaaaaaaaaa"

// PoolID identifies a warm pool: "pool_…".
type PoolID string

// NewPoolID returns a fresh random pool ID.
func NewPoolID() PoolID { return PoolID(newID("pool")) }

// ParsePoolID parses s as a pool ID.
func ParsePoolID(s string) (PoolID, error) {
	v, err := parseID("pool ID", "pool", s)
	return PoolID(v), err
}

func (id PoolID) String() string { return string(id) }

// Source is how a create got its sandbox running.
type Source string

// Sources.
const (
	SourceCold     Source = "cold"     // created and started for the create
	SourcePool     Source = "pool"     // claimed from a warm pool
	SourceSnapshot Source = "snapshot" // restored from a base snapshot
)

// ParseSource parses a stored or reported source; "" is cold.
func ParseSource(s string) (Source, error) {
	switch Source(s) {
	case "", SourceCold:
		return SourceCold, nil
	case SourcePool, SourceSnapshot:
		return Source(s), nil
	}
	return "", fmt.Errorf("%w: unknown sandbox source %q", ErrInvalid, textclip.Bytes(s, maxEcho))
}

// MaxPoolSize bounds a pool's target size (per node).
const MaxPoolSize = 1000

// PoolKey is what a create must match to be served by a pool: the
// template as the operator named it (a tag follows its moves), the
// execution environment by name, and the resources.
type PoolKey struct {
	Template    TemplateRef
	Environment string // environment name; "" on servers without environments
	CPUs        int
	MemoryMiB   int
}

// Pool is a warm pool: each node keeps Size sandboxes of the key's
// current release (and of the previous one, while a tag has moved
// recently) created, started and unclaimed, so that a matching create
// claims one instead of starting cold.
type Pool struct {
	ID   PoolID
	Key  PoolKey
	Size int // 0..MaxPoolSize ready sandboxes per node and release
	// Current is the digest the template resolved to when the pool was
	// last filled; Previous the one before it (empty: none). Both are
	// kept warm; older releases drain.
	Current  TemplateDigest
	Previous TemplateDigest
	Hits     int64 // creates served by a claim
	Misses   int64 // matching creates that found no ready sandbox
	// LastUsed is when a create last matched the pool (hit or miss); a
	// pool unused for longer than the drain period keeps no sandboxes.
	LastUsed  time.Time
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Releases are the digests the pool keeps warm, newest first.
func (p Pool) Releases() []TemplateDigest {
	var out []TemplateDigest
	if p.Current != "" {
		out = append(out, p.Current)
	}
	if p.Previous != "" && p.Previous != p.Current {
		out = append(out, p.Previous)
	}
	return out
}

// Validate checks the pool's size and resources.
func (p Pool) Validate() error {
	if p.Size < 0 || p.Size > MaxPoolSize {
		return fmt.Errorf("%w: pool size %d must be between 0 and %d", ErrInvalid, p.Size, MaxPoolSize)
	}
	if p.Key.Template.IsZero() {
		return fmt.Errorf("%w: a pool needs a template", ErrInvalid)
	}
	return Resources{CPUs: p.Key.CPUs, MemoryMiB: p.Key.MemoryMiB, DiskMiB: DefaultDiskMiB}.Validate()
}

// DefaultPoolDrainAfter is how long a pool no create matched keeps its
// sandboxes, unless the operator chose another period.
const DefaultPoolDrainAfter = time.Hour

// Drained reports whether the pool is unused for longer than drainAfter
// at now: it then keeps no sandboxes until a create matches it again.
func (p Pool) Drained(now time.Time, drainAfter time.Duration) bool {
	last := p.LastUsed
	if last.IsZero() {
		last = p.CreatedAt
	}
	return now.Sub(last) > drainAfter
}
