package e2b

import (
	"net/http"

	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/e2b/wake"
	"github.com/airlockdev/airlock/internal/model"
)

// ensureRunning wakes a suspended (resumes a paused) sandbox and waits
// until it runs (wake.Running, as the control API's connect does); a
// sandbox on its way there is waited for. On failure it has answered 502,
// which E2B clients read as "sandbox not running". It returns the sandbox
// as it runs.
func (g *Gateway) ensureRunning(w http.ResponseWriter, r *http.Request, native *client.Client, sb model.Sandbox) (model.Sandbox, bool) {
	if sb.State == model.StateRunning {
		return sb, true
	}
	got, _, err := wake.Running(r.Context(), native, sb.ID)
	if err != nil {
		if r.Context().Err() == nil {
			writeNotRunning(w, sb.ID, sb.State, err.Error())
		}
		return sb, false
	}
	sb.State, sb.UpdatedAt = model.StateRunning, got.UpdatedAt
	return sb, true
}
