package envd

import (
	"context"
	"errors"
	"net/http"

	"connectrpc.com/connect"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
)

// nativeError turns an error of Airlock's API (through internal/client)
// into the Connect error an E2B client expects. The native message is kept;
// the code is chosen by the native code first, then by the HTTP status.
func nativeError(err error) *connect.Error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	return connect.NewError(nativeCode(err), err)
}

func nativeCode(err error) connect.Code {
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
		apiv1.CodeSandboxBusy, apiv1.CodeDraining, apiv1.CodeNodeUnreachable:
		return connect.CodeUnavailable
	case apiv1.CodeExecFailed, apiv1.CodeInvalidRequest:
		return connect.CodeInvalidArgument
	case apiv1.CodeNoStdin, apiv1.CodeNoPTY:
		return connect.CodeFailedPrecondition
	case apiv1.CodeTokenExpired, apiv1.CodeWrongTokenKind, apiv1.CodeUnauthenticated:
		return connect.CodeUnauthenticated
	case apiv1.CodeNotSupported, apiv1.CodeAgentUnsupported:
		return connect.CodeUnimplemented
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
