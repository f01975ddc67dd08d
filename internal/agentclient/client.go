// Package agentclient is the host side of Airlock's host↔guest protocol
// (see package agentproto): a Client that talks HTTP/2 (prior knowledge) to
// a guest agent over one byte stream it obtains from a Dialer, dialling
// lazily and again after the stream breaks. Every new connection starts with
// GET /v1/info: an agent whose protocol version is outside
// [MinProtocol, agentproto.ProtocolVersion] is refused with a
// *ProtocolError, and the features it reports are kept (Info).
package agentclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/textclip"
	"github.com/airlockdev/airlock/internal/tracing"
)

// Dialer opens a new byte stream to the agent. ctx bounds the dial only,
// not the life of the connection.
type Dialer func(ctx context.Context) (net.Conn, error)

// Errors of the Client.
var (
	// ErrProcessExists: Start with an ID the agent already has (409 "exists").
	ErrProcessExists = errors.New("agent: process exists")
	// ErrProcessNotFound: the agent has no process with that ID (404 "not_found").
	ErrProcessNotFound = errors.New("agent: process not found")
	// ErrOutputLost: Run saw a gap in the event sequence: the agent dropped
	// output from its bounded buffer before it was read.
	ErrOutputLost = errors.New("agent: output lost")
	// ErrClosed: the Client has been closed.
	ErrClosed = errors.New("agent client closed")
	// ErrUnsupported: the agent lacks a feature the call needs (an older
	// agent, e.g. restored from an old snapshot).
	ErrUnsupported = errors.New("agent: not supported by this agent")
)

// MinProtocol is the oldest agent protocol version the host accepts.
const MinProtocol = 1

// ProtocolError is returned when the agent speaks a protocol version this
// host does not support.
type ProtocolError struct {
	Protocol     int
	AgentVersion string
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("agent %s speaks protocol %d; this host supports protocols %d to %d (update the sandbox's agent or the server)",
		e.AgentVersion, e.Protocol, MinProtocol, agentproto.ProtocolVersion)
}

// Flow-control windows of the host's side of an agent connection: what an
// output stream that is not being read can hold in memory, and what all of
// one sandbox's streams together can. A stream at its window stops the
// agent's writes to it, which pushes back on the process (see agentproto).
const (
	streamWindow = 1 << 20
	connWindow   = 64 << 20
)

// maxFrame is the largest HTTP/2 frame either side of an agent connection
// reads (the protocol's default is 16 KiB).
const maxFrame = 1 << 20

// handshakeTimeout bounds dialling a new connection and its info request.
const handshakeTimeout = 20 * time.Second

// Error is an error response of the agent.
type Error struct {
	Status  int    // HTTP status
	Code    string // agentproto.Code…
	Message string
}

func (e *Error) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("agent: HTTP %d: %s", e.Status, e.Message)
	}
	return fmt.Sprintf("agent: %s (HTTP %d): %s", e.Code, e.Status, e.Message)
}

// Is makes errors.Is(err, ErrProcessExists) and
// errors.Is(err, ErrProcessNotFound) hold for the matching responses.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrProcessExists:
		return e.Status == http.StatusConflict && e.Code == agentproto.CodeExists
	case ErrProcessNotFound:
		return e.Status == http.StatusNotFound && e.Code == agentproto.CodeNotFound
	}
	return false
}

// Client talks to one guest agent. It is safe for concurrent use; all
// requests share one connection.
type Client struct {
	dial   Dialer
	logger *slog.Logger
	tr     *http.Transport
	tracer trace.Tracer // nil: not traced (trace.go)

	lock   chan struct{} // 1-slot semaphore guarding cc, info and closed
	cc     *http.ClientConn
	info   agentproto.Info // what the agent of cc said about itself
	closed bool
}

