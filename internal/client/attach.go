package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
)

// Event is one decoded event of an attach stream.
type Event struct {
	Kind     string              // apiv1.EventStdout, EventStderr, EventGap, EventExit or EventError
	ID       string              // the event's SSE id (a sequence number); empty if it had none
	Data     []byte              // stdout / stderr bytes
	ExitCode int                 // exit: the exit code, -1 if killed by a signal
	Signal   string              // exit: the signal's name (e.g. "KILL") if killed by one
	TimedOut bool                // exit: killed because its timeout passed
	Gap      *apiv1.GapEventData // gap: what output was lost before this client read it
	Err      *apiv1.Error        // error: why the process could not start or the stream broke
	Request  string              // WebSocket error: the client message that failed; the session goes on
}

// Stream is an attach stream: a command's output, then its exit (or an
// error). It reconnects with Last-Event-ID when the connection drops. A
// Stream is not safe for concurrent use; Close may be called from another
// goroutine to stop a blocked Next.
type Stream struct {
	c      *Client
	ctx    context.Context
	cancel context.CancelFunc
	url    string
	token  string

	body    io.ReadCloser
	dec     *SSEDecoder
	lastID  string
	lastSeq uint64 // highest numeric id delivered
	haveSeq bool
	failed  int   // reconnect attempts since the last event
	lastErr error // why the connection was last lost
	done    bool
	retry   time.Duration // the server's retry field, if any
}

// Attach opens the attach stream at attachURL (absolute, or relative to the
// server's base URL) with the command session's attachment token. The first
// attach starts the command's process. The stream lives until Close, the end
// of ctx, or its exit/error event.
func (c *Client) Attach(ctx context.Context, attachURL, token string) (*Stream, error) {
	return c.AttachAfter(ctx, attachURL, token, "")
}

