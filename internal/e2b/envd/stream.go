package envd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/e2b/envd/processpb"
	"github.com/airlockdev/airlock/internal/e2b/guestuser"
	"github.com/airlockdev/airlock/internal/e2b/target"
	"github.com/airlockdev/airlock/internal/model"
)

// maxChunk is the largest data event; bigger native output is split (envd
// reads pipes in 32 KiB chunks).
const maxChunk = 32 << 10

// defaultTerm is the size of a PTY whose Start gives none.
var defaultTerm = apiv1.TermSize{Rows: 24, Cols: 80}

// Start runs a command and streams its events: start{pid} first, then its
// output, keepalives while it is silent, and end. The process outlives the
// stream (a client that goes away leaves it running) unless
// Connect-Timeout-Ms gave it a lifetime.
func (s *Process) Start(ctx context.Context, req *connect.Request[processpb.StartRequest], stream *connect.ServerStream[processpb.StartResponse]) error {
	t, err := targetOf(ctx)
	if err != nil {
		return err
	}
	opts, err := parseStreamOptions(req.Header())
	if err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	cmd, err := s.command(ctx, t, req.Msg, opts.lifetime)
	if err != nil {
		return err
	}
	sess, err := t.Native.CreateCommand(ctx, t.Sandbox, cmd)
	if err != nil {
		return nativeError(err)
	}
	// The first attach starts the process, with nothing of its output
	// lost: the guest holds it until this stream reads it.
	st, err := t.Native.Attach(ctx, sess.AttachURL, sess.AttachmentToken)
	if err != nil {
		return nativeError(err)
	}
	defer st.Close()
	id := model.ProcessID(sess.ProcessID)
	p, err := t.Native.GetProcess(ctx, t.Sandbox, id, 0)
	if err != nil && !client.IsCode(err, apiv1.CodeProcessNotFound) {
		return nativeError(err)
	}
	if err != nil || p.Pid == 0 {
		// It did not start: the stream says why.
		return startFailure(st, err)
	}
	if tag := req.Msg.Tag; tag != nil {
		s.tags.set(t.Sandbox, id, *tag)
	}
	send := func(ev *processpb.ProcessEvent) error {
		return stream.Send(&processpb.StartResponse{Event: ev})
	}
	return s.relay(ctx, st, p, relayOptions{keepalive: opts.keepalive, ownsLifetime: opts.lifetime > 0, gone: goneCheck(t)}, send)
}

// Connect streams the events of a running process: start{pid}, the output
// the guest still buffers and then live output, keepalives, end.
func (s *Process) Connect(ctx context.Context, req *connect.Request[processpb.ConnectRequest], stream *connect.ServerStream[processpb.ConnectResponse]) error {
	t, err := targetOf(ctx)
	if err != nil {
		return err
	}
	opts, err := parseStreamOptions(req.Header())
	if err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	p, err := s.find(ctx, t, req.Msg.GetProcess())
	if err != nil {
		return err
	}
	sess, err := t.Native.CreateAttachment(ctx, t.Sandbox, model.ProcessID(p.ID), "read")
	if err != nil {
		return nativeError(err)
	}
	st, err := t.Native.Attach(ctx, sess.AttachURL, sess.AttachmentToken)
	if err != nil {
		return nativeError(err)
	}
	defer st.Close()
	send := func(ev *processpb.ProcessEvent) error {
		return stream.Send(&processpb.ConnectResponse{Event: ev})
	}
	return s.relay(ctx, st, p, relayOptions{keepalive: opts.keepalive, gone: goneCheck(t)}, send)
}

