package api

import (
	"context"
	"net/http"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/guestops"
	"github.com/airlockdev/airlock/internal/model"
)

// guestOf returns the guest of a running sandbox of the caller's project
// named by the {id} path value.
func (a *API) guestOf(ctx context.Context, r *http.Request, p principal) (model.Sandbox, guestops.Guest, error) {
	sb, err := a.sandboxOf(ctx, r, p)
	if err != nil {
		return sb, nil, err
	}
	if sb.State != model.StateRunning {
		return sb, nil, notRunning(sb)
	}
	if a.cfg.Guests == nil {
		return sb, nil, errorf(apiv1.CodeNotSupported, "this server does not host sandboxes")
	}
	guest, err := a.cfg.Guests.Guest(sb.ID)
	if err != nil {
		return sb, nil, err
	}
	a.touch(sb.ID) // reaching into the sandbox (processes, files) is activity
	return sb, guest, nil
}

// notRunning is the error of a request that needs sb running.
func notRunning(sb model.Sandbox) error {
	return guestops.NotRunning(sb.ID, sb.State)
}

// listProcesses: GET /v1/sandboxes/{id}/processes → 200 ProcessList: the
// running processes and the exited ones the guest still remembers.
func (a *API) listProcesses(w http.ResponseWriter, r *http.Request, p principal) {
	if len(r.URL.Query()) > 0 {
		a.writeError(w, r, badRequest("this route takes no query parameters"))
		return
	}
	_, guest, err := a.guestOf(r.Context(), r, p)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	procs, err := guest.Processes(r.Context())
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apiv1.ProcessList{Processes: procs})
}

// processOf parses the {process_id} path value.
func processOf(r *http.Request) (model.ProcessID, error) {
	return model.ParseProcessID(r.PathValue("process_id"))
}

// getProcess: GET /v1/sandboxes/{id}/processes/{process_id}[?wait=30s] → 200
// Process. With wait it answers as soon as the process has exited, or with
// its current state when the wait elapses.
func (a *API) getProcess(w http.ResponseWriter, r *http.Request, p principal) {
	for name := range r.URL.Query() {
		if name != "wait" {
			a.writeError(w, r, badRequest("the only query parameter is wait"))
			return
		}
	}
	wait, err := parseWait(r.URL.Query())
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	pid, err := processOf(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	_, guest, err := a.guestOf(r.Context(), r, p)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	proc, err := guest.Process(r.Context(), pid, wait)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, proc)
}

// signalProcess: POST /v1/sandboxes/{id}/processes/{process_id}/signal
// {"signal":"TERM"} → 200 Process (its state right after the signal).
func (a *API) signalProcess(ctx context.Context, c *call[apiv1.SignalRequest]) (*reply, error) {
	sig, err := model.ParseSignal(c.in.Signal)
	if err != nil {
		return nil, err
	}
	pid, err := processOf(c.r)
	if err != nil {
		return nil, err
	}
	_, guest, err := a.guestOf(ctx, c.r, c.p)
	if err != nil {
		return nil, err
	}
	proc, err := guest.Signal(ctx, pid, sig)
	if err != nil {
		return nil, err
	}
	return idempotentReply(ctx, a, c, http.StatusOK, proc)
}