// AttachAfter is Attach resuming after the event id lastEventID ("" for the
// start of the buffer).
func (c *Client) AttachAfter(ctx context.Context, attachURL, token, lastEventID string) (*Stream, error) {
	u, err := c.resolve(attachURL)
	if err != nil {
		return nil, fmt.Errorf("attach: %w", err)
	}
	if token == "" {
		return nil, errors.New("attach: empty attachment token")
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &Stream{c: c, ctx: ctx, cancel: cancel, url: u.String(), token: token, lastID: lastEventID}
	if err := s.connect(); err != nil {
		cancel()
		return nil, err
	}
	return s, nil
}

// LastEventID returns the id of the last event received, which a reconnect
// sends as Last-Event-ID.
func (s *Stream) LastEventID() string { return s.lastID }

// Close ends the stream: a blocked Next returns the context's error. The
// command keeps running in its sandbox.
func (s *Stream) Close() error {
	s.cancel()
	return nil
}

// Next returns the next event. After the exit or error event it returns
// io.EOF. A gap event says output was dropped before this client could read
// it; the stream goes on after it. A reconnect event (the server is
// draining) is handled here: Next reconnects with Last-Event-ID after the
// advised delay and nothing is lost. If the connection drops it reconnects (with Last-Event-ID, so no
// output is lost or repeated) up to the client's reconnect limit, counted
// from the last event received; it returns the last connection error once
// that is exhausted, an *APIError if the server refuses the reconnect, and
// the context's error if the stream's context ended.
func (s *Stream) Next() (Event, error) {
	for {
		if s.done {
			return Event{}, io.EOF
		}
		if s.body == nil {
			if err := s.connect(); err != nil {
				s.finish()
				return Event{}, err
			}
		}
		raw, err := s.dec.Next()
		s.lastID = s.dec.LastEventID()
		if err != nil {
			s.closeBody()
			if s.ctx.Err() != nil {
				s.finish()
				return Event{}, fmt.Errorf("attach: %w", context.Cause(s.ctx))
			}
			if errors.Is(err, ErrSSETooLarge) {
				s.finish()
				return Event{}, fmt.Errorf("attach: %w", err)
			}
			if errors.Is(err, io.EOF) {
				err = errors.New("the server closed the stream before the exit event")
			}
			s.lastErr = fmt.Errorf("attach: reading the stream: %w", err)
			continue
		}
		s.retry = s.dec.Retry()
		s.failed = 0
		if s.duplicate(raw) {
			continue
		}
		if raw.Type == apiv1.EventReconnect {
			// The server is going away: come back after its advised delay
			// (the retry field) with Last-Event-ID.
			s.closeBody()
			s.lastErr = errors.New("attach: the server asked to reconnect (draining)")
			continue
		}
		ev, ok, err := decodeEvent(raw)
		if err != nil {
			s.finish()
			return Event{}, fmt.Errorf("attach: %w", err)
		}
		if !ok {
			continue
		}
		if ev.Kind == apiv1.EventExit || ev.Kind == apiv1.EventError {
			s.finish()
		}
		return ev, nil
	}
}

// duplicate reports whether raw repeats an event already delivered (a
// server may resend a little after a reconnect); it tracks numeric ids.
func (s *Stream) duplicate(raw SSEEvent) bool {
	if !raw.HasID {
		return false
	}
	seq, err := strconv.ParseUint(raw.ID, 10, 64)
	if err != nil {
		return false
	}
	if s.haveSeq && seq <= s.lastSeq {
		return true
	}
	s.lastSeq, s.haveSeq = seq, true
	return false
}

func (s *Stream) finish() {
	s.done = true
	s.closeBody()
	s.cancel()
}

func (s *Stream) closeBody() {
	if s.body != nil {
		_ = s.body.Close()
		s.body, s.dec = nil, nil
	}
}

// connect opens the stream. After a failure it waits and retries; the
// budget is the client's reconnect limit, counted since the last event.
func (s *Stream) connect() error {
	for {
		if s.lastErr != nil {
			if s.failed >= s.c.reconnects {
				if s.failed == 0 {
					return s.lastErr
				}
				return fmt.Errorf("%w (gave up after %d reconnect attempts)", s.lastErr, s.failed)
			}
			delay := s.c.backoff(s.failed)
			if s.retry > 0 {
				delay = min(s.retry, s.c.maxDelay)
			}
			s.failed++
			if err := s.c.sleep(s.ctx, delay); err != nil {
				return fmt.Errorf("attach: %w", context.Cause(s.ctx))
			}
		}
		err := s.open()
		if err == nil {
			s.lastErr = nil
			return nil
		}
		var rt *retryableError
		if !errors.As(err, &rt) {
			return err
		}
		s.lastErr = rt.err
	}
}

// open makes one attach request.
func (s *Stream) open() error {
	req, err := http.NewRequestWithContext(s.ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Cache-Control", "no-cache")
	req.Header.Set("User-Agent", s.c.userAgent)
	req.Header.Set("Authorization", "Bearer "+s.token)
	if s.lastID != "" {
		req.Header.Set("Last-Event-ID", s.lastID)
	}
	resp, err := s.c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = fmt.Errorf("GET %s: %w", s.url, ue.Err)
		}
		if s.ctx.Err() != nil {
			return fmt.Errorf("attach: %w", context.Cause(s.ctx))
		}
		if retryableTransport(err) {
			return &retryableError{err: fmt.Errorf("attach: %w", err)}
		}
		return fmt.Errorf("attach: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		apiErr := readAPIError(resp)
		resp.Body.Close()
		if retryableStatus(resp.StatusCode) {
			return &retryableError{err: apiErr}
		}
		return apiErr
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		resp.Body.Close()
		return fmt.Errorf("attach: server answered with content type %q, not text/event-stream", resp.Header.Get("Content-Type"))
	}
	s.body = resp.Body
	s.dec = newSSEDecoderAfter(resp.Body, s.lastID)
	return nil
}

// decodeEvent turns an SSE event into an Event; ok is false for event types
// this client does not know (a newer server's), which are skipped.
func decodeEvent(raw SSEEvent) (ev Event, ok bool, err error) {
	ev = Event{Kind: raw.Type}
	if raw.HasID {
		ev.ID = raw.ID
	}
	switch raw.Type {
	case apiv1.EventStdout, apiv1.EventStderr:
		if data, ok := decodeOutputData(raw.Data); ok {
			ev.Data = data
			break
		}
		var d apiv1.OutputEventData
		if err := json.Unmarshal([]byte(raw.Data), &d); err != nil {
			return Event{}, false, fmt.Errorf("malformed %s event %s: %w", raw.Type, raw.ID, err)
		}
		ev.Data = d.Data
	case apiv1.EventGap:
		var d apiv1.GapEventData
		if err := json.Unmarshal([]byte(raw.Data), &d); err != nil {
			return Event{}, false, fmt.Errorf("malformed gap event %s: %w", raw.ID, err)
		}
		ev.Gap = &d
	case apiv1.EventExit:
		var d apiv1.ExitEventData
		if err := json.Unmarshal([]byte(raw.Data), &d); err != nil {
			return Event{}, false, fmt.Errorf("malformed exit event %s: %w", raw.ID, err)
		}
		ev.ExitCode, ev.Signal, ev.TimedOut = d.ExitCode, d.Signal, d.TimedOut
	case apiv1.EventError:
		var d apiv1.Error
		if err := json.Unmarshal([]byte(raw.Data), &d); err != nil {
			return Event{}, false, fmt.Errorf("malformed error event: %w", err)
		}
		ev.Err = &d
	default:
		return Event{}, false, nil
	}
	return ev, true, nil
}
