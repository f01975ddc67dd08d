package server

import (
	"fmt"
	"net/http"

	"github.com/airlockdev/airlock/internal/api"
	"github.com/airlockdev/airlock/internal/console"
)

// mountConsole serves the web console at /ui/ on mux, its sessions
// checked by the API a (request IDs, the access log and panic recovery
// are the API's). The E2B gateway passes /ui/ to mux as any non-E2B path.
func mountConsole(mux *http.ServeMux, a *api.API) error {
	c, err := console.New(console.Config{Sessions: a})
	if err != nil {
		return fmt.Errorf("web console: %w", err)
	}
	mux.Handle(console.Prefix, a.Wrap(c.Handler()))
	return nil
}
