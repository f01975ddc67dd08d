// Package dataplane carries command output between guest processes and
// clients. A client attaches to a command session's process with the
// session's attachment token (a signed capability checked with public keys
// only, see authz.go) and receives stdout, stderr and the exit as
// Server-Sent Events whose ids are the guest agent's sequence numbers, so a
// client that reconnects with Last-Event-ID resumes where it left off (within
// the agent's per-process buffer). Output flows agent → data plane → client
// and never touches the store.
package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// Agents gives the data plane a guest-agent client for a sandbox hosted on
// this node (the worker implements it).
type Agents interface {
	Agent(id model.SandboxID) *agentclient.Client
}

// Config configures the data plane.
type Config struct {
	Store     store.Store
	Agents    Agents
	Logger    *slog.Logger
	Now       func() time.Time
	KeepAlive time.Duration // interval of SSE comment lines on idle streams; default 15 s
	// Verifier checks attachment tokens (public keys only).
	Verifier *auth.Verifier
	// NodeID, if set, refuses tokens for sandboxes on other nodes.
	NodeID model.NodeID
}

// DataPlane serves attach streams.
type DataPlane struct {
	cfg Config
	log *slog.Logger
}

// New returns a DataPlane.
func New(cfg Config) (*DataPlane, error) {
	if cfg.Store == nil || cfg.Agents == nil || cfg.Verifier == nil {
		return nil, errors.New("dataplane: store, agents and verifier are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = 15 * time.Second
	}
	return &DataPlane{cfg: cfg, log: cfg.Logger}, nil
}

// Register adds the data-plane routes to mux.
func (d *DataPlane) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET "+apiv1.AttachRoute, d.attach)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(apiv1.Error{Code: code, Message: msg})
}

// bearer returns the attachment token from the Authorization header or the
// token query parameter (browsers' EventSource cannot set headers).
func bearer(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok)
		}
		return ""
	}
	return r.URL.Query().Get("token")
}

func (d *DataPlane) attach(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	pid, err := model.ParseProcessID(r.PathValue("process_id"))
	if err != nil {
		writeError(w, http.StatusBadRequest, apiv1.CodeInvalidRequest, err.Error())
		return
	}
	claims, ok := d.authorize(w, r, pid, auth.ActionRead)
	if !ok {
		return
	}
	cs, err := d.cfg.Store.GetCommandSessionByProcess(ctx, pid)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			writeError(w, http.StatusUnauthorized, apiv1.CodeUnauthenticated, "the command session of this token no longer exists")
			return
		}
		d.log.ErrorContext(ctx, "load command session", "process", pid, "err", err)
		writeError(w, http.StatusInternalServerError, apiv1.CodeInternal, "could not load the command session")
		return
	}
	if !authorizeSession(w, claims, cs) {
		return
	}
	sb, err := d.cfg.Store.GetSandboxByID(ctx, cs.SandboxID)
	if err != nil {
		d.log.ErrorContext(ctx, "load sandbox", "sandbox", cs.SandboxID, "err", err)
		writeError(w, http.StatusInternalServerError, apiv1.CodeInternal, "could not load the sandbox")
		return
	}
	if sb.State != model.StateRunning {
		writeError(w, http.StatusConflict, apiv1.CodeSandboxNotRunning, fmt.Sprintf("sandbox %s is %s", sb.ID, sb.State))
		return
	}
	var after uint64
	if h := r.Header.Get("Last-Event-ID"); h != "" {
		after, err = strconv.ParseUint(h, 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, apiv1.CodeInvalidRequest, "Last-Event-ID must be a non-negative integer")
			return
		}
	}

	agent := d.cfg.Agents.Agent(sb.ID)
	if cs.AttachedAt == nil { // record the first use only; reconnects write nothing
		if _, err := d.cfg.Store.MarkCommandSessionAttached(ctx, cs.ID, d.cfg.Now()); err != nil {
			d.log.ErrorContext(ctx, "mark session attached", "session", cs.ID, "err", err)
			writeError(w, http.StatusInternalServerError, apiv1.CodeInternal, "could not record the attachment")
			return
		}
	}
	// Starting is idempotent by process ID: the first attach starts the
	// process, later ones (reconnects) find it running or exited.
	startErr := d.start(ctx, agent, cs)

	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, apiv1.CodeInternal, "streaming unsupported")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	sse := &sseWriter{w: w, f: flusher}
	if startErr != nil {
		code, msg := publicError(startErr)
		d.log.InfoContext(ctx, "process did not start", "process", pid, "err", startErr)
		_ = sse.event("", apiv1.EventError, apiv1.Error{Code: code, Message: msg})
		return
	}
	if err := d.stream(ctx, sse, agent, pid, after); err != nil && ctx.Err() == nil {
		d.log.WarnContext(ctx, "attach stream ended with an error", "process", pid, "err", err)
		_ = sse.event("", apiv1.EventError, apiv1.Error{Code: apiv1.CodeUnavailable, Message: "lost the connection to the sandbox: " + err.Error()})
	}
}

