package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/guestops"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/sandboxes"
	"github.com/airlockdev/airlock/internal/store"
)

// apiError is an error with the HTTP status and stable code it is answered with.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.code + ": " + e.msg }

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, msg: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) *apiError {
	return errorf(http.StatusBadRequest, apiv1.CodeInvalidRequest, format, args...)
}

func notFound(format string, args ...any) *apiError {
	return errorf(http.StatusNotFound, apiv1.CodeNotFound, format, args...)
}

// classify maps an error from a handler, the store or a parser to the API
// error it is answered with. Unknown errors are internal: their text is
// logged, never sent.
func classify(err error) (*apiError, bool) {
	var (
		ae *apiError
		ge *guestops.Error
		se *sandboxes.Error
		qe *model.QuotaExceededError
	)
	switch {
	case errors.As(err, &ae):
		return ae, true
	case errors.As(err, &ge):
		return errorf(ge.Status, ge.Code, "%s", ge.Message), true
	case errors.As(err, &se):
		return sandboxError(se)
	case errors.As(err, &qe):
		return errorf(http.StatusForbidden, apiv1.CodeQuotaExceeded, "%s", qe.Error()), true
	case errors.Is(err, errBodyTimeout):
		return errorf(http.StatusRequestTimeout, apiv1.CodeRequestTimeout, "the request body did not arrive in time; the connection is closed"), true
	case errors.Is(err, policy.ErrUnknownProfile):
		return errorf(http.StatusBadRequest, apiv1.CodeUnknownEgressProfile, "%s", err.Error()), true
	case errors.Is(err, store.ErrInUse):
		return errorf(http.StatusConflict, apiv1.CodeEgressProfileInUse, "%s", err.Error()), true
	case errors.Is(err, model.ErrInvalid):
		return badRequest("%s", err.Error()), true
	case errors.Is(err, model.ErrInvalidTransition):
		return errorf(http.StatusConflict, apiv1.CodeInvalidTransition, "%s", err.Error()), true
	case errors.Is(err, store.ErrNotFound):
		return notFound("not found"), true
	case errors.Is(err, store.ErrAlreadyExists):
		return errorf(http.StatusConflict, apiv1.CodeAlreadyExists, "already exists"), true
	case errors.Is(err, store.ErrStateChanged):
		return errorf(http.StatusConflict, apiv1.CodeInvalidTransition, "the sandbox changed state concurrently; retry"), true
	}
	return errorf(http.StatusInternalServerError, apiv1.CodeInternal, "internal error"), false
}

// sandboxError is the answer to a refusal of the sandboxes service (not
// known: a kind without one, an internal error).
func sandboxError(se *sandboxes.Error) (_ *apiError, known bool) {
	var status int
	var code string
	switch se.Kind {
	case sandboxes.NotFound:
		status, code = http.StatusNotFound, apiv1.CodeNotFound
	case sandboxes.TemplateNotFound:
		status, code = http.StatusNotFound, apiv1.CodeTemplateNotFound
	case sandboxes.BuildFailed:
		status, code = http.StatusFailedDependency, apiv1.CodeBuildFailed
	case sandboxes.Unavailable:
		status, code = http.StatusServiceUnavailable, apiv1.CodeUnavailable
	case sandboxes.ExceedsCapacity:
		status, code = http.StatusBadRequest, apiv1.CodeExceedsCapacity
	case sandboxes.NotSupported:
		status, code = http.StatusNotImplemented, apiv1.CodeNotSupported
	case sandboxes.EnvironmentUnknown:
		status, code = http.StatusBadRequest, apiv1.CodeEnvironmentUnknown
	case sandboxes.EnvironmentArtifactsMissing:
		status, code = http.StatusConflict, apiv1.CodeEnvironmentArtifactsMissing
	case sandboxes.EnvironmentUnavailable:
		status, code = http.StatusConflict, apiv1.CodeEnvironmentUnavailable
	case sandboxes.NoEligibleNode:
		status, code = http.StatusConflict, apiv1.CodeNoEligibleNode
	case sandboxes.NoCapacity:
		status, code = http.StatusServiceUnavailable, apiv1.CodeNoCapacity
	case sandboxes.Busy:
		status, code = http.StatusConflict, apiv1.CodeSandboxBusy
	case sandboxes.InvalidTransition:
		status, code = http.StatusConflict, apiv1.CodeInvalidTransition
	case sandboxes.ResumeTimeout:
		status, code = http.StatusGatewayTimeout, apiv1.CodeResumeTimeout
	default:
		return errorf(http.StatusInternalServerError, apiv1.CodeInternal, "internal error"), false
	}
	return errorf(status, code, "%s", se.Message), true
}

// writeError answers with the JSON error for err and logs internal errors.
func (a *API) writeError(w http.ResponseWriter, r *http.Request, err error) {
	ctx := r.Context()
	if ctx.Err() != nil && errors.Is(err, context.Cause(ctx)) {
		// The client went away; nobody reads the answer.
		a.log.DebugContext(ctx, "request cancelled", "err", err)
		return
	}
	ae, known := classify(err)
	if !known {
		a.log.ErrorContext(ctx, "internal error", "method", r.Method, "path", r.URL.Path,
			"request_id", requestIDFrom(ctx), "err", err)
	}
	if ae.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="airlock"`)
	}
	writeJSON(w, ae.status, apiv1.Error{Code: ae.code, Message: ae.msg})
}

// writeJSON writes v as the JSON body with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Every value written here is a plain wire struct; this cannot fail.
		slog.Error("marshal response", "err", err)
		status = http.StatusInternalServerError
		b = []byte(`{"code":"internal","message":"could not encode the response"}`)
	}
	writeBody(w, status, append(b, '\n'))
}

func writeBody(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
