package api

import (
	"net/http"

	"github.com/airlockdev/airlock/internal/apiv1"
)

// metrics: GET /metrics (admin) serves the process's Prometheus metrics;
// the server's --metrics-listen serves the same without a key on an
// address of its own.
func (a *API) metrics(w http.ResponseWriter, r *http.Request, _ principal) {
	if a.cfg.Metrics == nil {
		a.writeError(w, r, errorf(apiv1.CodeNotSupported, "this server keeps no metrics"))
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	a.cfg.Metrics.Handler().ServeHTTP(w, r)
}
