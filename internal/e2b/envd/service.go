// Package envd answers E2B's envd Connect-RPC services (today
// process.Process) by translating each call to Airlock's own API: the
// gateway resolves the sandbox and a sandbox-scoped native client (see
// internal/e2b/target), and every action goes through that client, so the
// native checks, quotas, activity tracking and node routing apply.
//
// Differences from E2B's envd, all explicit:
//   - tags given on Start live in this server's memory (see tags);
//   - List reports no envs and no cwd (Airlock does not report them);
//   - Connect replays the output the guest still buffers for the process
//     before the live output (envd sends live output only).
package envd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"connectrpc.com/connect"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/e2b/envd/processpb"
	"github.com/airlockdev/airlock/internal/e2b/envd/processpb/processpbconnect"
	"github.com/airlockdev/airlock/internal/e2b/guestuser"
	"github.com/airlockdev/airlock/internal/e2b/target"
	"github.com/airlockdev/airlock/internal/model"
)

// maxRequest bounds a request message (SendInput carries stdin data).
const maxRequest = 16 << 20

// Process is the process.Process service.
type Process struct {
	log  *slog.Logger
	tags *tags
}

var _ processpbconnect.ProcessHandler = (*Process)(nil)

// NewProcessHandler returns the path prefix ("/process.Process/") and the
// handler of E2B's process service. Requests must carry a target.Target in
// their context (the E2B gateway puts it there); without one they fail
// with unauthenticated.
func NewProcessHandler(logger *slog.Logger) (string, http.Handler) {
	svc := &Process{log: logger, tags: newTags()}
	return processpbconnect.NewProcessHandler(svc, connect.WithReadMaxBytes(maxRequest))
}

// targetOf returns the request's sandbox, or unauthenticated.
func targetOf(ctx context.Context) (target.Target, error) {
	t, ok := target.From(ctx)
	if !ok || t.Native == nil {
		return target.Target{}, connect.NewError(connect.CodeUnauthenticated, errors.New("no sandbox access for this request"))
	}
	return t, nil
}

// user resolves the request's Unix user; an unknown one is unauthenticated,
// as in envd.
func user(ctx context.Context, t target.Target) (guestuser.User, error) {
	u, err := t.LookupUser(ctx)
	if errors.Is(err, guestuser.ErrUnknown) {
		return guestuser.User{}, connect.NewError(connect.CodeUnauthenticated, err)
	}
	if err != nil {
		return guestuser.User{}, nativeError(err)
	}
	return u, nil
}

// List: the sandbox's running processes.
func (s *Process) List(ctx context.Context, _ *connect.Request[processpb.ListRequest]) (*connect.Response[processpb.ListResponse], error) {
	t, err := targetOf(ctx)
	if err != nil {
		return nil, err
	}
	list, err := t.Native.ListProcesses(ctx, t.Sandbox)
	if err != nil {
		return nil, nativeError(err)
	}
	out := &processpb.ListResponse{Processes: []*processpb.ProcessInfo{}}
	live := make(map[model.ProcessID]bool)
	for _, p := range list.Processes {
		if !p.Running {
			continue
		}
		id := model.ProcessID(p.ID)
		live[id] = true
		info := &processpb.ProcessInfo{Pid: uint32(p.Pid), Config: &processpb.ProcessConfig{Envs: map[string]string{}}}
		if len(p.Args) > 0 {
			info.Config.Cmd, info.Config.Args = p.Args[0], p.Args[1:]
		}
		if tag, ok := s.tags.get(t.Sandbox, id); ok {
			info.Tag = &tag
		}
		out.Processes = append(out.Processes, info)
	}
	s.tags.keep(t.Sandbox, live)
	return connect.NewResponse(out), nil
}

