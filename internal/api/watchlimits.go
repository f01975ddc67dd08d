package api

import (
	"net/http"
	"sync"

	"github.com/airlockdev/airlock/internal/apiv1"
)

// Caps on the live sandbox lists (GET /v1/watch/sandboxes) this process
// serves at once: every stream holds a connection and reads the list on
// every store change, so one key must not open thousands.
const (
	// WatchPerKey is how many watches one API key (or sandbox token) may
	// have open at once.
	WatchPerKey = 8
	// WatchPerProject is how many watches one project may have open.
	WatchPerProject = 32
)

// watchLimits counts open watches per caller and per project.
type watchLimits struct {
	perKey, perProject int

	mu      sync.Mutex
	key     map[string]int // by principal.limitKey
	project map[string]int
}

func newWatchLimits(perKey, perProject int) *watchLimits {
	return &watchLimits{perKey: perKey, perProject: perProject, key: map[string]int{}, project: map[string]int{}}
}

// acquire counts one watch of p, or answers 429 too_many_watches naming
// the cap. The returned release must be called once the watch ends.
func (l *watchLimits) acquire(p principal) (release func(), err error) {
	k, proj := p.limitKey(), p.project.String()
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.key[k] >= l.perKey:
		return nil, errorf(http.StatusTooManyRequests, apiv1.CodeTooManyWatches, "this API key has %d live sandbox lists open, the most allowed; close one (another tab) first", l.perKey)
	case l.project[proj] >= l.perProject:
		return nil, errorf(http.StatusTooManyRequests, apiv1.CodeTooManyWatches, "the project has %d live sandbox lists open, the most allowed; close some first", l.perProject)
	}
	l.key[k]++
	l.project[proj]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			decrement(l.key, k)
			decrement(l.project, proj)
		})
	}, nil
}

func decrement(m map[string]int, k string) {
	if m[k] <= 1 {
		delete(m, k)
		return
	}
	m[k]--
}
