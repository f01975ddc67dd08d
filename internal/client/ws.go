package client

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/airlockdev/airlock/internal/apiv1"
)

// wsChunk bounds the stdin bytes of one WebSocket message.
const wsChunk = 32 << 10

// wsReadLimit bounds one message from the server.
const wsReadLimit = 16 << 20

// WebSocket is an interactive attachment to a command's process over one
// WebSocket (see apiv1.WebSocketPath): output and the exit come from Next,
// stdin, eof, resizes and signals go the other way. When the server drains
// it reconnects (with the last sequence number, so nothing is lost or
// repeated). Next must be called from one goroutine; the sending methods
// may be called from others, concurrently with Next.
type WebSocket struct {
	c      *Client
	ctx    context.Context
	cancel context.CancelFunc
	url    string
	token  string

	mu   sync.Mutex // guards conn (replaced on reconnect)
	conn *websocket.Conn

	lastSeq uint64 // the last sequence number received (Next's goroutine)
	done    bool
	failed  int // reconnects since the last event
}

// AttachWebSocket opens the WebSocket at wsURL (a command session's
// websocket_url: ws://, wss://, http:// or https://, or relative to the
// server's base URL) with the attachment token, resuming after sequence
// number after (0: from the start). The first attachment starts the
// command's process. It lives until Close, the end of ctx, or the exit.
func (c *Client) AttachWebSocket(ctx context.Context, wsURL, token string, after uint64) (*WebSocket, error) {
	if token == "" {
		return nil, errors.New("websocket: empty attachment token")
	}
	ref := wsURL
	if rest, ok := strings.CutPrefix(ref, "ws://"); ok {
		ref = "http://" + rest
	} else if rest, ok := strings.CutPrefix(ref, "wss://"); ok {
		ref = "https://" + rest
	}
	u, err := c.resolve(ref)
	if err != nil {
		return nil, fmt.Errorf("websocket: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &WebSocket{c: c, ctx: ctx, cancel: cancel, url: u.String(), token: token, lastSeq: after}
	conn, err := w.dial()
	if err != nil {
		cancel()
		return nil, err
	}
	w.conn = conn
	return w, nil
}

// dial opens one connection, resuming after lastSeq.
func (w *WebSocket) dial() (*websocket.Conn, error) {
	u := w.url
	if w.lastSeq > 0 {
		sep := "?"
		if strings.Contains(u, "?") {
			sep = "&"
		}
		u += sep + "after=" + strconv.FormatUint(w.lastSeq, 10)
	}
	h := http.Header{}
	h.Set("Authorization", "Bearer "+w.token)
	h.Set("User-Agent", w.c.userAgent)
	conn, resp, err := websocket.Dial(w.ctx, u, &websocket.DialOptions{HTTPClient: w.c.http, HTTPHeader: h})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, readAPIError(resp)
		}
		if w.ctx.Err() != nil {
			return nil, fmt.Errorf("websocket: %w", context.Cause(w.ctx))
		}
		return nil, fmt.Errorf("websocket: %w", err)
	}
	conn.SetReadLimit(wsReadLimit)
	return conn, nil
}

func (w *WebSocket) current() *websocket.Conn {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.conn
}

// LastSeq returns the sequence number of the last event received.
func (w *WebSocket) LastSeq() uint64 { return w.lastSeq }

