// Package dataplane carries command output and input between guest
// processes and clients. A client attaches to a command session's process
// with the session's attachment token and receives stdout, stderr, gaps and
// the exit as Server-Sent Events whose ids are the guest agent's sequence
// numbers, so a client that reconnects with Last-Event-ID resumes where it
// left off (within the agent's per-process buffer); stdin, signals and
// terminal resizes go the other way. The token is a signed capability
// checked with public keys only (authz.go). Output flows agent → data plane →
// client, never touches the store, and is never lost silently: while a
// client reads, a slow client slows the process (flow control end to end);
// output dropped while nobody read arrives as an explicit gap event.
package dataplane

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/eventstream"
	"github.com/airlockdev/airlock/internal/guestops"
	"github.com/airlockdev/airlock/internal/guestops/agentguest"
	"github.com/airlockdev/airlock/internal/metrics"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/noderoute"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/streamlimit"
)

// Agents gives the data plane a guest-agent client for a sandbox hosted on
// this node (the worker implements it).
type Agents = agentguest.Agents

// reconnectWriteGrace is how long writes to a client may still take once
// the drain deadline has passed.
const reconnectWriteGrace = time.Second

// Default limits on concurrent attachments (SSE and WebSocket streams).
const (
	DefaultAttachPerProcess = 8
	DefaultAttachPerToken   = 4
	DefaultAttachPerProject = 256
	// DefaultAttachTotal bounds the attachments of the whole server: an
	// unread one holds about 1.5 MiB (docs/security.md), so together at
	// most about 1.5 GiB.
	DefaultAttachTotal = 1024
)

// Default limits on concurrent stdin streams (POST …/stdin; a WebSocket
// attachment's input is counted as its attachment).
const (
	DefaultStdinPerToken   = 4
	DefaultStdinPerProject = 256
)

// Store is what the data plane reads and writes of the desired state: a
// process's command session with its sandbox's state, the first
// attachment, a file transfer's sandbox (a store.Store has it all).
type Store interface {
	GetAttachTarget(ctx context.Context, id model.ProcessID) (model.CommandSession, model.SandboxState, error)
	MarkCommandSessionAttached(ctx context.Context, id model.CommandSessionID, at time.Time) (first bool, err error)
	GetSandboxByID(ctx context.Context, id model.SandboxID) (model.Sandbox, error)
}

// Config configures the data plane.
type Config struct {
	Store     Store
	Agents    Agents
	Logger    *slog.Logger
	Now       func() time.Time
	KeepAlive time.Duration // interval of SSE comment lines on idle streams; default 15 s
	// Concurrent attachments allowed per process, per token and per
	// project; zero means the defaults above. One more is refused with 429.
	AttachPerProcess, AttachPerToken, AttachPerProject int
	// AttachTotal caps the attachments of this server together (every
	// project); zero means DefaultAttachTotal.
	AttachTotal int
	// Concurrent stdin streams allowed per token and per project; zero
	// means the defaults above. One more is refused with 429
	// too_many_stdin_streams.
	StdinPerToken, StdinPerProject int
	// Verifier checks attachment tokens (public keys only); nil: the
	// process routes answer 501 not_supported.
	Verifier *auth.Verifier
	// NodeID, if set, refuses tokens for sandboxes on other nodes, unless
	// Nodes is set: then requests for sandboxes on other nodes are
	// forwarded there (forward.go). NodeID is this process's node.
	NodeID model.NodeID
	// Nodes finds other nodes' advertise URLs (the store); nil: nothing is
	// forwarded. It needs NodeID.
	Nodes noderoute.Nodes
	// Transport carries forwarded requests; nil: noderoute.NewTransport().
	Transport http.RoundTripper
	// FileTokens checks file transfer tokens (public keys only, normally
	// the same Verifier as attachment tokens); nil: no file routes.
	FileTokens FileTokenVerifier
	// Activity is told of every authorized request on a sandbox's
	// processes and files, and holds the sandbox active while a stream
	// (attach, stdin, file transfer) is open; nil: nothing is recorded.
	Activity Activity
	// Metrics counts open streams and the bytes they carry; nil: none.
	Metrics *metrics.Metrics
}

// Activity records sandbox activity for idle limits (the server's
// *activity.Tracker).
type Activity interface {
	Touch(id model.SandboxID)
	Hold(id model.SandboxID) (release func())
}

// hold holds the sandbox active until the returned function is called.
func (d *DataPlane) hold(id model.SandboxID) func() {
	if d.cfg.Activity == nil {
		return func() {}
	}
	return d.cfg.Activity.Hold(id)
}

