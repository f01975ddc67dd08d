package api

import (
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

// The caps of API.watches, in the order New gives them to streamlimit.New.
const (
	watchCapKey     = iota // WatchPerKey, by principal.limitKey
	watchCapProject        // WatchPerProject, by project
)

// acquireWatch counts one watch of p, or answers 429 too_many_watches
// naming the cap. The returned release must be called once the watch ends.
func (a *API) acquireWatch(p principal) (release func(), err error) {
	release, full := a.watches.Acquire(p.limitKey(), p.project.String())
	switch full {
	case watchCapKey:
		return nil, errorf(apiv1.CodeTooManyWatches, "this API key has %d live sandbox lists open, the most allowed; close one (another tab) first", a.watches.Max(full))
	case watchCapProject:
		return nil, errorf(apiv1.CodeTooManyWatches, "the project has %d live sandbox lists open, the most allowed; close some first", a.watches.Max(full))
	}
	return release, nil
}
