package dataplane

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/guestops"
	"github.com/airlockdev/airlock/internal/guestops/agentguest"
	"github.com/airlockdev/airlock/internal/model"
)

// agentErr is an error of an agent call with the agent's code.
func agentErr(code string) error {
	return fmt.Errorf("call: %w", &agentclient.Error{Status: 400, Code: code, Message: "m"})
}

// checkVocabulary fails unless status is code's status in apiv1's error
// vocabulary (or its AltStatus).
func checkVocabulary(t *testing.T, what string, status int, code string) {
	t.Helper()
	s, ok := apiv1.LookupError(code)
	if !ok {
		t.Errorf("%s: code %q is not in apiv1's vocabulary", what, code)
		return
	}
	if status != s.Status && status != s.AltStatus {
		t.Errorf("%s: %d %s; the vocabulary says %d", what, status, code, s.Status)
	}
}

// TestGuestErrorsKeepTheirStatuses pins the status and code each agent
// error ends in (they are contracts) and checks that each is the status
// apiv1's vocabulary gives the code.
func TestGuestErrorsKeepTheirStatuses(t *testing.T) {
	type want struct {
		status int
		code   string
	}
	proc := []struct {
		err error
		want
	}{
		{guestops.ErrSandboxGone, want{409, apiv1.CodeSandboxNotRunning}},
		{guestops.ErrEnvironmentNotEnabled, want{409, apiv1.CodeEnvironmentUnavailable}},
		{&agentclient.ProtocolError{Protocol: 99}, want{501, apiv1.CodeAgentUnsupported}},
		{fmt.Errorf("resize: %w", agentclient.ErrUnsupported), want{501, apiv1.CodeAgentUnsupported}},
		{context.DeadlineExceeded, want{504, apiv1.CodeUnavailable}}, // unavailable's AltStatus
		{context.Canceled, want{503, apiv1.CodeUnavailable}},
		{errors.New("dial unix /run/…: refused"), want{503, apiv1.CodeUnavailable}},
		{agentErr(agentproto.CodeExecFailed), want{400, apiv1.CodeExecFailed}},
		{agentErr(agentproto.CodeInvalidRequest), want{400, apiv1.CodeInvalidRequest}},
		{agentErr(agentproto.CodeNotFound), want{404, apiv1.CodeProcessNotFound}},
		{agentErr(agentproto.CodeNotRunning), want{409, apiv1.CodeProcessExited}},
		{agentErr(agentproto.CodeNoStdin), want{409, apiv1.CodeNoStdin}},
		{agentErr(agentproto.CodeNoPTY), want{409, apiv1.CodeNoPTY}},
		{agentErr(agentproto.CodeBusy), want{429, apiv1.CodeTooManyAttachments}},
		{agentErr(agentproto.CodeShuttingDown), want{503, apiv1.CodeUnavailable}},
		{agentErr("something_new"), want{500, apiv1.CodeInternal}},
	}
	for _, tt := range proc {
		pe := agentguest.PublicError(tt.err)
		if pe.Status != tt.status || pe.Code != tt.code {
			t.Errorf("PublicError(%v) = %d %s, want %d %s", tt.err, pe.Status, pe.Code, tt.status, tt.code)
		}
		checkVocabulary(t, fmt.Sprintf("PublicError(%v)", tt.err), pe.Status, pe.Code)
	}

	files := []struct {
		err error
		want
	}{
		{errors.New("dial: refused"), want{503, apiv1.CodeUnavailable}},
		{agentErr(agentproto.CodeNotFound), want{404, apiv1.CodeNotFound}},
		{agentErr(agentproto.CodeInvalidPath), want{400, apiv1.CodeInvalidPath}},
		{agentErr(agentproto.CodeInvalidRequest), want{400, apiv1.CodeInvalidRequest}},
		{agentErr(agentproto.CodeInvalidFileUser), want{400, apiv1.CodeInvalidRequest}},
		{agentErr(agentproto.CodeUnsupportedFileType), want{400, apiv1.CodeUnsupportedFileType}},
		{agentErr(agentproto.CodeNotADirectory), want{409, apiv1.CodeNotADirectory}},
		{agentErr(agentproto.CodeIsADirectory), want{409, apiv1.CodeIsADirectory}},
		{agentErr(agentproto.CodeAlreadyExists), want{409, apiv1.CodeAlreadyExists}},
		{agentErr(agentproto.CodeDirectoryNotEmpty), want{409, apiv1.CodeDirectoryNotEmpty}},
		{agentErr(agentproto.CodePermissionDenied), want{403, apiv1.CodePermissionDenied}},
		{agentErr(agentproto.CodeNoRoute), want{501, apiv1.CodeNotSupported}},
		{agentErr(agentproto.CodeShuttingDown), want{503, apiv1.CodeUnavailable}},
		{agentErr("something_new"), want{500, apiv1.CodeInternal}},
	}
	for _, tt := range files {
		fe := agentguest.FileError(tt.err)
		status, code := fe.Status, fe.Code
		if status != tt.status || code != tt.code {
			t.Errorf("FileError(%v) = %d %s, want %d %s", tt.err, status, code, tt.status, tt.code)
		}
		checkVocabulary(t, fmt.Sprintf("FileError(%v)", tt.err), status, code)
	}

	for _, state := range []model.SandboxState{model.StatePaused, model.StateSuspending, model.StateCreating, model.StateDeleted} {
		pe := guestops.NotRunning("sbx_x", state)
		if pe.Status != 409 {
			t.Errorf("NotRunning(%s) = %d %s, want 409", state, pe.Status, pe.Code)
		}
		checkVocabulary(t, fmt.Sprintf("NotRunning(%s)", state), pe.Status, pe.Code)
	}
}
