// Package agentguest runs guestops' operations through the guest agent's
// client (internal/agentclient): it implements guestops.Guest over an
// *agentclient.Client, starts a command session's process (idempotently),
// converts the agent's file and process records to the public wire types,
// and turns the agent's errors into guestops.Error with stable public
// codes. The guest agent runs inside the sandbox and is not trusted: only
// the codes mapped here reach clients, and transport errors of process
// calls never show host paths.
//
// The data plane uses it directly (it also streams bytes to and from the
// agent); the management API sees only guestops.Guests, which the server
// builds here with New.
package agentguest

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/guestops"
	"github.com/airlockdev/airlock/internal/model"
)

// Agents gives a guest-agent client for a sandbox hosted on this node (the
// worker implements it). It fails (with an error matching
// guestops.ErrSandboxGone) for a sandbox that is being or has been
// destroyed, so that nothing re-creates a client for it.
type Agents interface {
	Agent(id model.SandboxID) (*agentclient.Client, error)
}

// New returns the guests of the sandboxes whose agents agents gives.
func New(agents Agents) guestops.Guests { return guests{agents} }

type guests struct{ agents Agents }

func (g guests) Guest(id model.SandboxID) (guestops.Guest, error) {
	c, err := g.agents.Agent(id)
	if err != nil {
		return nil, PublicError(err)
	}
	return guest{c}, nil
}

// guest implements guestops.Guest over one agent client.
type guest struct{ c *agentclient.Client }

// fileCall runs one file call bounded by guestops.CallTimeout and maps its
// error with FileError.
func fileCall[T any](ctx context.Context, do func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, guestops.CallTimeout)
	defer cancel()
	v, err := do(ctx)
	if err != nil {
		var zero T
		return zero, FileError(err)
	}
	return v, nil
}

func (g guest) Stat(ctx context.Context, path model.GuestPath, as *model.UserIDs) (apiv1.FileInfo, error) {
	return fileCall(ctx, func(ctx context.Context) (apiv1.FileInfo, error) {
		fi, err := g.c.Stat(ctx, path.String(), AgentUser(as))
		return FileInfoOut(fi), err
	})
}

func (g guest) ListDir(ctx context.Context, path model.GuestPath, as *model.UserIDs) (apiv1.FileList, error) {
	return fileCall(ctx, func(ctx context.Context) (apiv1.FileList, error) {
		l, err := g.c.ListDir(ctx, path.String(), AgentUser(as))
		if err != nil {
			return apiv1.FileList{}, err
		}
		out := apiv1.FileList{Path: l.Path, Entries: make([]apiv1.FileInfo, 0, len(l.Entries)), Truncated: l.Truncated}
		for _, fi := range l.Entries {
			out.Entries = append(out.Entries, FileInfoOut(fi))
		}
		return out, nil
	})
}

func (g guest) Mkdir(ctx context.Context, path model.GuestPath, as, owner *model.UserIDs) (apiv1.FileInfo, error) {
	return fileCall(ctx, func(ctx context.Context) (apiv1.FileInfo, error) {
		req := agentproto.MkdirRequest{Path: path.String()}
		if owner != nil {
			req.Owner = &agentproto.FileUser{UID: owner.UID, GID: owner.GID}
		}
		fi, err := g.c.Mkdir(ctx, req, AgentUser(as))
		return FileInfoOut(fi), err
	})
}

func (g guest) SetMetadata(ctx context.Context, path model.GuestPath, m model.FileMetadata, as *model.UserIDs) (apiv1.FileInfo, error) {
	return fileCall(ctx, func(ctx context.Context) (apiv1.FileInfo, error) {
		fi, err := g.c.SetMetadata(ctx, agentproto.SetMetadataRequest{Path: path.String(), Metadata: m}, AgentUser(as))
		return FileInfoOut(fi), err
	})
}

func (g guest) Move(ctx context.Context, from, to model.GuestPath, overwrite bool, as *model.UserIDs) (apiv1.FileInfo, error) {
	return fileCall(ctx, func(ctx context.Context) (apiv1.FileInfo, error) {
		opt := AgentUser(as)
		if err := g.c.Move(ctx, agentproto.MoveRequest{From: from.String(), To: to.String(), Overwrite: overwrite}, opt); err != nil {
			return apiv1.FileInfo{}, err
		}
		fi, err := g.c.Stat(ctx, to.String(), opt)
		return FileInfoOut(fi), err
	})
}

func (g guest) Remove(ctx context.Context, path model.GuestPath, recursive bool, as *model.UserIDs) error {
	_, err := fileCall(ctx, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, g.c.Remove(ctx, agentproto.RemoveRequest{Path: path.String(), Recursive: recursive}, AgentUser(as))
	})
	return err
}

func (g guest) Start(ctx context.Context, cs model.CommandSession, hold bool) error {
	if err := Start(ctx, g.c, cs, hold); err != nil {
		return PublicError(err)
	}
	return nil
}

