package envd

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
)

func TestNativeError(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want connect.Code
	}{
		{"process not found", &client.APIError{Status: 404, Code: apiv1.CodeProcessNotFound}, connect.CodeNotFound},
		{"process exited", &client.APIError{Status: 409, Code: apiv1.CodeProcessExited}, connect.CodeNotFound},
		{"sandbox paused", &client.APIError{Status: 409, Code: apiv1.CodeSandboxPaused}, connect.CodeUnavailable},
		{"sandbox not running", &client.APIError{Status: 409, Code: apiv1.CodeSandboxNotRunning}, connect.CodeUnavailable},
		{"no stdin", &client.APIError{Status: 409, Code: apiv1.CodeNoStdin}, connect.CodeFailedPrecondition},
		{"bad request", &client.APIError{Status: 400, Code: apiv1.CodeInvalidRequest}, connect.CodeInvalidArgument},
		{"exec failed", &client.APIError{Status: 400, Code: apiv1.CodeExecFailed}, connect.CodeInvalidArgument},
		{"token expired", &client.APIError{Status: 401, Code: apiv1.CodeTokenExpired}, connect.CodeUnauthenticated},
		{"forbidden", &client.APIError{Status: 403, Code: apiv1.CodePermissionDenied}, connect.CodePermissionDenied},
		{"too many", &client.APIError{Status: 429, Code: apiv1.CodeTooManyAttachments}, connect.CodeResourceExhausted},
		{"other conflict", &client.APIError{Status: 409, Code: "something_new"}, connect.CodeFailedPrecondition},
		{"proxy 502", &client.APIError{Status: 502}, connect.CodeUnavailable},
		{"gateway timeout", &client.APIError{Status: 504}, connect.CodeDeadlineExceeded},
		{"server error", &client.APIError{Status: 500, Code: apiv1.CodeInternal}, connect.CodeInternal},
		{"wrapped", fmt.Errorf("list: %w", &client.APIError{Status: 404, Code: apiv1.CodeNotFound}), connect.CodeNotFound},
		{"transport", errors.New("connection refused"), connect.CodeUnavailable},
		{"canceled", fmt.Errorf("attach: %w", context.Canceled), connect.CodeCanceled},
		{"deadline", context.DeadlineExceeded, connect.CodeDeadlineExceeded},
		{"already connect", connect.NewError(connect.CodeAborted, errors.New("x")), connect.CodeAborted},
	}
	for _, tc := range tests {
		if got := nativeError(tc.err).Code(); got != tc.want {
			t.Errorf("%s: code %v, want %v", tc.name, got, tc.want)
		}
	}
}
