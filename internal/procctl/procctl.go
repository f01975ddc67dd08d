// Package procctl is what the management API and the data plane share about
// the processes of a sandbox: finding the sandbox's guest agent, starting a
// command session's process (idempotently), converting the guest's process
// status to the public wire type, and turning guest errors into stable public
// error codes. The guest agent runs inside the sandbox and is not trusted:
// only the codes mapped here reach clients, and transport errors never show
// host paths.
package procctl

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// Agents gives a guest-agent client for a sandbox hosted on this node. It
// fails (with an error matching ErrSandboxGone) for a sandbox that is being
// or has been destroyed, so that nothing re-creates a client for it.
type Agents interface {
	Agent(id model.SandboxID) (*agentclient.Client, error)
}

// ErrSandboxGone: the sandbox is being destroyed or is gone from this node.
var ErrSandboxGone = errors.New("sandbox is gone from this node")

// ErrEnvironmentNotEnabled: the sandbox runs in an execution environment
// this server does not drive (it was restarted without its --env).
var ErrEnvironmentNotEnabled = errors.New("the sandbox's execution environment is not enabled on this server")

// CallTimeout bounds a single short agent call (start, status, signal,
// resize, list) made on behalf of a client request.
const CallTimeout = 30 * time.Second

// StartRequest is the agent request that starts cs's process.
func StartRequest(cs model.CommandSession) agentproto.StartRequest {
	cwd := string(cs.Spec.Cwd)
	if cwd == "" {
		cwd = "/"
	}
	req := agentproto.StartRequest{
		ID:            cs.ProcessID.String(),
		Args:          cs.Spec.Args,
		Env:           cs.Spec.Env.List(),
		Cwd:           cwd,
		Stdin:         cs.Spec.Stdin,
		TimeoutMillis: cs.Spec.Timeout.Milliseconds(),
	}
	if p := cs.Spec.PTY; p != nil {
		req.PTY = &agentproto.WindowSize{Rows: p.Rows, Cols: p.Cols}
	}
	if u := cs.Spec.User; u != nil {
		req.User = &agentproto.User{UID: u.UID, GID: u.GID}
	}
	return req
}

// Start starts cs's process unless the agent has it already (running or
// exited): starting is idempotent by process ID. hold holds its output back
// until the first output stream opens (see agentproto.StartRequest); a
// background start, which nobody may attach to, does not hold.
func Start(ctx context.Context, agent *agentclient.Client, cs model.CommandSession, hold bool) error {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	req := StartRequest(cs)
	req.HoldOutput = hold
	_, err := agent.Start(ctx, req)
	if errors.Is(err, agentclient.ErrProcessExists) {
		return nil
	}
	return err
}

// ProcessOut converts the guest's process status to the public type.
func ProcessOut(st agentproto.ProcessStatus) apiv1.Process {
	return apiv1.Process{
		ID: st.ID, Pid: st.Pid, Args: st.Args, Running: st.Running, PTY: st.PTY, Stdin: st.Stdin,
		ExitCode: st.ExitCode, Signal: st.Signal, TimedOut: st.TimedOut,
		StartedAt: st.StartedAt, ExitedAt: st.ExitedAt,
	}
}

// Error is a guest or transport failure as clients see it.
type Error struct {
	Status  int // the code's HTTP status in apiv1's vocabulary, or its AltStatus
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// newError is the Error of code, with the code's HTTP status in apiv1's
// error vocabulary.
func newError(code, msg string) *Error { return &Error{apiv1.HTTPStatus(code), code, msg} }

// PublicError maps an error of an agent call to a public status, code and
// message.
func PublicError(err error) *Error {
	var aerr *agentclient.Error
	var perr *agentclient.ProtocolError
	switch {
	case errors.Is(err, ErrSandboxGone):
		return newError(apiv1.CodeSandboxNotRunning, "the sandbox is being deleted")
	case errors.Is(err, ErrEnvironmentNotEnabled):
		return newError(apiv1.CodeEnvironmentUnavailable, "the sandbox runs in an execution environment this server does not drive (it was restarted without that --env); it is left as it is")
	case errors.As(err, &perr):
		return newError(apiv1.CodeAgentUnsupported, perr.Error())
	case errors.Is(err, agentclient.ErrUnsupported):
		return newError(apiv1.CodeAgentUnsupported, "the sandbox's agent is too old for this request ("+lastPart(err)+")")
	case errors.Is(err, context.DeadlineExceeded):
		// unavailable's documented AltStatus (apiv1.ErrorSpec): 504, not 503.
		return &Error{http.StatusGatewayTimeout, apiv1.CodeUnavailable, "the sandbox's agent did not answer in time"}
	case errors.Is(err, context.Canceled):
		return newError(apiv1.CodeUnavailable, "the request was cancelled")
	case !errors.As(err, &aerr):
		// A transport error: never show its text (it names host paths).
		return newError(apiv1.CodeUnavailable, "could not reach the sandbox's agent")
	}
	switch aerr.Code {
	case agentproto.CodeExecFailed:
		return newError(apiv1.CodeExecFailed, aerr.Message)
	case agentproto.CodeInvalidRequest:
		return newError(apiv1.CodeInvalidRequest, aerr.Message)
	case agentproto.CodeNotFound:
		return newError(apiv1.CodeProcessNotFound, "the sandbox has no such process (not started yet, or forgotten after it exited)")
	case agentproto.CodeNotRunning:
		return newError(apiv1.CodeProcessExited, "the process has exited")
	case agentproto.CodeNoStdin:
		return newError(apiv1.CodeNoStdin, "the process's stdin is not open (start it with stdin, and do not close it before writing)")
	case agentproto.CodeNoPTY:
		return newError(apiv1.CodeNoPTY, "the process has no terminal")
	case agentproto.CodeBusy:
		return newError(apiv1.CodeTooManyAttachments, "the process has as many output streams as it allows")
	case agentproto.CodeShuttingDown:
		return newError(apiv1.CodeUnavailable, "the sandbox is shutting down")
	}
	return newError(apiv1.CodeInternal, "the sandbox's agent failed the request")
}

func lastPart(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}

// NotRunning is the error of a request that needs a running sandbox made of
// sandbox id in state: paused and suspended sandboxes say how to continue
// (sandbox_paused, sandbox_suspended), any other state is
// sandbox_not_running.
func NotRunning(id model.SandboxID, state model.SandboxState) *Error {
	switch state {
	case model.StatePaused, model.StatePausing:
		return newError(apiv1.CodeSandboxPaused, fmt.Sprintf(
			"sandbox %s is %s; resume it (POST /v1/sandboxes/%s/resume, airlock sandbox resume) or send the command with \"resume\": true", id, state, id))
	case model.StateSuspended, model.StateSuspending:
		return newError(apiv1.CodeSandboxSuspended, fmt.Sprintf(
			"sandbox %s is %s; wake it (POST /v1/sandboxes/%s/wake, airlock sandbox wake) or send the command with \"resume\": true", id, state, id))
	}
	return newError(apiv1.CodeSandboxNotRunning, fmt.Sprintf("sandbox %s is %s, not running", id, state))
}