func (g guest) Processes(ctx context.Context) ([]apiv1.Process, error) {
	ctx, cancel := context.WithTimeout(ctx, guestops.CallTimeout)
	defer cancel()
	sts, err := g.c.List(ctx)
	if err != nil {
		return nil, PublicError(err)
	}
	out := make([]apiv1.Process, 0, len(sts))
	for _, st := range sts {
		out = append(out, ProcessOut(st))
	}
	return out, nil
}

func (g guest) Process(ctx context.Context, pid model.ProcessID, wait time.Duration) (apiv1.Process, error) {
	cctx, cancel := context.WithTimeout(ctx, guestops.CallTimeout)
	defer cancel()
	st, err := g.c.Status(cctx, pid.String())
	if err != nil {
		return apiv1.Process{}, PublicError(err)
	}
	if st.Running && wait > 0 {
		wctx, wcancel := context.WithTimeout(ctx, wait)
		defer wcancel()
		done, err := g.c.Wait(wctx, pid.String())
		switch {
		case err == nil:
			st = done
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			// The wait elapsed: answer the current state.
			if st, err = g.c.Status(cctx, pid.String()); err != nil {
				return apiv1.Process{}, PublicError(err)
			}
		case errors.Is(err, agentclient.ErrUnsupported):
			// An older agent: answer without waiting.
		default:
			return apiv1.Process{}, PublicError(err)
		}
	}
	return ProcessOut(st), nil
}