// find returns the running process sel names; none is not_found.
func (s *Process) find(ctx context.Context, t target.Target, sel *processpb.ProcessSelector) (apiv1.Process, error) {
	switch v := sel.GetSelector().(type) {
	case *processpb.ProcessSelector_Pid:
		list, err := t.Native.ListProcesses(ctx, t.Sandbox)
		if err != nil {
			return apiv1.Process{}, nativeError(err)
		}
		for _, p := range list.Processes {
			if p.Running && p.Pid == int(v.Pid) {
				return p, nil
			}
		}
		return apiv1.Process{}, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found", v.Pid))
	case *processpb.ProcessSelector_Tag:
		for _, id := range s.tags.find(t.Sandbox, v.Tag) {
			p, err := t.Native.GetProcess(ctx, t.Sandbox, id, 0)
			if client.IsCode(err, apiv1.CodeProcessNotFound) || client.IsCode(err, apiv1.CodeNotFound) {
				continue
			}
			if err != nil {
				return apiv1.Process{}, nativeError(err)
			}
			if p.Running {
				return p, nil
			}
		}
		return apiv1.Process{}, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with tag %q not found", v.Tag))
	}
	return apiv1.Process{}, connect.NewError(connect.CodeInvalidArgument, errors.New("a process selector (pid or tag) is required"))
}

// dataPlane returns the input routes of p, with a token allowing action.
func dataPlane(ctx context.Context, t target.Target, p apiv1.Process, action string) (*client.DataPlane, error) {
	sess, err := t.Native.CreateAttachment(ctx, t.Sandbox, model.ProcessID(p.ID), action)
	if err != nil {
		return nil, nativeError(err)
	}
	dp, err := t.Native.DataPlane(sess.AttachURL, sess.AttachmentToken)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return dp, nil
}

// SendInput writes stdin (or terminal input: a PTY's input is its stdin).
func (s *Process) SendInput(ctx context.Context, req *connect.Request[processpb.SendInputRequest]) (*connect.Response[processpb.SendInputResponse], error) {
	t, err := targetOf(ctx)
	if err != nil {
		return nil, err
	}
	p, err := s.find(ctx, t, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	data, err := inputBytes(req.Msg.GetInput())
	if err != nil {
		return nil, err
	}
	dp, err := dataPlane(ctx, t, p, "stdin")
	if err != nil {
		return nil, err
	}
	if err := dp.Stdin(ctx, bytes.NewReader(data), false); err != nil {
		return nil, nativeError(err)
	}
	return connect.NewResponse(&processpb.SendInputResponse{}), nil
}

func inputBytes(in *processpb.ProcessInput) ([]byte, error) {
	switch v := in.GetInput().(type) {
	case *processpb.ProcessInput_Stdin:
		return v.Stdin, nil
	case *processpb.ProcessInput_Pty:
		return v.Pty, nil
	}
	return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("input (stdin or pty) is required"))
}

// StreamInput writes a client stream's input, in order, through one
// native stdin stream. The first message selects the process.
func (s *Process) StreamInput(ctx context.Context, stream *connect.ClientStream[processpb.StreamInputRequest]) (*connect.Response[processpb.StreamInputResponse], error) {
	t, err := targetOf(ctx)
	if err != nil {
		return nil, err
	}
	if !stream.Receive() {
		if err := stream.Err(); err != nil {
			return nil, err
		}
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("input stream ended before its start message"))
	}
	start := stream.Msg().GetStart()
	if start == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("the input stream's first message must be start"))
	}
	p, err := s.find(ctx, t, start.GetProcess())
	if err != nil {
		return nil, err
	}
	dp, err := dataPlane(ctx, t, p, "stdin")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := dp.Stdin(ctx, pr, false)
		_ = pr.CloseWithError(cmpErr(err, io.ErrClosedPipe))
		done <- err
	}()
	recvErr := pipeInput(stream, pw)
	_ = pw.CloseWithError(recvErr) // nil: the native stdin request ends normally
	if recvErr != nil {
		cancel()
	}
	sendErr := <-done
	if recvErr != nil {
		return nil, recvErr
	}
	if sendErr != nil {
		return nil, nativeError(sendErr)
	}
	return connect.NewResponse(&processpb.StreamInputResponse{}), nil
}

