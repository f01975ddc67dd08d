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
	"github.com/airlockdev/airlock/internal/model"
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
		qe *model.QuotaExceededError
	)
	switch {
	case errors.As(err, &ae):
		return ae, true
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
	noteAnswer(ctx, ae.code, "") // for the audit entry
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
