package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

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

// errorf is the API error with code, answered with the code's HTTP status
// in apiv1's error vocabulary.
func errorf(code, format string, args ...any) *apiError {
	return statusErrorf(apiv1.HTTPStatus(code), code, format, args...)
}

// statusErrorf is errorf with a status another package chose: a
// guestops.Error's or the data plane's, which is the code's status or its
// documented AltStatus (apiv1.ErrorSpec).
func statusErrorf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, msg: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) *apiError {
	return errorf(apiv1.CodeInvalidRequest, format, args...)
}

func notFound(format string, args ...any) *apiError {
	return errorf(apiv1.CodeNotFound, format, args...)
}

// classify maps an error from a handler, the store or a parser to the API
// error it is answered with (its code; the status is the vocabulary's).
// Unknown errors are internal: their text is logged, never sent.
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
		return statusErrorf(ge.Status, ge.Code, "%s", ge.Message), true
	case errors.As(err, &se):
		return sandboxError(se)
	case errors.As(err, &qe):
		return errorf(apiv1.CodeQuotaExceeded, "%s", qe.Error()), true
	case errors.Is(err, errBodyTimeout):
		return errorf(apiv1.CodeRequestTimeout, "the request body did not arrive in time; the connection is closed"), true
	case errors.Is(err, policy.ErrUnknownProfile):
		return errorf(apiv1.CodeUnknownEgressProfile, "%s", err.Error()), true
	case errors.Is(err, store.ErrInUse):
		return errorf(apiv1.CodeEgressProfileInUse, "%s", err.Error()), true
	case errors.Is(err, model.ErrInvalid):
		return badRequest("%s", err.Error()), true
	case errors.Is(err, model.ErrInvalidTransition):
		return errorf(apiv1.CodeInvalidTransition, "%s", err.Error()), true
	case errors.Is(err, store.ErrNotFound):
		return notFound("not found"), true
	case errors.Is(err, store.ErrAlreadyExists):
		return errorf(apiv1.CodeAlreadyExists, "already exists"), true
	case errors.Is(err, store.ErrStateChanged):
		return errorf(apiv1.CodeInvalidTransition, "the sandbox changed state concurrently; retry"), true
	}
	return errorf(apiv1.CodeInternal, "internal error"), false
}

// sandboxError is the answer to a refusal of the sandboxes service (not
// known: a kind without one, an internal error).
func sandboxError(se *sandboxes.Error) (_ *apiError, known bool) {
	var code string
	switch se.Kind {
	case sandboxes.NotFound:
		code = apiv1.CodeNotFound
	case sandboxes.TemplateNotFound:
		code = apiv1.CodeTemplateNotFound
	case sandboxes.BuildFailed:
		code = apiv1.CodeBuildFailed
	case sandboxes.Unavailable:
		code = apiv1.CodeUnavailable
	case sandboxes.ExceedsCapacity:
		code = apiv1.CodeExceedsCapacity
	case sandboxes.NotSupported:
		code = apiv1.CodeNotSupported
	case sandboxes.EnvironmentUnknown:
		code = apiv1.CodeEnvironmentUnknown
	case sandboxes.EnvironmentArtifactsMissing:
		code = apiv1.CodeEnvironmentArtifactsMissing
	case sandboxes.EnvironmentUnavailable:
		code = apiv1.CodeEnvironmentUnavailable
	case sandboxes.NoEligibleNode:
		code = apiv1.CodeNoEligibleNode
	case sandboxes.NoCapacity:
		code = apiv1.CodeNoCapacity
	case sandboxes.Busy:
		code = apiv1.CodeSandboxBusy
	case sandboxes.InvalidTransition:
		code = apiv1.CodeInvalidTransition
	case sandboxes.ResumeTimeout:
		code = apiv1.CodeResumeTimeout
	case sandboxes.VolumeNotFound:
		code = apiv1.CodeVolumeNotFound
	case sandboxes.VolumeConflict:
		code = apiv1.CodeVolumeConflict
	case sandboxes.SnapshotNotFound:
		code = apiv1.CodeSnapshotNotFound
	case sandboxes.SnapshotNotReady:
		code = apiv1.CodeSnapshotNotReady
	case sandboxes.SnapshotFailed:
		code = apiv1.CodeSnapshotFailed
	default:
		return errorf(apiv1.CodeInternal, "internal error"), false
	}
	return errorf(code, "%s", se.Message), true
}

// writeError answers with the JSON error for err and logs internal errors.
func (a *API) writeError(w http.ResponseWriter, r *http.Request, err error) {
	ctx := r.Context()
	if cause := context.Cause(ctx); ctx.Err() != nil && !errors.Is(cause, errBodyTimeout) && errors.Is(err, cause) {
		// The client went away; nobody reads the answer. (A body that
		// did not arrive in time is answered: 408.)
		a.log.DebugContext(ctx, "request cancelled", "err", err)
		return
	}
	ae, known := classify(err)
	if !known {
		a.log.ErrorContext(ctx, "internal error", "method", r.Method, "path", r.URL.Path,
			"request_id", requestIDFrom(ctx), "err", err)
	}
	noteAnswer(ctx, ae.code, "") // for the audit entry
	writeAPIError(w, ae)
}

// noCapacityRetryAfter is the Retry-After (seconds) of no_capacity, which
// docs/errors.md promises: room frees whenever a sandbox ends, so soon is
// worth another try (the clients' own backoff grows beyond it).
const noCapacityRetryAfter = 1

// writeAPIError answers with ae.
func writeAPIError(w http.ResponseWriter, ae *apiError) {
	if ae.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="airlock"`)
	}
	if ae.code == apiv1.CodeNoCapacity {
		w.Header().Set("Retry-After", strconv.Itoa(noCapacityRetryAfter))
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