// New returns a Client that dials with dial when the first request needs a
// connection, and again after the connection broke. logger may be nil.
func New(dial Dialer, logger *slog.Logger, opts ...Option) *Client {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	c := &Client{
		dial:   dial,
		logger: logger,
		tr: &http.Transport{
			Protocols:              &p,
			MaxResponseHeaderBytes: maxHeaderBytes,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return dial(ctx)
			},
			HTTP2: &http.HTTP2Config{
				MaxReceiveBufferPerStream:     streamWindow,
				MaxReceiveBufferPerConnection: connWindow,
				// Big frames: fewer frames and writes per MiB of output.
				MaxReadFrameSize: maxFrame,
				// Notice a dead peer on a stream that stays open but
				// silent (e.g. a paused VM's serial port).
				SendPingTimeout: 30 * time.Second,
				PingTimeout:     15 * time.Second,
			},
		},
		lock: make(chan struct{}, 1),
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// conn returns a usable connection, dialling if there is none or the last
// one broke. A new connection is checked with GET /v1/info first.
func (c *Client) conn(ctx context.Context) (*http.ClientConn, error) {
	cc, _, err := c.connect(ctx)
	return cc, err
}

// connect is conn that also says whether it dialled: fresh is true when the
// connection is new, its handshake having just read the agent's info.
func (c *Client) connect(ctx context.Context) (cc *http.ClientConn, fresh bool, err error) {
	select {
	case c.lock <- struct{}{}:
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	defer func() { <-c.lock }()
	if c.closed {
		return nil, false, ErrClosed
	}
	if c.cc != nil {
		if c.cc.Err() == nil {
			return c.cc, false, nil
		}
		c.cc.Close()
		c.cc = nil
		c.logger.Debug("agent connection broke; redialling")
	}
	ctx, span := c.startSpan(ctx, "", "")
	defer func() { tracing.End(span, err) }()
	// Bounded whatever the caller's context: the lock is held meanwhile,
	// and a guest that accepts but never answers must not wedge every
	// caller (or Close) behind it.
	hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		cc, err = c.tr.NewClientConn(hctx, "http", "agent:0")
		if err != nil {
			return nil, false, fmt.Errorf("dial agent: %w", err)
		}
		info, err := handshake(hctx, cc)
		if err == nil {
			c.cc, c.info = cc, info
			return cc, true, nil
		}
		cc.Close()
		// A byte stream that is one of several in turn over a single
		// channel (a virtio-serial port) may carry the tail of the
		// previous connection's frames into the new one when its dialer
		// did not skip them (SyncSerial): the handshake then fails with
		// an HTTP/2 protocol error, and a new connection works.
		var pe *ProtocolError
		if attempt >= handshakeAttempts || errors.As(err, &pe) || hctx.Err() != nil {
			return nil, false, err
		}
		c.logger.Debug("agent handshake failed; dialling again", "attempt", attempt, "err", err)
	}
}

// handshakeAttempts bounds dialling again after a failed handshake.
const handshakeAttempts = 3

// handshake asks a new connection's agent who it is and checks its
// protocol version.
func handshake(ctx context.Context, cc *http.ClientConn) (agentproto.Info, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/v1/info", nil)
	if err != nil {
		return agentproto.Info{}, err
	}
	resp, err := cc.RoundTrip(req)
	if err != nil {
		return agentproto.Info{}, fmt.Errorf("agent handshake: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return agentproto.Info{}, fmt.Errorf("agent handshake: %w", responseError(resp))
	}
	var info agentproto.Info
	if err := decodeCapped(resp.Body, maxInfoBytes, "info", &info); err != nil {
		return agentproto.Info{}, fmt.Errorf("agent handshake: %w", err)
	}
	if info.Protocol < MinProtocol || info.Protocol > agentproto.ProtocolVersion {
		return agentproto.Info{}, &ProtocolError{Protocol: info.Protocol, AgentVersion: info.AgentVersion}
	}
	return info, nil
}

// Close closes the connection; later calls fail with ErrClosed. Open
// OutputStreams fail.
func (c *Client) Close() error {
	c.lock <- struct{}{}
	defer func() { <-c.lock }()
	c.closed = true
	if c.cc != nil {
		err := c.cc.Close()
		c.cc = nil
		return err
	}
	return nil
}

// agentInfo returns the info of the current connection's agent, dialling
// if needed.
func (c *Client) agentInfo(ctx context.Context) (agentproto.Info, error) {
	if _, err := c.conn(ctx); err != nil {
		return agentproto.Info{}, err
	}
	c.lock <- struct{}{}
	defer func() { <-c.lock }()
	return c.info, nil
}

// require fails with ErrUnsupported unless the agent has feature f.
func (c *Client) require(ctx context.Context, f string) error {
	info, err := c.agentInfo(ctx)
	if err != nil {
		return err
	}
	if !info.HasFeature(f) {
		return fmt.Errorf("%w: agent %s (protocol %d) lacks %q", ErrUnsupported, info.AgentVersion, info.Protocol, f)
	}
	return nil
}

// roundTrip sends one request. GET requests that fail because the
// connection had died are retried once on a fresh connection.
func (c *Client) roundTrip(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	var rd func() io.Reader
	if body != nil {
		rd = func() io.Reader { return bytes.NewReader(body) }
	}
	return c.send(ctx, method, path, rd, "application/json", "")
}

// send sends one request whose body (if any) newBody makes. GET requests
// that fail because the connection had died are retried once on a fresh
// connection.
func (c *Client) send(ctx context.Context, method, path string, newBody func() io.Reader, contentType, accept string) (_ *http.Response, err error) {
	ctx, span := c.startSpan(ctx, method, path)
	defer func() { tracing.End(span, err) }()
	for attempt := 0; ; attempt++ {
		cc, err := c.conn(ctx)
		if err != nil {
			return nil, err
		}
		var rd io.Reader
		if newBody != nil {
			rd = newBody()
		}
		req, err := http.NewRequestWithContext(ctx, method, "http://agent"+path, rd)
		if err != nil {
			return nil, fmt.Errorf("agent %s %s: %w", method, path, err)
		}
		if rd != nil {
			req.Header.Set("Content-Type", contentType)
		}
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := cc.RoundTrip(req)
		if err == nil {
			span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
			return resp, nil
		}
		if ctx.Err() == nil && method == http.MethodGet && attempt == 0 && cc.Err() != nil {
			c.logger.Debug("agent connection broke; retrying on a new one", "path", path, "err", err)
			continue
		}
		return nil, fmt.Errorf("agent %s %s: %w", method, path, err)
	}
}

// call sends a JSON request (in may be nil) and decodes a JSON response
// with status want into out (may be nil) of at most maxJSONBytes.
func (c *Client) call(ctx context.Context, method, path string, in any, want int, out any) error {
	return c.callCapped(ctx, method, path, in, want, out, maxJSONBytes)
}

// callCapped is call with a response of at most limit bytes.
func (c *Client) callCapped(ctx context.Context, method, path string, in any, want int, out any, limit int64) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("agent %s %s: %w", method, path, err)
		}
	}
	resp, err := c.roundTrip(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		return responseError(resp)
	}
	if out == nil {
		return nil
	}
	if err := decodeCapped(resp.Body, limit, "response", out); err != nil {
		return fmt.Errorf("agent %s %s: %w", method, path, err)
	}
	return nil
}

