// Package connecterr turns errors of Airlock's API, as internal/client
// reports them, into the Connect errors E2B clients expect from envd: one
// table for the process and filesystem services.
package connecterr

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
)

// From returns err as a Connect error: a Connect error unchanged, else one
// whose code is chosen by the native error code first, then by the HTTP
// status; a failure below HTTP is unavailable, an ended context canceled
// or deadline_exceeded. what, when not empty, prefixes the message.
func From(ctx context.Context, what string, err error) *connect.Error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	if what != "" {
		err = fmt.Errorf("%s: %w", what, err)
	}
	if ctx != nil && ctx.Err() != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return connect.NewError(connect.CodeDeadlineExceeded, err)
		}
		return connect.NewError(connect.CodeCanceled, err)
	}
	return connect.NewError(Code(err), err)
}

// Code is the Connect code for an error of Airlock's API.
func Code(err error) connect.Code {
	var api *client.APIError
	if !errors.As(err, &api) {
		switch {
		case errors.Is(err, context.Canceled):
			return connect.CodeCanceled
		case errors.Is(err, context.DeadlineExceeded):
			return connect.CodeDeadlineExceeded
		}
		// A transport failure between the translator and the native API.
		return connect.CodeUnavailable
	}
	switch api.Code {
	case apiv1.CodeProcessNotFound, apiv1.CodeNotFound, apiv1.CodeProcessExited:
		// envd forgets a process once it has exited.
		return connect.CodeNotFound
	case apiv1.CodeSandboxNotRunning, apiv1.CodeSandboxPaused, apiv1.CodeSandboxSuspended,
		apiv1.CodeSandboxBusy, apiv1.CodeUnavailable, apiv1.CodeDraining, apiv1.CodeNodeUnreachable:
		return connect.CodeUnavailable
	case apiv1.CodeExecFailed, apiv1.CodeInvalidRequest, apiv1.CodeInvalidPath, apiv1.CodeUnsupportedFileType,
		apiv1.CodeNotADirectory, apiv1.CodeIsADirectory:
		return connect.CodeInvalidArgument
	case apiv1.CodeAlreadyExists:
		return connect.CodeAlreadyExists
	case apiv1.CodeNoStdin, apiv1.CodeNoPTY, apiv1.CodeDirectoryNotEmpty:
		return connect.CodeFailedPrecondition
	case apiv1.CodePermissionDenied, apiv1.CodeQuotaExceeded:
		return connect.CodePermissionDenied
	case apiv1.CodeTokenExpired, apiv1.CodeWrongTokenKind, apiv1.CodeUnauthenticated:
		return connect.CodeUnauthenticated
	case apiv1.CodeRateLimited, apiv1.CodeTooManyAttachments, apiv1.CodePayloadTooLarge:
		return connect.CodeResourceExhausted
	case apiv1.CodeNotSupported, apiv1.CodeAgentUnsupported:
		return connect.CodeUnimplemented
	case apiv1.CodeResumeTimeout:
		return connect.CodeDeadlineExceeded
	}
	return statusCode(api.Status)
}

// statusCode maps an HTTP status of the native API to a Connect code.
func statusCode(status int) connect.Code {
	switch status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return connect.CodeInvalidArgument
	case http.StatusUnauthorized:
		return connect.CodeUnauthenticated
	case http.StatusForbidden:
		return connect.CodePermissionDenied
	case http.StatusNotFound:
		return connect.CodeNotFound
	case http.StatusConflict:
		return connect.CodeFailedPrecondition
	case http.StatusRequestEntityTooLarge, http.StatusTooManyRequests:
		return connect.CodeResourceExhausted
	case http.StatusNotImplemented:
		return connect.CodeUnimplemented
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		return connect.CodeUnavailable
	case http.StatusGatewayTimeout, http.StatusRequestTimeout:
		return connect.CodeDeadlineExceeded
	}
	return connect.CodeInternal
}