// Next returns the next event: stdout, stderr, gap, exit or error. After
// the exit or a final error it returns io.EOF. An error event that answers
// a failed request (Err set, the session goes on) is returned with Kind
// apiv1.EventError and is not final: see Event.Request.
func (w *WebSocket) Next() (Event, error) {
	for {
		if w.done {
			return Event{}, io.EOF
		}
		conn := w.current()
		typ, data, err := conn.Read(w.ctx)
		if err != nil {
			if w.ctx.Err() != nil {
				w.finish()
				return Event{}, fmt.Errorf("websocket: %w", context.Cause(w.ctx))
			}
			if err := w.reconnect(0, err); err != nil {
				w.finish()
				return Event{}, err
			}
			continue
		}
		if typ == websocket.MessageBinary {
			if len(data) < apiv1.WSOutputHeader {
				w.finish()
				return Event{}, fmt.Errorf("websocket: short output message (%d bytes)", len(data))
			}
			kind := apiv1.EventStdout
			if data[0] == apiv1.WSStderr {
				kind = apiv1.EventStderr
			}
			w.lastSeq = binary.BigEndian.Uint64(data[1:apiv1.WSOutputHeader])
			w.failed = 0
			return Event{Kind: kind, ID: strconv.FormatUint(w.lastSeq, 10), Data: data[apiv1.WSOutputHeader:]}, nil
		}
		var m apiv1.WSEvent
		if err := json.Unmarshal(data, &m); err != nil {
			w.finish()
			return Event{}, fmt.Errorf("websocket: malformed message: %w", err)
		}
		ev := Event{Kind: m.Type}
		if m.Seq > 0 {
			ev.ID = strconv.FormatUint(m.Seq, 10)
		}
		switch m.Type {
		case apiv1.EventExit:
			if m.ExitEventData != nil {
				ev.ExitCode, ev.Signal = m.ExitCode, m.ExitEventData.Signal
			}
			w.lastSeq = m.Seq
			w.finish()
		case apiv1.EventGap:
			ev.Gap = m.GapEventData
			w.lastSeq, w.failed = m.Seq, 0
		case apiv1.EventError:
			ev.Err = m.Error
			ev.Request = m.Request
			if m.Request == "" {
				w.finish()
			}
		case apiv1.EventReconnect:
			retry := time.Duration(0)
			if m.ReconnectEventData != nil {
				retry = time.Duration(m.RetryMS) * time.Millisecond
			}
			if err := w.reconnect(retry, errors.New("the server went away")); err != nil {
				w.finish()
				return Event{}, err
			}
			continue
		default:
			continue // a newer server's message
		}
		return ev, nil
	}
}

// reconnect replaces the connection after it ended (cause), waiting delay
// (or the client's backoff) first; it gives up after the client's
// reconnect limit counted since the last event.
func (w *WebSocket) reconnect(delay time.Duration, cause error) error {
	for {
		if w.failed >= w.c.reconnects {
			return fmt.Errorf("websocket: %w (gave up after %d reconnect attempts)", cause, w.failed)
		}
		if delay == 0 {
			delay = w.c.backoff(w.failed)
		}
		w.failed++
		if err := w.c.sleep(w.ctx, min(delay, w.c.maxDelay)); err != nil {
			return fmt.Errorf("websocket: %w", context.Cause(w.ctx))
		}
		delay = 0
		conn, err := w.dial()
		if err == nil {
			w.mu.Lock()
			old := w.conn
			w.conn = conn
			w.mu.Unlock()
			_ = old.CloseNow()
			return nil
		}
		var apiErr *APIError
		if errors.As(err, &apiErr) && !retryableStatus(apiErr.Status) {
			return err
		}
		cause = err
	}
}

func (w *WebSocket) finish() {
	w.done = true
	w.mu.Lock()
	conn := w.conn
	w.mu.Unlock()
	_ = conn.Close(websocket.StatusNormalClosure, "")
	w.cancel()
}

// Write sends p as stdin (in messages of at most 32 KiB). It blocks while
// the process does not read its stdin.
func (w *WebSocket) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		c := p[:min(len(p), wsChunk)]
		if err := w.current().Write(w.ctx, websocket.MessageBinary, c); err != nil {
			return n, fmt.Errorf("websocket: send stdin: %w", err)
		}
		n += len(c)
		p = p[len(c):]
	}
	return n, nil
}

// CloseStdin closes the process's stdin after what was written (a PTY
// process gets ^D).
func (w *WebSocket) CloseStdin() error {
	return w.control(apiv1.WSClientMessage{Type: apiv1.WSEOF})
}

// Resize changes the terminal size of a PTY process.
func (w *WebSocket) Resize(rows, cols int) error {
	return w.control(apiv1.WSClientMessage{Type: apiv1.WSResize, Rows: rows, Cols: cols})
}

// Signal sends a signal ("INT", "TERM", …) to the process.
func (w *WebSocket) Signal(name string) error {
	return w.control(apiv1.WSClientMessage{Type: apiv1.WSSignal, Signal: name})
}

func (w *WebSocket) control(m apiv1.WSClientMessage) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("websocket: %w", err)
	}
	if err := w.current().Write(w.ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("websocket: send %s: %w", m.Type, err)
	}
	return nil
}

// Close closes the connection; a blocked Next returns. The command keeps
// running in its sandbox.
func (w *WebSocket) Close() error {
	w.cancel()
	return w.current().CloseNow()
}
