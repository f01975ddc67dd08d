package api

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/airlockdev/airlock/internal/apiv1"
)

// Defaults of Config.MutationRate and MutationBurst: per API key.
const (
	DefaultMutationRate  = 50  // mutations per second
	DefaultMutationBurst = 200 // mutations at once
)

// maxLimiters bounds the per-key limiters kept; beyond it, idle ones go.
const maxLimiters = 10000

// keyLimits is a token bucket per API key for mutating requests.
type keyLimits struct {
	rate  rate.Limit
	burst int

	mu   sync.Mutex
	keys map[string]*keyLimit // by principal.limitKey
}

type keyLimit struct {
	lim  *rate.Limiter
	used time.Time
}

func newKeyLimits(perSecond float64, burst int) *keyLimits {
	return &keyLimits{rate: rate.Limit(perSecond), burst: burst, keys: map[string]*keyLimit{}}
}

// allow takes a token for key; if none is left it says how long to wait.
func (k *keyLimits) allow(key string, now time.Time) (bool, time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	l := k.keys[key]
	if l == nil {
		if len(k.keys) >= maxLimiters {
			k.evictLocked(now)
		}
		l = &keyLimit{lim: rate.NewLimiter(k.rate, k.burst)}
		k.keys[key] = l
	}
	l.used = now
	r := l.lim.ReserveN(now, 1)
	if !r.OK() {
		return false, time.Second
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// evictLocked drops the limiters idle longest (a full bucket's worth of
// idleness means they are full again: forgetting them changes nothing).
func (k *keyLimits) evictLocked(now time.Time) {
	full := time.Duration(float64(k.burst) / float64(k.rate) * float64(time.Second))
	for id, l := range k.keys {
		if now.Sub(l.used) >= full {
			delete(k.keys, id)
		}
	}
	if len(k.keys) >= maxLimiters { // everyone is busy: forget an arbitrary half
		n := 0
		for id := range k.keys {
			if n >= maxLimiters/2 {
				break
			}
			delete(k.keys, id)
			n++
		}
	}
}

// rateLimited answers 429 rate_limited with Retry-After if p's key has
// used up its mutations.
func (a *API) rateLimited(w http.ResponseWriter, r *http.Request, p principal) bool {
	if a.limits == nil || p.limitKey() == "" {
		return false
	}
	ok, wait := a.limits.allow(p.limitKey(), a.cfg.Now())
	if ok {
		return false
	}
	secs := max(1, int((wait+time.Second-1)/time.Second))
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	a.writeError(w, r, errorf(apiv1.CodeRateLimited,
		"this API key made too many changes in a short time; retry in %d s", secs))
	return true
}