// DataPlane serves attach streams and the process input routes.
type DataPlane struct {
	cfg    Config
	log    *slog.Logger
	limits *streamlimit.Limits // open attachments (attachCapProcess, attachCapToken, attachCapProject, attachCapServer)
	stdins *streamlimit.Limits // open stdin streams (stdinCapToken, stdinCapProject)
	drain  drainState
	router *noderoute.Router // nil: nothing is forwarded
}

// New returns a DataPlane.
func New(cfg Config) (*DataPlane, error) {
	if cfg.Store == nil || cfg.Agents == nil {
		return nil, errors.New("dataplane: store and agents are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Nodes != nil && cfg.NodeID == "" {
		return nil, errors.New("dataplane: NodeID is required with Nodes")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = 15 * time.Second
	}
	cfg.AttachPerProcess = cmp.Or(cfg.AttachPerProcess, DefaultAttachPerProcess)
	cfg.AttachPerToken = cmp.Or(cfg.AttachPerToken, DefaultAttachPerToken)
	cfg.AttachPerProject = cmp.Or(cfg.AttachPerProject, DefaultAttachPerProject)
	cfg.AttachTotal = cmp.Or(cfg.AttachTotal, DefaultAttachTotal)
	cfg.StdinPerToken = cmp.Or(cfg.StdinPerToken, DefaultStdinPerToken)
	cfg.StdinPerProject = cmp.Or(cfg.StdinPerProject, DefaultStdinPerProject)
	d := &DataPlane{cfg: cfg, log: cfg.Logger,
		limits: streamlimit.New(cfg.AttachPerProcess, cfg.AttachPerToken, cfg.AttachPerProject, cfg.AttachTotal),
		stdins: streamlimit.New(cfg.StdinPerToken, cfg.StdinPerProject),
		router: noderoute.New(cfg.NodeID, cfg.Nodes, cfg.Transport, cfg.Logger)}
	d.drain.init()
	return d, nil
}

// Register adds the data-plane routes to mux.
func (d *DataPlane) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET "+apiv1.AttachRoute, d.attach)
	mux.HandleFunc("POST "+apiv1.StdinRoute, d.stdin)
	mux.HandleFunc("POST "+apiv1.SignalRoute, d.signal)
	mux.HandleFunc("POST "+apiv1.ResizeRoute, d.resize)
	mux.HandleFunc("GET "+apiv1.WebSocketPath, d.wsAttach)
	d.registerFiles(mux)
}

// writeError answers with the JSON error of code, with the code's HTTP
// status in apiv1's error vocabulary.
func writeError(w http.ResponseWriter, code, msg string) {
	writeStatusError(w, apiv1.HTTPStatus(code), code, msg)
}

// writeStatusError is writeError with a status another package chose (a
// guestops.Error's: the code's status or its documented AltStatus).
func writeStatusError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(apiv1.Error{Code: code, Message: msg})
}

func writeProcError(w http.ResponseWriter, err error) {
	pe := agentguest.PublicError(err)
	writeStatusError(w, pe.Status, pe.Code, pe.Message)
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

// target is an authorized data-plane request: the process's command session
// and the running sandbox's agent.
type target struct {
	claims auth.AttachClaims
	pid    model.ProcessID
	cs     model.CommandSession
	agent  *agentclient.Client
}

// authorizeProcess checks the request's attachment token (signature and
// claims only, see authz.go) for action on the URL's {process_id}, loads the
// process's command session (for its spec) with its sandbox's state in one
// read and checks that the sandbox runs;
// on failure it has written the error.
func (d *DataPlane) authorizeProcess(w http.ResponseWriter, r *http.Request, action auth.Action) (target, bool) {
	ctx := r.Context()
	pid, err := model.ParseProcessID(r.PathValue("process_id"))
	if err != nil {
		writeError(w, apiv1.CodeInvalidRequest, err.Error())
		return target{}, false
	}
	claims, ok := d.authorize(w, r, pid, action)
	if !ok {
		return target{}, false
	}
	if d.routeRemote(w, r, claims.Sandbox, claims.Node) {
		return target{}, false
	}
	cs, state, err := d.cfg.Store.GetAttachTarget(ctx, pid)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			writeError(w, apiv1.CodeUnauthenticated, "the command session of this token no longer exists")
			return target{}, false
		}
		d.log.ErrorContext(ctx, "load command session", "process", pid, "err", err)
		writeError(w, apiv1.CodeInternal, "could not load the command session")
		return target{}, false
	}
	if !authorizeSession(w, claims, cs) {
		return target{}, false
	}
	if !connectionAuthenticated(w, r, cs.ProjectID) {
		return target{}, false
	}
	if state != model.StateRunning {
		pe := guestops.NotRunning(cs.SandboxID, state)
		writeStatusError(w, pe.Status, pe.Code, pe.Message)
		return target{}, false
	}
	agent, err := d.cfg.Agents.Agent(cs.SandboxID)
	if err != nil {
		writeProcError(w, err)
		return target{}, false
	}
	if d.cfg.Activity != nil {
		d.cfg.Activity.Touch(cs.SandboxID) // stdin, signals, resizes, attaches
	}
	return target{claims: claims, pid: pid, cs: cs, agent: agent}, true
}