// publicError turns an error of the guest agent into a stable apiv1 code and
// a message. The agent runs inside the sandbox and is not trusted: only the
// codes mapped here reach clients, anything else is "internal".
func publicError(err error) (code, msg string) {
	var aerr *agentclient.Error
	if !errors.As(err, &aerr) {
		return apiv1.CodeUnavailable, "could not reach the sandbox: " + err.Error()
	}
	switch aerr.Code {
	case agentproto.CodeExecFailed:
		return apiv1.CodeExecFailed, aerr.Message
	case agentproto.CodeInvalidRequest:
		return apiv1.CodeInvalidRequest, aerr.Message
	case agentproto.CodeShuttingDown:
		return apiv1.CodeUnavailable, "the sandbox is shutting down"
	}
	return apiv1.CodeInternal, "the sandbox's agent refused the command"
}

func (d *DataPlane) start(ctx context.Context, agent *agentclient.Client, cs model.CommandSession) error {
	cwd := string(cs.Spec.Cwd)
	if cwd == "" {
		cwd = "/"
	}
	_, err := agent.Start(ctx, agentproto.StartRequest{
		ID:   cs.ProcessID.String(),
		Args: cs.Spec.Args,
		Env:  cs.Spec.Env.List(),
		Cwd:  cwd,
	})
	if errors.Is(err, agentclient.ErrProcessExists) {
		return nil
	}
	return err
}

// stream relays the process's events from the agent to the client until the
// exit event, resuming from the last relayed sequence number if the agent
// connection breaks.
func (d *DataPlane) stream(ctx context.Context, sse *sseWriter, agent *agentclient.Client, pid model.ProcessID, after uint64) error {
	const maxResumes = 3
	resumes := 0
	for {
		out, err := agent.Output(ctx, pid.String(), after)
		if err != nil {
			if resumes >= maxResumes || ctx.Err() != nil {
				return err
			}
			resumes++
			sleep(ctx, time.Duration(resumes)*200*time.Millisecond)
			continue
		}
		done, err := d.relay(ctx, sse, out, &after)
		_ = out.Close()
		if done || ctx.Err() != nil {
			return nil
		}
		if err != nil && resumes >= maxResumes {
			return err
		}
		resumes++
	}
}

// relay copies events from one agent output stream; it reports done once the
// exit event was sent.
func (d *DataPlane) relay(ctx context.Context, sse *sseWriter, out *agentclient.OutputStream, after *uint64) (done bool, err error) {
	type next struct {
		ev  agentproto.Event
		err error
	}
	events := make(chan next)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			ev, err := out.Next()
			select {
			case events <- next{ev, err}:
			case <-stop:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	keepAlive := time.NewTicker(d.cfg.KeepAlive)
	defer keepAlive.Stop()
	for {
		select {
		case <-ctx.Done():
			_ = out.Close() // unblocks the reader goroutine
			return false, ctx.Err()
		case <-keepAlive.C:
			if err := sse.comment("keep-alive"); err != nil {
				_ = out.Close()
				return false, err
			}
		case n := <-events:
			if n.err != nil {
				return false, n.err
			}
			id := strconv.FormatUint(n.ev.Seq, 10)
			switch n.ev.Type {
			case agentproto.EventStdout, agentproto.EventStderr:
				err = sse.event(id, n.ev.Type, apiv1.OutputEventData{Data: n.ev.Data})
			case agentproto.EventExit:
				code := -1
				if n.ev.ExitCode != nil {
					code = *n.ev.ExitCode
				}
				err = sse.event(id, apiv1.EventExit, apiv1.ExitEventData{ExitCode: code, Signal: n.ev.Signal})
				if err == nil {
					return true, nil
				}
			default:
				continue // a newer agent's event type this server does not know
			}
			if err != nil {
				_ = out.Close()
				return false, err
			}
			*after = n.ev.Seq
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