// pipeInput copies the data messages of stream into w until the stream
// ends (nil) or fails.
func pipeInput(stream *connect.ClientStream[processpb.StreamInputRequest], w io.Writer) error {
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *processpb.StreamInputRequest_Data:
			data, err := inputBytes(ev.Data.GetInput())
			if err != nil {
				return err
			}
			if _, err := w.Write(data); err != nil {
				return connect.NewError(connect.CodeAborted, fmt.Errorf("stdin stream closed: %w", err))
			}
		case *processpb.StreamInputRequest_Keepalive:
		default:
			return connect.NewError(connect.CodeInvalidArgument, errors.New("only data and keepalive messages may follow the input stream's start"))
		}
	}
	return stream.Err()
}

func cmpErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// CloseStdin closes the process's stdin (a PTY process gets ^D).
func (s *Process) CloseStdin(ctx context.Context, req *connect.Request[processpb.CloseStdinRequest]) (*connect.Response[processpb.CloseStdinResponse], error) {
	t, err := targetOf(ctx)
	if err != nil {
		return nil, err
	}
	p, err := s.find(ctx, t, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	dp, err := dataPlane(ctx, t, p, "stdin")
	if err != nil {
		return nil, err
	}
	if err := dp.Stdin(ctx, http.NoBody, true); err != nil {
		return nil, nativeError(err)
	}
	return connect.NewResponse(&processpb.CloseStdinResponse{}), nil
}

// SendSignal sends SIGKILL or SIGTERM.
func (s *Process) SendSignal(ctx context.Context, req *connect.Request[processpb.SendSignalRequest]) (*connect.Response[processpb.SendSignalResponse], error) {
	t, err := targetOf(ctx)
	if err != nil {
		return nil, err
	}
	var sig string
	switch req.Msg.GetSignal() {
	case processpb.Signal_SIGNAL_SIGKILL:
		sig = "KILL"
	case processpb.Signal_SIGNAL_SIGTERM:
		sig = "TERM"
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("signal %v: want SIGNAL_SIGKILL or SIGNAL_SIGTERM", req.Msg.GetSignal()))
	}
	p, err := s.find(ctx, t, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if _, err := t.Native.SignalProcess(ctx, t.Sandbox, model.ProcessID(p.ID), sig); err != nil {
		return nil, nativeError(err)
	}
	return connect.NewResponse(&processpb.SendSignalResponse{}), nil
}

// Update resizes a PTY process's terminal.
func (s *Process) Update(ctx context.Context, req *connect.Request[processpb.UpdateRequest]) (*connect.Response[processpb.UpdateResponse], error) {
	t, err := targetOf(ctx)
	if err != nil {
		return nil, err
	}
	p, err := s.find(ctx, t, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if req.Msg.Pty == nil {
		return connect.NewResponse(&processpb.UpdateResponse{}), nil
	}
	size, err := termSize(req.Msg.GetPty())
	if err != nil {
		return nil, err
	}
	dp, err := dataPlane(ctx, t, p, "resize")
	if err != nil {
		return nil, err
	}
	if err := dp.Resize(ctx, size.Rows, size.Cols); err != nil {
		return nil, nativeError(err)
	}
	return connect.NewResponse(&processpb.UpdateResponse{}), nil
}

// termSize parses a PTY size (1–1000 each way).
func termSize(p *processpb.PTY) (apiv1.TermSize, error) {
	sz, err := model.ParseTermSize(int(p.GetSize().GetRows()), int(p.GetSize().GetCols()))
	if err != nil {
		return apiv1.TermSize{}, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("pty size: %w", err))
	}
	return apiv1.TermSize{Rows: int(sz.Rows), Cols: int(sz.Cols)}, nil
}
