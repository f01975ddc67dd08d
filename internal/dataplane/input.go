package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/guestops"
	"github.com/airlockdev/airlock/internal/guestops/agentguest"
	"github.com/airlockdev/airlock/internal/metrics"
	"github.com/airlockdev/airlock/internal/model"
)

// maxControlBody bounds the JSON bodies of signal and resize.
const maxControlBody = 4 << 10

// stdin: POST /data/v1/processes/{process_id}/stdin[?close=1]. The raw body
// is streamed into the process's stdin (no size limit: flow control carries
// the process's pace back to the client); close=1 closes stdin after it
// (a PTY process gets ^D). 204 once all of it was written. Capped per
// token and per project (429 too_many_stdin_streams); each read must get
// data within the server's stdin idle timeout (else 408 request_timeout,
// set by the API's body deadline).
func (d *DataPlane) stdin(w http.ResponseWriter, r *http.Request) {
	// A refusal leaves the body unread: the connection is closed after the
	// answer instead of net/http waiting to read what is left of a body
	// its client may never end.
	w.Header().Set("Connection", "close")
	if d.drain.refuse(w) {
		return
	}
	t, ok := d.authorizeProcess(w, r, auth.ActionStdin)
	if !ok {
		return
	}
	closeAfter, err := agentproto.ParseCloseParam(r.URL.Query().Get("close"))
	if err != nil {
		writeError(w, apiv1.CodeInvalidRequest, err.Error())
		return
	}
	unlimit, err := d.acquireStdin(t)
	if err != nil {
		writeError(w, apiv1.CodeTooManyStdinStreams, err.Error())
		return
	}
	defer unlimit()
	// stdin may arrive before the first attach: start the process (its
	// output held for the attach that is on its way).
	if err := agentguest.Start(r.Context(), t.agent, t.cs, true); err != nil {
		writeProcError(w, err)
		return
	}
	defer d.hold(t.cs.SandboxID)() // a stdin stream is activity while it lasts
	defer d.cfg.Metrics.StreamOpened(metrics.StreamStdin)()
	body := d.countIn(metrics.StreamStdin, r.Body)
	defer body.done()
	if err := t.agent.Stdin(r.Context(), t.pid.String(), body, closeAfter); err != nil {
		if errors.Is(err, apiv1.ErrBodyTimeout) || errors.Is(context.Cause(r.Context()), apiv1.ErrBodyTimeout) {
			// The body's read deadline (--stdin-idle-timeout) passed:
			// the API's body deadline says so in the read's error or,
			// when the agent call saw the context end first, in its
			// cause. What came before it was written; net/http closes
			// the connection after this answer.
			writeError(w, apiv1.CodeRequestTimeout, "no stdin data arrived for the stdin idle timeout; what was sent before was written (send more in a new request)")
			return
		}
		if r.Context().Err() != nil {
			return // the client went away mid-body
		}
		writeProcError(w, err)
		return
	}
	w.Header().Del("Connection") // the body was read to its end: the connection may serve more
	w.WriteHeader(http.StatusNoContent)
}

// signal: POST /data/v1/processes/{process_id}/signal {"signal":"TERM"} → 204.
func (d *DataPlane) signal(w http.ResponseWriter, r *http.Request) {
	t, ok := d.authorizeProcess(w, r, auth.ActionSignal)
	if !ok {
		return
	}
	var req apiv1.SignalRequest
	if !decodeControl(w, r, &req) {
		return
	}
	sig, err := model.ParseSignal(req.Signal)
	if err != nil {
		writeError(w, apiv1.CodeInvalidRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), guestops.CallTimeout)
	defer cancel()
	if err := t.agent.Signal(ctx, t.pid.String(), sig.AgentName()); err != nil {
		writeProcError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// resize: POST /data/v1/processes/{process_id}/resize {"rows":R,"cols":C} → 204.
func (d *DataPlane) resize(w http.ResponseWriter, r *http.Request) {
	t, ok := d.authorizeProcess(w, r, auth.ActionResize)
	if !ok {
		return
	}
	var req apiv1.ResizeRequest
	if !decodeControl(w, r, &req) {
		return
	}
	size, err := model.ParseTermSize(req.Rows, req.Cols)
	if err != nil {
		writeError(w, apiv1.CodeInvalidRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), guestops.CallTimeout)
	defer cancel()
	if err := t.agent.Resize(ctx, t.pid.String(), agentproto.WindowSize{Rows: size.Rows, Cols: size.Cols}); err != nil {
		writeProcError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// decodeControl decodes a small JSON body strictly.
func decodeControl(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxControlBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, apiv1.CodePayloadTooLarge, fmt.Sprintf("request body over %d bytes", maxControlBody))
			return false
		}
		writeError(w, apiv1.CodeInvalidRequest, "bad JSON body: "+err.Error())
		return false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		writeError(w, apiv1.CodeInvalidRequest, "bad JSON body: trailing data after the object")
		return false
	}
	return true
}
