package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/procctl"
)

// agentOf returns the guest agent of a running sandbox of the caller's
// project named by the {id} path value.
func (a *API) agentOf(ctx context.Context, r *http.Request, p principal) (model.Sandbox, *agentclient.Client, error) {
	sb, err := a.sandboxOf(ctx, r, p)
	if err != nil {
		return sb, nil, err
	}
	if sb.State != model.StateRunning {
		return sb, nil, notRunning(sb)
	}
	if a.cfg.Agents == nil {
		return sb, nil, errorf(apiv1.CodeNotSupported, "this server does not host sandboxes")
	}
	agent, err := a.cfg.Agents.Agent(sb.ID)
	if err != nil {
		return sb, nil, procError(err)
	}
	a.touch(sb.ID) // reaching into the sandbox (processes, files) is activity
	return sb, agent, nil
}

// notRunning is the error of a request that needs sb running.
func notRunning(sb model.Sandbox) *apiError {
	pe := procctl.NotRunning(sb.ID, sb.State)
	return statusErrorf(pe.Status, pe.Code, "%s", pe.Message)
}

// procError turns an agent call's error into the API error.
func procError(err error) *apiError {
	pe := procctl.PublicError(err)
	return statusErrorf(pe.Status, pe.Code, "%s", pe.Message)
}

// listProcesses: GET /v1/sandboxes/{id}/processes → 200 ProcessList: the
// running processes and the exited ones the guest still remembers.
func (a *API) listProcesses(w http.ResponseWriter, r *http.Request, p principal) {
	if len(r.URL.Query()) > 0 {
		a.writeError(w, r, badRequest("this route takes no query parameters"))
		return
	}
	_, agent, err := a.agentOf(r.Context(), r, p)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), procctl.CallTimeout)
	defer cancel()
	sts, err := agent.List(ctx)
	if err != nil {
		a.writeError(w, r, procError(err))
		return
	}
	out := apiv1.ProcessList{Processes: make([]apiv1.Process, 0, len(sts))}
	for _, st := range sts {
		out.Processes = append(out.Processes, procctl.ProcessOut(st))
	}
	writeJSON(w, http.StatusOK, out)
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
	_, agent, err := a.agentOf(r.Context(), r, p)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), procctl.CallTimeout)
	defer cancel()
	st, err := agent.Status(ctx, pid.String())
	if err != nil {
		a.writeError(w, r, procError(err))
		return
	}
	if st.Running && wait > 0 {
		wctx, wcancel := context.WithTimeout(r.Context(), wait)
		defer wcancel()
		done, err := agent.Wait(wctx, pid.String())
		switch {
		case err == nil:
			st = done
		case errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil:
			// The wait elapsed: answer the current state.
			if st, err = agent.Status(ctx, pid.String()); err != nil {
				a.writeError(w, r, procError(err))
				return
			}
		case errors.Is(err, agentclient.ErrUnsupported):
			// An older agent: answer without waiting.
		default:
			a.writeError(w, r, procError(err))
			return
		}
	}
	writeJSON(w, http.StatusOK, procctl.ProcessOut(st))
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
	_, agent, err := a.agentOf(ctx, c.r, c.p)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, procctl.CallTimeout)
	defer cancel()
	if err := agent.Signal(ctx, pid.String(), sig.AgentName()); err != nil {
		return nil, procError(err)
	}
	// Give a process that dies of the signal a moment to be reported so.
	st, err := agent.Status(ctx, pid.String())
	if err == nil && st.Running {
		wctx, wcancel := context.WithTimeout(ctx, 100*time.Millisecond)
		if done, werr := agent.Wait(wctx, pid.String()); werr == nil {
			st = done
		}
		wcancel()
	}
	if err != nil {
		return nil, procError(err)
	}
	rep, rec, err := c.reply(http.StatusOK, procctl.ProcessOut(st))
	if err != nil {
		return nil, err
	}
	if err := a.putIdempotency(ctx, rec); err != nil {
		return nil, err
	}
	return rep, nil
}
