package api

import (
	"net/http"

	"github.com/airlockdev/airlock/internal/apiv1"
)

// healthz: 200 while the process serves HTTP.
func (a *API) healthz(w http.ResponseWriter, _ *http.Request, _ principal) {
	writeJSON(w, http.StatusOK, apiv1.Health{Status: "ok"})
}

// readyz: 200 when Config.Ready says the server can take work, 503 otherwise.
func (a *API) readyz(w http.ResponseWriter, r *http.Request, _ principal) {
	if a.cfg.Ready != nil {
		if err := a.cfg.Ready(r.Context()); err != nil {
			a.log.WarnContext(r.Context(), "not ready", "err", err)
			writeAPIError(w, errorf(apiv1.CodeUnavailable, "not ready (see the server log)"))
			return
		}
	}
	writeJSON(w, http.StatusOK, apiv1.Health{Status: "ok"})
}

// openapi serves the OpenAPI 3.1 document of this API.
func (a *API) openapi(w http.ResponseWriter, _ *http.Request, _ principal) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPIDocument)
}