// command translates a StartRequest for Airlock's API: the user's IDs, the
// cwd resolved against the user's home and checked, envd's environment.
func (s *Process) command(ctx context.Context, t target.Target, req *processpb.StartRequest, life Lifetime) (apiv1.CreateCommandRequest, error) {
	pc := req.GetProcess()
	if pc.GetCmd() == "" {
		return apiv1.CreateCommandRequest{}, connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	}
	u, err := user(ctx, t)
	if err != nil {
		return apiv1.CreateCommandRequest{}, err
	}
	cwd, err := workdir(ctx, t, u, pc.Cwd)
	if err != nil {
		return apiv1.CreateCommandRequest{}, err
	}
	env := map[string]string{"HOME": u.Home.String(), "USER": u.Name, "LOGNAME": u.Name}
	for k, v := range pc.GetEnvs() {
		env[k] = v
	}
	cmd := apiv1.CreateCommandRequest{
		Args:        append([]string{pc.GetCmd()}, pc.GetArgs()...),
		Env:         env,
		Cwd:         cwd.String(),
		Stdin:       req.Stdin == nil || *req.Stdin, // envd: a pipe unless stdin is false
		User:        &apiv1.User{UID: u.UID, GID: u.GID},
		TimeoutSecs: life.Secs(),
	}
	if req.Pty != nil {
		size := defaultTerm
		if req.Pty.Size != nil {
			if size, err = termSize(req.Pty); err != nil {
				return apiv1.CreateCommandRequest{}, err
			}
		}
		cmd.PTY = &size
	}
	return cmd, nil
}

// workdir resolves the cwd of a command: relative to the user's home,
// which is the default. A cwd given must exist (invalid_argument, as in
// envd); a home that does not exist falls back to "/".
func workdir(ctx context.Context, t target.Target, u guestuser.User, cwd *string) (model.GuestPath, error) {
	p := u.Home.String()
	if cwd != nil && *cwd != "" {
		p = *cwd
		if !path.IsAbs(p) {
			p = path.Join(u.Home.String(), p)
		}
	}
	gp, err := model.ParseGuestPath(path.Clean(p))
	if err != nil {
		return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cwd: %w", err))
	}
	fi, err := t.Native.StatFile(ctx, t.Sandbox, gp)
	given := cwd != nil && *cwd != ""
	switch {
	case err == nil && (fi.Type == "directory" || fi.Type == "symlink"):
		return gp, nil
	case err == nil:
		if !given {
			return "/", nil
		}
		return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cwd %s is not a directory", gp))
	case client.IsCode(err, apiv1.CodeNotFound):
		if !given {
			return "/", nil
		}
		return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cwd %s does not exist", gp))
	}
	return "", nativeError(err)
}

// startFailure is the error of a process that did not start: the attach
// stream's error event, else getErr.
func startFailure(st *client.Stream, getErr error) error {
	ev, err := st.Next()
	switch {
	case err != nil:
		return nativeError(err)
	case ev.Kind == apiv1.EventError && ev.Err != nil:
		return nativeError(&client.APIError{Status: 400, Code: ev.Err.Code, Message: ev.Err.Message})
	case getErr != nil:
		return nativeError(getErr)
	}
	return connect.NewError(connect.CodeInternal, fmt.Errorf("the process did not start (first event %q)", ev.Kind))
}

type nextResult struct {
	ev  client.Event
	err error
}

type relayOptions struct {
	keepalive time.Duration
	// ownsLifetime: the stream started the process with its
	// Connect-Timeout-Ms as the process's lifetime (Start, not Connect).
	ownsLifetime bool
	// gone reports whether the sandbox is being or has been deleted; nil
	// never.
	gone func(context.Context) bool
}

// goneCheck is relayOptions.gone of t's sandbox: deleting, deleted, or no
// longer readable with its token.
func goneCheck(t target.Target) func(context.Context) bool {
	return func(ctx context.Context) bool {
		sb, err := t.Native.GetSandbox(ctx, t.Sandbox)
		if err != nil {
			var ae *client.APIError
			return errors.As(err, &ae) && (ae.Status == http.StatusNotFound || ae.Status == http.StatusGone || ae.Status == http.StatusUnauthorized || ae.Status == http.StatusForbidden)
		}
		return sb.State == string(model.StateDeleting) || sb.State == string(model.StateDeleted)
	}
}

