// Package agentclient is the host side of Airlock's host↔guest protocol
// (see package agentproto): a Client that talks HTTP/2 (prior knowledge) to
// a guest agent over one byte stream it obtains from a Dialer, dialling
// lazily and again after the stream breaks.
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
	"time"

	"golang.org/x/net/http2"

	"github.com/airlockdev/airlock/internal/agentproto"
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
)

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
	tr     *http2.Transport

	lock   chan struct{} // 1-slot semaphore guarding cc and closed
	cc     *http2.ClientConn
	closed bool
}

// New returns a Client that dials with dial when the first request needs a
// connection, and again after the connection broke. logger may be nil.
func New(dial Dialer, logger *slog.Logger) *Client {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Client{
		dial:   dial,
		logger: logger,
		tr: &http2.Transport{
			AllowHTTP: true,
			// Notice a dead peer on a stream that stays open but silent
			// (e.g. a paused VM's serial port) instead of hanging forever.
			ReadIdleTimeout: 30 * time.Second,
			PingTimeout:     15 * time.Second,
		},
		lock: make(chan struct{}, 1),
	}
}

// conn returns a usable connection, dialling if there is none or the last
// one closed.
func (c *Client) conn(ctx context.Context) (*http2.ClientConn, error) {
	select {
	case c.lock <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-c.lock }()
	if c.closed {
		return nil, ErrClosed
	}
	if c.cc != nil {
		st := c.cc.State()
		if !st.Closed && !st.Closing {
			return c.cc, nil
		}
		c.cc.Close()
		c.cc = nil
		c.logger.Debug("agent connection closed; redialling")
	}
	nc, err := c.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("dial agent: %w", err)
	}
	cc, err := c.tr.NewClientConn(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("agent HTTP/2 handshake: %w", err)
	}
	c.cc = cc
	return cc, nil
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

// roundTrip sends one request. GET requests that fail because the
// connection had died are retried once on a fresh connection.
func (c *Client) roundTrip(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		cc, err := c.conn(ctx)
		if err != nil {
			return nil, err
		}
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, "http://agent"+path, rd)
		if err != nil {
			return nil, fmt.Errorf("agent %s %s: %w", method, path, err)
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := cc.RoundTrip(req)
		if err == nil {
			return resp, nil
		}
		if ctx.Err() == nil && method == http.MethodGet && attempt == 0 && cc.State().Closed {
			c.logger.Debug("agent connection broke; retrying on a new one", "path", path, "err", err)
			continue
		}
		return nil, fmt.Errorf("agent %s %s: %w", method, path, err)
	}
}

// call sends a JSON request (in may be nil) and decodes a JSON response
// with status want into out (may be nil).
func (c *Client) call(ctx context.Context, method, path string, in any, want int, out any) error {
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
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(out); err != nil {
		return fmt.Errorf("agent %s %s: decode response: %w", method, path, err)
	}
	return nil
}

// responseError turns a non-success response into an *Error.
func responseError(resp *http.Response) error {
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
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
	return e
}

func processPath(id string) string { return "/v1/processes/" + url.PathEscape(id) }

// Info returns what the agent says about itself.
func (c *Client) Info(ctx context.Context) (agentproto.Info, error) {
	var info agentproto.Info
	err := c.call(ctx, http.MethodGet, "/v1/info", nil, http.StatusOK, &info)
	return info, err
}

// Start starts a process. A taken ID gives an error that matches
// ErrProcessExists; other refusals are *Error (e.g. Code
// agentproto.CodeExecFailed when the executable is missing).
func (c *Client) Start(ctx context.Context, req agentproto.StartRequest) (agentproto.ProcessStatus, error) {
	var st agentproto.ProcessStatus
	err := c.call(ctx, http.MethodPost, "/v1/processes", req, http.StatusCreated, &st)
	return st, err
}

// List returns every process the agent knows (running and retained exited ones).
func (c *Client) List(ctx context.Context) ([]agentproto.ProcessStatus, error) {
	var l agentproto.ProcessList
	err := c.call(ctx, http.MethodGet, "/v1/processes", nil, http.StatusOK, &l)
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
// called or the exit event has been read.
func (c *Client) Output(ctx context.Context, id string, after uint64) (*OutputStream, error) {
	resp, err := c.roundTrip(ctx, http.MethodGet, processPath(id)+"/output?after="+strconv.FormatUint(after, 10), nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, responseError(resp)
	}
	return newOutputStream(id, after, resp.Body), nil
}