// responseError turns a non-success response into an *Error.
func responseError(resp *http.Response) error {
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
	e := &Error{Status: resp.StatusCode}
	var body agentproto.Error
	if jerr := json.Unmarshal(data, &body); jerr == nil && body.Code != "" {
		e.Code, e.Message = body.Code, body.Message
	} else {
		e.Message = string(bytes.TrimSpace(data))
		if e.Message == "" {
			e.Message = http.StatusText(resp.StatusCode)
		}
		if err != nil {
			e.Message += " (reading body: " + err.Error() + ")"
		}
	}
	e.Code, e.Message = textclip.Counted(e.Code, maxErrorMessage), textclip.Counted(e.Message, maxErrorMessage)
	return e
}

func processPath(id string) string { return "/v1/processes/" + url.PathEscape(id) }

// Info returns what the agent says about itself: a fresh GET /v1/info on
// an open connection, the new connection's handshake answer otherwise.
func (c *Client) Info(ctx context.Context) (agentproto.Info, error) {
	_, fresh, err := c.connect(ctx)
	if err != nil {
		return agentproto.Info{}, err
	}
	if fresh {
		// A new connection starts with GET /v1/info: do not ask twice.
		return c.agentInfo(ctx)
	}
	var info agentproto.Info
	err = c.call(ctx, http.MethodGet, "/v1/info", nil, http.StatusOK, &info)
	return info, err
}

