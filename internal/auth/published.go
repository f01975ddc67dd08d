package auth

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"sync"
	"time"
)

// KeyLookup finds the public key kid as another process published it (the
// store's attach_keys). found is false for a kid nobody published; err is
// for a lookup that failed (the database unreachable).
type KeyLookup func(ctx context.Context, kid string) (key PublicKey, found bool, err error)

// Defaults of PublishedKeysOptions.
const (
	DefaultKeyMissTTL      = 5 * time.Second
	DefaultKeyRefreshAfter = time.Minute
	DefaultMaxCachedKeys   = 1024
	DefaultKeyLookupRate   = 10 // per second, all kids together
	DefaultKeyLookupBurst  = 20
	DefaultKeyLookupWait   = 2 * time.Second
)

// PublishedKeysOptions configure Verifier.WithPublished.
type PublishedKeysOptions struct {
	Lookup KeyLookup // required
	// MissTTL: a kid that was not found is not looked up again for this
	// long; 0: DefaultKeyMissTTL.
	MissTTL time.Duration
	// RefreshAfter: a cached key is looked up again (its end may have been
	// set by a rotation, or the row deleted) when used after this long; 0:
	// DefaultKeyRefreshAfter. A failed refresh keeps the cached key.
	RefreshAfter time.Duration
	// MaxKeys bounds the cached keys (the oldest fetched go first); 0:
	// DefaultMaxCachedKeys. Misses are bounded to 4×MaxKeys.
	MaxKeys int
	// LookupRate and LookupBurst bound all lookups together (a token
	// bucket), so that tokens with ever new forged kids cannot hammer the
	// store; beyond it an unknown kid is refused without a lookup. 0: the
	// defaults.
	LookupRate  float64
	LookupBurst int
	// Timeout bounds one lookup; 0: DefaultKeyLookupWait.
	Timeout time.Duration
	Now     func() time.Time // the cache's clock; nil: time.Now
}

// WithPublished returns a Verifier that knows v's keys and, for a kid it
// does not know, the keys other processes published (opts.Lookup), cached.
// Only well-formed kids are looked up.
func (v *Verifier) WithPublished(opts PublishedKeysOptions) (*Verifier, error) {
	if opts.Lookup == nil {
		return nil, fmt.Errorf("auth: WithPublished needs a Lookup")
	}
	if opts.MissTTL <= 0 {
		opts.MissTTL = DefaultKeyMissTTL
	}
	if opts.RefreshAfter <= 0 {
		opts.RefreshAfter = DefaultKeyRefreshAfter
	}
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = DefaultMaxCachedKeys
	}
	if opts.LookupRate <= 0 {
		opts.LookupRate = DefaultKeyLookupRate
	}
	if opts.LookupBurst <= 0 {
		opts.LookupBurst = DefaultKeyLookupBurst
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultKeyLookupWait
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	p := &publishedKeys{opts: opts, keys: map[string]cachedKey{}, misses: map[string]time.Time{},
		inflight: map[string]chan struct{}{}, tokens: float64(opts.LookupBurst)}
	return &Verifier{keys: v.keys, published: p}, nil
}

// publishedKeys is the cache of keys other processes published.
type publishedKeys struct {
	opts PublishedKeysOptions

	mu       sync.Mutex
	keys     map[string]cachedKey
	misses   map[string]time.Time // kid → when it was last not found (or the lookup failed)
	inflight map[string]chan struct{}
	tokens   float64 // lookup budget
	last     time.Time
}

type cachedKey struct {
	key     PublicKey
	fetched time.Time
}

// get returns the published key kid, looking it up if it is not cached (or
// its cache entry is old) and the budget allows.
func (p *publishedKeys) get(kid string) (PublicKey, bool) {
	if checkKeyID(kid) != nil {
		return PublicKey{}, false
	}
	p.mu.Lock()
	for {
		now := p.opts.Now()
		c, cached := p.keys[kid]
		if cached && now.Sub(c.fetched) < p.opts.RefreshAfter {
			p.mu.Unlock()
			return c.key, true
		}
		if at, missed := p.misses[kid]; missed && now.Sub(at) < p.opts.MissTTL {
			p.mu.Unlock()
			return c.key, cached // a failed refresh keeps a cached key
		}
		if ch, busy := p.inflight[kid]; busy {
			p.mu.Unlock()
			<-ch
			p.mu.Lock()
			if c, ok := p.keys[kid]; ok {
				p.mu.Unlock()
				return c.key, true
			}
			if _, missed := p.misses[kid]; missed {
				p.mu.Unlock()
				return PublicKey{}, false
			}
			continue
		}
		if !p.allow(now) {
			p.mu.Unlock()
			return c.key, cached
		}
		ch := make(chan struct{})
		p.inflight[kid] = ch
		p.mu.Unlock()

		ctx, cancel := context.WithTimeout(context.Background(), p.opts.Timeout)
		key, found, err := p.opts.Lookup(ctx, kid)
		cancel()
		if found && (key.ID != kid || len(key.Key) != ed25519.PublicKeySize) {
			found, err = false, fmt.Errorf("lookup of %q returned a bad key", kid)
		}

		p.mu.Lock()
		delete(p.inflight, kid)
		close(ch)
		now = p.opts.Now()
		switch {
		case found:
			delete(p.misses, kid)
			p.put(kid, cachedKey{key: key, fetched: now})
		case err == nil: // not published (any more)
			delete(p.keys, kid)
			p.miss(kid, now)
		default: // the lookup failed: keep what was cached
			p.miss(kid, now)
		}
		c, cached = p.keys[kid]
		p.mu.Unlock()
		return c.key, cached
	}
}

// allow takes one lookup from the budget; p.mu is held.
func (p *publishedKeys) allow(now time.Time) bool {
	if !p.last.IsZero() {
		p.tokens = min(float64(p.opts.LookupBurst), p.tokens+now.Sub(p.last).Seconds()*p.opts.LookupRate)
	}
	p.last = now
	if p.tokens < 1 {
		return false
	}
	p.tokens--
	return true
}

// put caches a key, evicting the oldest fetched one when full; p.mu is held.
func (p *publishedKeys) put(kid string, c cachedKey) {
	if _, ok := p.keys[kid]; !ok && len(p.keys) >= p.opts.MaxKeys {
		var oldest string
		for k, v := range p.keys {
			if oldest == "" || v.fetched.Before(p.keys[oldest].fetched) {
				oldest = k
			}
		}
		delete(p.keys, oldest)
	}
	p.keys[kid] = c
}

// miss records a kid not found; p.mu is held. When the record is full of
// fresh misses the kid is not recorded (the lookup budget still bounds it).
func (p *publishedKeys) miss(kid string, now time.Time) {
	if len(p.misses) >= 4*p.opts.MaxKeys {
		for k, at := range p.misses {
			if now.Sub(at) >= p.opts.MissTTL {
				delete(p.misses, k)
			}
		}
		if len(p.misses) >= 4*p.opts.MaxKeys {
			return
		}
	}
	p.misses[kid] = now
}
