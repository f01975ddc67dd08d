package e2b

import (
	"context"
	"fmt"
	"net/http"

	"time"

	"github.com/airlockdev/airlock/internal/apiv1"

	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// wakeTimeout bounds how long a request waits for its sandbox to wake.
const wakeTimeout = 60 * time.Second

// ensureRunning wakes a suspended (resumes a paused) sandbox and waits
// until it runs; a sandbox on its way there is waited for. On failure it
// has answered 502, which E2B clients read as "sandbox not running".
// It returns the sandbox as it runs.
func (g *Gateway) ensureRunning(w http.ResponseWriter, r *http.Request, native *client.Client, sb model.Sandbox) (model.Sandbox, bool) {
	if sb.State == model.StateRunning {
		return sb, true
	}
	ctx, cancel := context.WithTimeout(r.Context(), wakeTimeout)
	defer cancel()
	sb, err := g.wake(ctx, native, sb.ID)
	if err != nil {
		writeError(w, http.StatusBadGateway, err.Error())
		return sb, false
	}
	return sb, true
}

// wake brings sandbox id to running, watching its state in the store
// (a sandbox access token cannot read operations). Another request waking
// it at the same time is fine: a refused (conflicting) wake is followed by
// waiting. A wake this call asked for that ends with the sandbox back
// where it was has failed.
func (g *Gateway) wake(ctx context.Context, native *client.Client, id model.SandboxID) (model.Sandbox, error) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	asked := false
	for {
		sb, err := g.cfg.Sandboxes.GetSandboxByID(ctx, id)
		if err != nil {
			if ctx.Err() != nil {
				return sb, fmt.Errorf("sandbox %s did not start running in time", id)
			}
			return sb, fmt.Errorf("sandbox %s: %w", id, err)
		}
		var kind model.OperationKind
		switch sb.State {
		case model.StateRunning:
			return sb, nil
		case model.StateSuspended:
			kind = model.OpWake
		case model.StatePaused:
			kind = model.OpResume
		case model.StateDeleting, model.StateDeleted, model.StateFailed:
			return sb, fmt.Errorf("sandbox %s is %s", id, sb.State)
		}
		if kind != "" {
			if asked {
				return sb, fmt.Errorf("%s sandbox %s failed: %s", kind, id, sb.StateReason)
			}
			_, err := native.LifecycleSandbox(ctx, id, kind)
			switch {
			case err == nil:
				asked = true
			case client.IsCode(err, apiv1.CodeInvalidTransition), client.IsCode(err, apiv1.CodeSandboxBusy):
				// Someone else moved it, or is moving it; look again.
			default:
				return sb, fmt.Errorf("%s sandbox %s: %w", kind, id, err)
			}
		}
		select {
		case <-ctx.Done():
			return sb, fmt.Errorf("sandbox %s did not start running in time (%s)", id, sb.State)
		case <-tick.C:
		}
	}
}