// Start starts a process. A taken ID gives an error that matches
// ErrProcessExists; other refusals are *Error (e.g. Code
// agentproto.CodeExecFailed when the executable is missing).
func (c *Client) Start(ctx context.Context, req agentproto.StartRequest) (agentproto.ProcessStatus, error) {
	for _, need := range []struct {
		used    bool
		feature string
	}{
		{req.Stdin, agentproto.FeatureStdin},
		{req.PTY != nil, agentproto.FeaturePTY},
		{req.User != nil, agentproto.FeatureUser},
		{req.TimeoutMillis > 0, agentproto.FeatureTimeout},
	} {
		if need.used {
			if err := c.require(ctx, need.feature); err != nil {
				return agentproto.ProcessStatus{}, err
			}
		}
	}
	if req.HoldOutput {
		// Holding output is protection, not a requirement: an agent
		// without it (protocol 1 refuses unknown fields) starts anyway.
		if info, err := c.agentInfo(ctx); err == nil && !info.HasFeature(agentproto.FeatureHold) {
			req.HoldOutput = false
		}
	}
	var st agentproto.ProcessStatus
	err := c.call(ctx, http.MethodPost, "/v1/processes", req, http.StatusCreated, &st)
	return st, err
}

// List returns every process the agent knows (running and retained exited ones).
func (c *Client) List(ctx context.Context) ([]agentproto.ProcessStatus, error) {
	var l agentproto.ProcessList
	err := c.callCapped(ctx, http.MethodGet, "/v1/processes", nil, http.StatusOK, &l, maxListBytes)
	return l.Processes, err
}

// Status returns one process; ErrProcessNotFound if the agent has none
// with that ID.
func (c *Client) Status(ctx context.Context, id string) (agentproto.ProcessStatus, error) {
	var st agentproto.ProcessStatus
	err := c.call(ctx, http.MethodGet, processPath(id), nil, http.StatusOK, &st)
	return st, err
}

// Signal sends a signal ("TERM", "KILL", "INT", "HUP", "QUIT", "USR1",
// "USR2", "STOP", "CONT") to a process. An exited process gives an *Error
// with Code agentproto.CodeNotRunning.
func (c *Client) Signal(ctx context.Context, id, signal string) error {
	return c.call(ctx, http.MethodPost, processPath(id)+"/signal", agentproto.SignalRequest{Signal: signal}, http.StatusNoContent, nil)
}

// Output opens the event stream of a process, starting after Seq after
// (0: from the first kept event). The stream lives until ctx ends, Close is
// called or the exit event has been read. While it is open and unread, the
// process's output is held back (see agentproto); close streams promptly.
func (c *Client) Output(ctx context.Context, id string, after uint64) (*OutputStream, error) {
	resp, err := c.send(ctx, http.MethodGet, processPath(id)+"/output?after="+strconv.FormatUint(after, 10), nil, "", agentproto.FramesMediaType)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, responseError(resp)
	}
	frames := strings.HasPrefix(resp.Header.Get("Content-Type"), agentproto.FramesMediaType)
	return newOutputStream(id, after, resp.Body, frames), nil
}