// openAttachment authorizes an attachment (SSE or WebSocket) of the URL's
// process, counts it against the limits, records the session's first use
// and starts the process (idempotent by process ID: the first attach starts
// it, reconnects find it running or exited). On refusal it has written the
// error; otherwise release must be called when the attachment ends, and
// startErr says whether the process could be started.
func (d *DataPlane) openAttachment(w http.ResponseWriter, r *http.Request) (t target, release func(), startErr error, ok bool) {
	ctx := r.Context()
	t, ok = d.authorizeProcess(w, r, auth.ActionRead)
	if !ok {
		return target{}, nil, nil, false
	}
	unlimit, err := d.acquireAttachment(t)
	if err != nil {
		writeError(w, apiv1.CodeTooManyAttachments, err.Error())
		return target{}, nil, nil, false
	}
	// While the stream is attached its sandbox is active.
	unhold := d.hold(t.cs.SandboxID)
	release = func() { unhold(); unlimit() }
	if t.cs.AttachedAt == nil { // record the first use only; reconnects write nothing
		if _, err := d.cfg.Store.MarkCommandSessionAttached(ctx, t.cs.ID, d.cfg.Now()); err != nil {
			release()
			d.log.ErrorContext(ctx, "mark session attached", "session", t.cs.ID, "err", err)
			writeError(w, apiv1.CodeInternal, "could not record the attachment")
			return target{}, nil, nil, false
		}
	}
	return t, release, agentguest.Start(ctx, t.agent, t.cs, true), true
}

func (d *DataPlane) attach(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if d.drain.refuse(w) {
		return
	}
	var after uint64
	if h := r.Header.Get("Last-Event-ID"); h != "" {
		var err error
		if after, err = strconv.ParseUint(h, 10, 64); err != nil {
			writeError(w, apiv1.CodeInvalidRequest, "Last-Event-ID must be a non-negative integer")
			return
		}
	}
	t, release, startErr, ok := d.openAttachment(w, r)
	if !ok {
		return
	}
	defer release()
	defer d.cfg.Metrics.StreamOpened(metrics.StreamAttachSSE)()
	// Counted as an open stream before the client sees it open, so a drain
	// that begins now waits for it.
	streamCtx, endStream := d.drain.streamContext(ctx)
	defer endStream()

	rc := http.NewResponseController(w)
	sse := &sseWriter{Writer: eventstream.Start(w)}
	if err := sse.Flush(); err != nil { // the client sees the stream open at once
		return
	}
	if startErr != nil {
		pe := agentguest.PublicError(startErr)
		d.log.InfoContext(ctx, "process did not start", "process", t.pid, "err", startErr)
		_ = sse.Event("", apiv1.EventError, apiv1.Error{Code: pe.Code, Message: pe.Message})
		_ = sse.Flush()
		return
	}
	// At the drain deadline a write blocked on a client that reads nothing
	// must not hold the shutdown: writes get reconnectWriteGrace to finish
	// (enough for a live client to take the reconnect event).
	stopDeadline := context.AfterFunc(d.drain.end, func() {
		_ = rc.SetWriteDeadline(time.Now().Add(reconnectWriteGrace))
	})
	defer stopDeadline()
	err := d.stream(streamCtx, sse, t.agent, t.pid, after)
	switch {
	case err == nil:
	case d.drain.ended() && ctx.Err() == nil:
		_ = sse.reconnect(drainRetryMS)
	case ctx.Err() == nil:
		d.log.WarnContext(ctx, "attach stream ended with an error", "process", t.pid, "err", err)
		pe := agentguest.PublicError(err)
		_ = sse.Event("", apiv1.EventError, apiv1.Error{Code: pe.Code, Message: "lost the output stream: " + pe.Message})
		_ = sse.Flush()
	}
}