func (g guest) Signal(ctx context.Context, pid model.ProcessID, sig model.Signal) (apiv1.Process, error) {
	ctx, cancel := context.WithTimeout(ctx, guestops.CallTimeout)
	defer cancel()
	if err := g.c.Signal(ctx, pid.String(), sig.AgentName()); err != nil {
		return apiv1.Process{}, PublicError(err)
	}
	// Give a process that dies of the signal a moment to be reported so.
	st, err := g.c.Status(ctx, pid.String())
	if err == nil && st.Running {
		wctx, wcancel := context.WithTimeout(ctx, 100*time.Millisecond)
		if done, werr := g.c.Wait(wctx, pid.String()); werr == nil {
			st = done
		}
		wcancel()
	}
	if err != nil {
		return apiv1.Process{}, PublicError(err)
	}
	return ProcessOut(st), nil
}

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
// background start, which nobody may attach to, does not hold. Its error
// is the agent client's (see PublicError).
func Start(ctx context.Context, agent *agentclient.Client, cs model.CommandSession, hold bool) error {
	ctx, cancel := context.WithTimeout(ctx, guestops.CallTimeout)
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

// FileInfoOut converts the agent's FileInfo to the API's.
func FileInfoOut(fi agentproto.FileInfo) apiv1.FileInfo {
	out := apiv1.FileInfo{Path: fi.Path, Name: fi.Name, Type: fi.Type, Size: fi.Size, Mode: fi.Mode, ModTime: fi.ModTime, LinkTarget: fi.LinkTarget, UID: fi.UID, GID: fi.GID}
	// The agent is not trusted: only metadata that parses reaches clients.
	if m, err := model.ParseFileMetadata(fi.Metadata); err == nil && len(m) > 0 {
		out.Metadata = m
	}
	return out
}

// AgentUser is the agent call option that runs a file call as u (nil: as
// the agent).
func AgentUser(u *model.UserIDs) agentclient.FileOption {
	if u == nil {
		return agentclient.AsUser(nil)
	}
	return agentclient.AsUser(&agentproto.FileUser{UID: u.UID, GID: u.GID})
}

// PublicError maps an error of an agent process call (or of finding the
// agent) to a public status, code and message. A *guestops.Error is
// returned as it is.
func PublicError(err error) *guestops.Error {
	var ge *guestops.Error
	var aerr *agentclient.Error
	var perr *agentclient.ProtocolError
	switch {
	case errors.As(err, &ge):
		return ge
	case errors.Is(err, guestops.ErrSandboxGone):
		return &guestops.Error{Status: http.StatusConflict, Code: apiv1.CodeSandboxNotRunning, Message: "the sandbox is being deleted"}
	case errors.Is(err, guestops.ErrEnvironmentNotEnabled):
		return &guestops.Error{Status: http.StatusConflict, Code: apiv1.CodeEnvironmentUnavailable, Message: "the sandbox runs in an execution environment this server does not drive (it was restarted without that --env); it is left as it is"}
	case errors.As(err, &perr):
		return &guestops.Error{Status: http.StatusNotImplemented, Code: apiv1.CodeAgentUnsupported, Message: perr.Error()}
	case errors.Is(err, agentclient.ErrUnsupported):
		return &guestops.Error{Status: http.StatusNotImplemented, Code: apiv1.CodeAgentUnsupported, Message: "the sandbox's agent is too old for this request (" + lastPart(err) + ")"}
	case errors.Is(err, context.DeadlineExceeded):
		return &guestops.Error{Status: http.StatusGatewayTimeout, Code: apiv1.CodeUnavailable, Message: "the sandbox's agent did not answer in time"}
	case errors.Is(err, context.Canceled):
		return &guestops.Error{Status: http.StatusServiceUnavailable, Code: apiv1.CodeUnavailable, Message: "the request was cancelled"}
	case !errors.As(err, &aerr):
		// A transport error: never show its text (it names host paths).
		return &guestops.Error{Status: http.StatusServiceUnavailable, Code: apiv1.CodeUnavailable, Message: "could not reach the sandbox's agent"}
	}
	status, code, msg := http.StatusInternalServerError, apiv1.CodeInternal, "the sandbox's agent failed the request"
	switch aerr.Code {
	case agentproto.CodeExecFailed:
		status, code, msg = http.StatusBadRequest, apiv1.CodeExecFailed, aerr.Message
	case agentproto.CodeInvalidRequest:
		status, code, msg = http.StatusBadRequest, apiv1.CodeInvalidRequest, aerr.Message
	case agentproto.CodeNotFound:
		status, code, msg = http.StatusNotFound, apiv1.CodeProcessNotFound, "the sandbox has no such process (not started yet, or forgotten after it exited)"
	case agentproto.CodeNotRunning:
		status, code, msg = http.StatusConflict, apiv1.CodeProcessExited, "the process has exited"
	case agentproto.CodeNoStdin:
		status, code, msg = http.StatusConflict, apiv1.CodeNoStdin, "the process's stdin is not open (start it with stdin, and do not close it before writing)"
	case agentproto.CodeNoPTY:
		status, code, msg = http.StatusConflict, apiv1.CodeNoPTY, "the process has no terminal"
	case agentproto.CodeBusy:
		status, code, msg = http.StatusTooManyRequests, apiv1.CodeTooManyAttachments, "the process has as many output streams as it allows"
	case agentproto.CodeShuttingDown:
		status, code, msg = http.StatusServiceUnavailable, apiv1.CodeUnavailable, "the sandbox is shutting down"
	}
	return &guestops.Error{Status: status, Code: code, Message: msg}
}

func lastPart(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}

// FileError maps an error of an agent file call to the HTTP status, stable
// apiv1 code and message clients see. The agent is not trusted: only the
// codes mapped here pass through. A *guestops.Error is returned as it is.
func FileError(err error) *guestops.Error {
	var ge *guestops.Error
	if errors.As(err, &ge) {
		return ge
	}
	var aerr *agentclient.Error
	if !errors.As(err, &aerr) {
		return &guestops.Error{Status: http.StatusServiceUnavailable, Code: apiv1.CodeUnavailable, Message: "could not reach the sandbox: " + err.Error()}
	}
	status, code, msg := http.StatusInternalServerError, apiv1.CodeInternal, "the sandbox's agent failed the file request"
	switch aerr.Code {
	case agentproto.CodeNotFound:
		status, code, msg = http.StatusNotFound, apiv1.CodeNotFound, aerr.Message
	case agentproto.CodeInvalidPath:
		status, code, msg = http.StatusBadRequest, apiv1.CodeInvalidPath, aerr.Message
	case agentproto.CodeInvalidRequest, agentproto.CodeInvalidFileUser:
		status, code, msg = http.StatusBadRequest, apiv1.CodeInvalidRequest, aerr.Message
	case agentproto.CodeUnsupportedFileType:
		status, code, msg = http.StatusBadRequest, apiv1.CodeUnsupportedFileType, aerr.Message
	case agentproto.CodeNotADirectory:
		status, code, msg = http.StatusConflict, apiv1.CodeNotADirectory, aerr.Message
	case agentproto.CodeIsADirectory:
		status, code, msg = http.StatusConflict, apiv1.CodeIsADirectory, aerr.Message
	case agentproto.CodeAlreadyExists:
		status, code, msg = http.StatusConflict, apiv1.CodeAlreadyExists, aerr.Message
	case agentproto.CodeDirectoryNotEmpty:
		status, code, msg = http.StatusConflict, apiv1.CodeDirectoryNotEmpty, aerr.Message
	case agentproto.CodePermissionDenied:
		status, code, msg = http.StatusForbidden, apiv1.CodePermissionDenied, aerr.Message
	case agentproto.CodeNoRoute:
		status, code, msg = http.StatusNotImplemented, apiv1.CodeNotSupported, "the sandbox's agent has no file endpoints (too old)"
	case agentproto.CodeShuttingDown:
		status, code, msg = http.StatusServiceUnavailable, apiv1.CodeUnavailable, "the sandbox is shutting down"
	}
	return &guestops.Error{Status: status, Code: code, Message: msg}
}