// Wait blocks until the process has exited and returns its status; ctx
// bounds the wait. Agents without the wait feature give ErrUnsupported.
func (c *Client) Wait(ctx context.Context, id string) (agentproto.ProcessStatus, error) {
	if err := c.require(ctx, agentproto.FeatureWait); err != nil {
		return agentproto.ProcessStatus{}, err
	}
	var st agentproto.ProcessStatus
	err := c.call(ctx, http.MethodGet, processPath(id)+"/wait", nil, http.StatusOK, &st)
	return st, err
}

// Stdin streams r into the process's stdin; with closeAfter, stdin is
// closed after r's end (a PTY process gets end-of-file, ^D). A process
// without open stdin gives an *Error with Code agentproto.CodeNoStdin.
func (c *Client) Stdin(ctx context.Context, id string, r io.Reader, closeAfter bool) error {
	if err := c.require(ctx, agentproto.FeatureStdin); err != nil {
		return err
	}
	path := processPath(id) + "/stdin"
	if closeAfter {
		path += "?close=1"
	}
	if r == nil {
		r = http.NoBody
	}
	used := false
	resp, err := c.send(ctx, http.MethodPost, path, func() io.Reader {
		if used {
			return errReader{errors.New("stdin body cannot be sent twice")}
		}
		used = true
		return r
	}, "application/octet-stream", "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return responseError(resp)
	}
	return nil
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// Logs returns the agent's newest log lines (agents started with
// --log-to-memory).
func (c *Client) Logs(ctx context.Context) ([]byte, error) {
	if err := c.require(ctx, agentproto.FeatureLogs); err != nil {
		return nil, err
	}
	resp, err := c.roundTrip(ctx, http.MethodGet, "/v1/logs", nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, responseError(resp)
	}
	logs, err := readCapped(resp.Body, maxLogBytes, "logs")
	if err != nil {
		return nil, fmt.Errorf("agent GET /v1/logs: %w", err)
	}
	return logs, nil
}

// Usage returns the guest's memory and root filesystem use (a VM's agent;
// agents before FeatureUsage refuse).
func (c *Client) Usage(ctx context.Context) (agentproto.GuestUsage, error) {
	var u agentproto.GuestUsage
	if err := c.require(ctx, agentproto.FeatureUsage); err != nil {
		return u, err
	}
	err := c.call(ctx, http.MethodGet, "/v1/usage", nil, http.StatusOK, &u)
	return u, err
}

// Resize changes a PTY process's terminal size.
func (c *Client) Resize(ctx context.Context, id string, size agentproto.WindowSize) error {
	if err := c.require(ctx, agentproto.FeaturePTY); err != nil {
		return err
	}
	return c.call(ctx, http.MethodPost, processPath(id)+"/resize", size, http.StatusNoContent, nil)
}

// Info returns what the agent says about itself (from a fresh request).

// ReleaseListener asks the agent to close its Unix socket and every
// connection on it (this client's too: it dials again for its next
// request) until the host creates agentproto.RelistenTrigger in the
// socket's directory, or for agent.ReleaseTimeout; the runtime does it
// before a runsc checkpoint. Agents without the listener-release feature
// give ErrUnsupported.
func (c *Client) ReleaseListener(ctx context.Context) error {
	if err := c.require(ctx, agentproto.FeatureListenerRelease); err != nil {
		return err
	}
	return c.call(ctx, http.MethodPost, "/v1/listener/release", nil, http.StatusNoContent, nil)
}

// ConfigureGuest configures the guest machine (host name, environment of
// later processes, entropy, clock, network: see agentproto.GuestConfig).
// Agents without the guest-config feature give ErrUnsupported.
func (c *Client) ConfigureGuest(ctx context.Context, cfg agentproto.GuestConfig) error {
	if err := c.require(ctx, agentproto.FeatureGuestConfig); err != nil {
		return err
	}
	return c.call(ctx, http.MethodPut, "/v1/guest", cfg, http.StatusNoContent, nil)
}
