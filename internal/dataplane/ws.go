// WebSocket attach: GET /data/v1/processes/{process_id}/ws
//
// One WebSocket carries a process's output to the client and its stdin,
// terminal resizes and signals back. Authorization, attachment caps,
// start-on-first-attach and draining are those of the SSE attach route; the
// token goes in "Authorization: Bearer" or ?token= (browsers cannot set
// headers on a WebSocket). ?after=N resumes after sequence number N, as
// Last-Event-ID does for SSE. Refusals (401, 409, 429, 503, …) are plain
// HTTP error responses before the upgrade.
//
// Server → client messages:
//
//   - binary: output. Byte 0 is the stream (1 stdout, 2 stderr), bytes 1–8
//     the event's sequence number (big-endian), the rest the output bytes.
//   - text: a JSON control event {"type":…, "seq":…, …} with the fields of
//     the SSE event's data inlined (apiv1.WSEvent):
//     {"type":"exit","seq":N,"exit_code":C[,"signal":"KILL"][,"timed_out":true]};
//     {"type":"gap","seq":N,"events":…,"stdout_bytes":…,"stderr_bytes":…,"exact":…};
//     {"type":"error","code":…,"message":…[,"request":…]};
//     {"type":"reconnect","seq":N,"reason":"draining","retry_ms":…}.
//     After exit, a final error (one without "request") or reconnect the
//     server closes the socket: 1000 normal closure after exit and error,
//     1001 going away after reconnect (reconnect with ?after=seq). An error
//     with "request" answers one client message that failed (e.g. resize of
//     a process without a terminal); the session goes on.
//
// Client → server messages:
//
//   - binary: stdin bytes, written to the process in the order sent.
//   - text: {"type":"resize","rows":R,"cols":C} | {"type":"signal","signal":"INT"}
//     | {"type":"eof"} (closes stdin after the bytes before it; a PTY
//     process gets ^D).
//
// Flow control: output is read from the agent only as fast as the socket
// takes it (a slow client slows the process, as with SSE); stdin messages
// are read from the socket only as fast as the process takes them. Nothing
// is buffered without bound. Every goroutine of a connection ends with it.
// The server pings every KeepAlive interval (15 s by default) and drops a
// client that does not answer within the next one (clients must read).
package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/guestops"
	"github.com/airlockdev/airlock/internal/guestops/agentguest"
	"github.com/airlockdev/airlock/internal/metrics"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

// Limits of a WebSocket session.
const (
	// wsReadLimit bounds one client message (stdin chunks are read whole).
	wsReadLimit = 1 << 20
	// wsCloseTimeout bounds writing the last message before closing.
	wsCloseTimeout = 5 * time.Second
)

// wsAttach serves apiv1.WebSocketPath.
func (d *DataPlane) wsAttach(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if d.drain.refuse(w) {
		return
	}
	var after uint64
	if v := r.URL.Query().Get("after"); v != "" {
		var err error
		if after, err = strconv.ParseUint(v, 10, 64); err != nil {
			writeError(w, apiv1.CodeInvalidRequest, "after must be a non-negative integer")
			return
		}
	}
	t, release, startErr, ok := d.openAttachment(w, r)
	if !ok {
		return
	}
	defer release()

	// The attachment token is the credential, not a cookie: a page of any
	// origin holding it may attach, so the Origin check is not needed.
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		d.log.InfoContext(ctx, "websocket upgrade failed", "process", t.pid, "err", err)
		return // Accept has answered
	}
	conn.SetReadLimit(wsReadLimit)
	defer d.cfg.Metrics.StreamOpened(metrics.StreamAttachWebSocket)()
	s := &wsSession{d: d, conn: conn, t: t, stdin: make(chan wsInput)}
	sessCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	// Runs last to first: end the session, drop the socket, wait for the
	// session's goroutines.
	defer wg.Wait()
	defer conn.CloseNow()
	defer cancel()

	if startErr != nil {
		pe := agentguest.PublicError(startErr)
		d.log.InfoContext(ctx, "process did not start", "process", t.pid, "err", startErr)
		s.final(ctx, apiv1.WSEvent{Type: apiv1.EventError, Error: &apiv1.Error{Code: pe.Code, Message: pe.Message}}, websocket.StatusNormalClosure)
		return
	}
	wg.Add(3)
	go func() {
		defer wg.Done()
		defer cancel() // the client closed or broke the socket: end the session
		s.readLoop(sessCtx)
	}()
	go func() {
		defer wg.Done()
		s.stdinLoop(sessCtx)
	}()
	go func() {
		defer wg.Done()
		defer cancel() // the client stopped answering pings
		s.keepAlive(sessCtx)
	}()

	streamCtx, endStream := d.drain.streamContext(sessCtx)
	defer endStream()
	err = s.stream(streamCtx, &after)
	switch {
	case err == nil:
		_ = conn.Close(websocket.StatusNormalClosure, apiv1.EventExit)
	case d.drain.ended() && sessCtx.Err() == nil:
		retry := drainRetryMS
		s.final(sessCtx, apiv1.WSEvent{Type: apiv1.EventReconnect, Seq: after,
			ReconnectEventData: &apiv1.ReconnectEventData{Reason: "draining", RetryMS: retry}}, websocket.StatusGoingAway)
	case sessCtx.Err() == nil && !errors.Is(err, errClientGone):
		d.log.WarnContext(ctx, "websocket stream ended with an error", "process", t.pid, "err", err)
		pe := agentguest.PublicError(err)
		s.final(sessCtx, apiv1.WSEvent{Type: apiv1.EventError,
			Error: &apiv1.Error{Code: pe.Code, Message: "lost the output stream: " + pe.Message}}, websocket.StatusNormalClosure)
	}
}