// abortIfGone breaks the response when the stream failed because its
// sandbox was deleted (killed, or its deadline passed): as the connection
// to a dead envd drops on E2B, so that the SDK asks /health (502 here)
// and says that the sandbox was killed or reached its end of life,
// instead of reading an ordinary error.
func abortIfGone(ctx context.Context, o relayOptions) {
	if o.gone == nil || ctx.Err() != nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if o.gone(cctx) {
		panic(http.ErrAbortHandler)
	}
}

// relay sends start{pid}, then st's output and exit as envd events, with a
// keepalive after each keepalive interval without one. A slow client slows
// the process (native flow control): nothing is read ahead of the client.
func (s *Process) relay(ctx context.Context, st *client.Stream, p apiv1.Process, o relayOptions, send func(*processpb.ProcessEvent) error) error {
	keepalive := o.keepalive
	start := &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: uint32(p.Pid)}}}
	if err := send(start); err != nil {
		return err
	}
	next := make(chan nextResult)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			ev, err := st.Next()
			select {
			case next <- nextResult{ev, err}:
			case <-done:
				return
			}
			if err != nil || ev.Kind == apiv1.EventExit || ev.Kind == apiv1.EventError {
				return
			}
		}
	})
	defer func() {
		close(done)
		_ = st.Close()
		wg.Wait()
	}()
	tick := time.NewTimer(keepalive)
	defer tick.Stop()
	for {
		var r nextResult
		select {
		case <-ctx.Done():
			return nativeError(context.Cause(ctx))
		case <-tick.C:
			if err := send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Keepalive{Keepalive: &processpb.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
			tick.Reset(keepalive)
			continue
		case r = <-next:
		}
		if r.err != nil {
			abortIfGone(ctx, o)
			return nativeError(r.err)
		}
		switch r.ev.Kind {
		case apiv1.EventStdout, apiv1.EventStderr:
			if err := sendData(r.ev, p.PTY, send); err != nil {
				return err
			}
			tick.Reset(keepalive)
		case apiv1.EventGap:
			s.log.WarnContext(ctx, "e2b process stream: output was lost before it was read", "process", p.ID, "stdout_bytes", r.ev.Gap.StdoutBytes, "stderr_bytes", r.ev.Gap.StderrBytes)
		case apiv1.EventExit:
			if r.ev.TimedOut && o.ownsLifetime {
				// E2B's envd runs the process under the Start stream's
				// Connect-Timeout-Ms: when that kills it, the stream ends
				// with deadline_exceeded, never with an end event (a
				// Connect stream sees the end event).
				return connect.NewError(connect.CodeDeadlineExceeded, errors.New("the process was killed when its Connect-Timeout-Ms lifetime passed"))
			}
			return send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: endEvent(r.ev.ExitCode, r.ev.Signal)}})
		case apiv1.EventError:
			abortIfGone(ctx, o)
			if r.ev.Err == nil {
				return connect.NewError(connect.CodeInternal, errors.New("the output stream failed"))
			}
			return nativeError(&client.APIError{Status: 500, Code: r.ev.Err.Code, Message: r.ev.Err.Message})
		}
	}
}

// sendData sends output as data events of at most maxChunk bytes; a PTY's
// output (native stdout) is pty data.
func sendData(ev client.Event, pty bool, send func(*processpb.ProcessEvent) error) error {
	for data := ev.Data; len(data) > 0; {
		n := min(len(data), maxChunk)
		chunk := data[:n:n]
		data = data[n:]
		d := &processpb.ProcessEvent_DataEvent{}
		switch {
		case pty:
			d.Output = &processpb.ProcessEvent_DataEvent_Pty{Pty: chunk}
		case ev.Kind == apiv1.EventStderr:
			d.Output = &processpb.ProcessEvent_DataEvent_Stderr{Stderr: chunk}
		default:
			d.Output = &processpb.ProcessEvent_DataEvent_Stdout{Stdout: chunk}
		}
		if err := send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: d}}); err != nil {
			return err
		}
	}
	return nil
}