// keepAlive pings the client every KeepAlive interval, which keeps idle
// connections open through proxies and notices a client that vanished
// (it returns when a ping is not answered within the interval).
func (s *wsSession) keepAlive(ctx context.Context) {
	t := time.NewTicker(s.d.cfg.KeepAlive)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, s.d.cfg.KeepAlive)
		err := s.conn.Ping(pctx)
		cancel()
		if err != nil {
			return
		}
	}
}

// wsSession is one WebSocket attachment.
type wsSession struct {
	d     *DataPlane
	conn  *websocket.Conn
	t     target
	stdin chan wsInput // read loop → stdin loop; unbuffered: back-pressure
	buf   []byte       // output message buffer (the stream's goroutine only)
}

// wsInput is one stdin message: bytes, or the end of stdin.
type wsInput struct {
	data []byte
	eof  bool
}

// event writes one text message.
func (s *wsSession) event(ctx context.Context, ev apiv1.WSEvent) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode %s message: %w", ev.Type, err)
	}
	return s.conn.Write(ctx, websocket.MessageText, b)
}

// final writes a last event and closes the socket with code.
func (s *wsSession) final(ctx context.Context, ev apiv1.WSEvent, code websocket.StatusCode) {
	ctx, cancel := context.WithTimeout(ctx, wsCloseTimeout)
	defer cancel()
	if err := s.event(ctx, ev); err != nil {
		return
	}
	_ = s.conn.Close(code, ev.Type)
}

// requestError answers a failed client message; the session goes on.
func (s *wsSession) requestError(ctx context.Context, request string, err error) {
	pe := agentguest.PublicError(err)
	var se *sessionError
	if errors.As(err, &se) {
		pe = &guestops.Error{Code: apiv1.CodeInvalidRequest, Message: se.msg}
	}
	_ = s.event(ctx, apiv1.WSEvent{Type: apiv1.EventError, Request: request,
		Error: &apiv1.Error{Code: pe.Code, Message: pe.Message}})
}

// sessionError is a client message the server refuses itself.
type sessionError struct{ msg string }

func (e *sessionError) Error() string { return e.msg }

// readLoop reads the client's messages until the socket ends: stdin goes
// to the stdin loop (in order, blocking while the process does not read),
// control messages are carried out here.
func (s *wsSession) readLoop(ctx context.Context) {
	for {
		typ, data, err := s.conn.Read(ctx)
		if err != nil {
			return
		}
		if typ == websocket.MessageBinary {
			if len(data) == 0 {
				continue
			}
			if !s.t.claims.Allows(auth.ActionStdin) {
				s.requestError(ctx, "stdin", errNotAllowed(auth.ActionStdin))
				continue
			}
			s.d.cfg.Metrics.StreamBytes(metrics.StreamAttachWebSocket, metrics.DirectionIn, int64(len(data)))
			select {
			case s.stdin <- wsInput{data: data}:
			case <-ctx.Done():
				return
			}
			continue
		}
		var m apiv1.WSClientMessage
		if err := json.Unmarshal(data, &m); err != nil {
			s.requestError(ctx, "", &sessionError{"bad JSON message: " + err.Error()})
			continue
		}
		if need, ok := wsMessageAction(m.Type); ok && !s.t.claims.Allows(need) {
			s.requestError(ctx, m.Type, errNotAllowed(need))
			continue
		}
		switch m.Type {
		case apiv1.WSEOF:
			select {
			case s.stdin <- wsInput{eof: true}:
			case <-ctx.Done():
				return
			}
		case apiv1.WSResize:
			if err := s.resize(ctx, m.Rows, m.Cols); err != nil {
				s.requestError(ctx, m.Type, err)
			}
		case apiv1.WSSignal:
			if err := s.signal(ctx, m.Signal); err != nil {
				s.requestError(ctx, m.Type, err)
			}
		default:
			s.requestError(ctx, textclip.Bytes(m.Type, 64), &sessionError{fmt.Sprintf("unknown message type %q (want resize, signal or eof)", textclip.Bytes(m.Type, 64))})
		}
	}
}

// wsMessageAction is the token action a client message needs.
func wsMessageAction(typ string) (auth.Action, bool) {
	switch typ {
	case apiv1.WSEOF:
		return auth.ActionStdin, true
	case apiv1.WSResize:
		return auth.ActionResize, true
	case apiv1.WSSignal:
		return auth.ActionSignal, true
	}
	return "", false
}

func errNotAllowed(a auth.Action) error {
	return &sessionError{"this attachment token does not allow " + string(a)}
}

func (s *wsSession) resize(ctx context.Context, rows, cols int) error {
	size, err := model.ParseTermSize(rows, cols)
	if err != nil {
		return &sessionError{err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, guestops.CallTimeout)
	defer cancel()
	return s.t.agent.Resize(ctx, s.t.pid.String(), agentproto.WindowSize{Rows: size.Rows, Cols: size.Cols})
}

func (s *wsSession) signal(ctx context.Context, name string) error {
	sig, err := model.ParseSignal(name)
	if err != nil {
		return &sessionError{err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, guestops.CallTimeout)
	defer cancel()
	return s.t.agent.Signal(ctx, s.t.pid.String(), sig.AgentName())
}

// stream relays the process's events to the socket until the exit event
// (see DataPlane.follow). It returns nil once the exit event was sent.
func (s *wsSession) stream(ctx context.Context, after *uint64) error {
	return s.d.follow(ctx, s.t.agent, s.t.pid, after, s.relay)
}
