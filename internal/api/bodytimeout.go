package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
)

// DefaultBodyReadTimeout is the default of Config.BodyReadTimeout.
const DefaultBodyReadTimeout = 30 * time.Second

// DefaultStdinIdleTimeout is the default of Config.StdinIdleTimeout.
const DefaultStdinIdleTimeout = 60 * time.Second

// errBodyTimeout is wrapped by a request body's Read when the client did
// not send it in time, and is the cause (context.Cause) of the request's
// context then; classify answers 408 request_timeout.
var errBodyTimeout = apiv1.ErrBodyTimeout

// bodyMode says how a route's request body is timed.
type bodyMode int

const (
	// bodyWhole: the whole body within the timeout, counted from the start
	// of the request (JSON bodies of at most MaxBodyBytes).
	bodyWhole bodyMode = iota
	// bodyProgress: streamed uploads (files, tar archives, requests the
	// port proxy carries to a guest) of any size and length: each read
	// must get data within the timeout.
	bodyProgress
	// bodyStdin: a process's stdin, an interactive stream that is idle
	// whenever its user is: each read must get data within
	// Config.StdinIdleTimeout (clients with nothing to send end the
	// stream sooner and open a new one when they have more), so that an
	// idle stream does not hold a connection and a stdin slot for ever.
	bodyStdin
)

// modeHandler marks a route's body mode in bodyModes.
type modeHandler bodyMode

func (modeHandler) ServeHTTP(http.ResponseWriter, *http.Request) {}

// bodyModes routes requests to their body mode; unmatched ones are timed
// whole.
func bodyModes() *http.ServeMux {
	m := http.NewServeMux()
	m.Handle(apiv1.FilesDataRoute, modeHandler(bodyProgress))
	m.Handle("POST "+apiv1.StdinRoute, modeHandler(bodyStdin))
	m.Handle(portsPattern, modeHandler(bodyProgress)) // a guest's uploads, of any size
	m.Handle(volumeContentPattern, modeHandler(bodyProgress))
	return m
}

// withBodyDeadline bounds how long a client may take to send a request
// body, so that a client that sends headers and then trickles or stalls
// its body cannot hold a handler and a connection (one of
// --max-connections) for ever. It sets the connection's read deadline:
// when it passes, the body's Read fails (the handler answers 408
// request_timeout; a streaming handler fails its stream), and net/http,
// which cannot discard the rest of a body whose read failed, answers with
// Connection: close and closes the connection. The deadline is armed
// before the handler runs (it also bounds what net/http discards of a body
// the handler left unread) and re-armed before each read. net/http clears
// it once the body has been read to its end (before it watches the
// connection for the client going away), so a handler that works on after
// its body is not cut.
func (a *API) withBodyDeadline(next http.Handler) http.Handler {
	timeout, stdinTimeout := a.cfg.BodyReadTimeout, a.cfg.StdinIdleTimeout
	modes := bodyModes()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		mode := bodyWhole
		if h, _ := modes.Handler(r); h != nil {
			if m, ok := h.(modeHandler); ok {
				mode = bodyMode(m)
			}
		}
		step := timeout
		if mode == bodyStdin {
			step = stdinTimeout
		}
		if step < 0 {
			next.ServeHTTP(w, r)
			return
		}
		b := &deadlineBody{ReadCloser: r.Body, rc: http.NewResponseController(w), step: step}
		if mode == bodyWhole {
			b.end = time.Now().Add(timeout)
		}
		if err := b.arm(); err != nil {
			// The connection cannot take deadlines (a test recorder):
			// serve the body untimed.
			next.ServeHTTP(w, r)
			return
		}
		// The handler's context is canceled with the cause errBodyTimeout
		// when the deadline passed: net/http cancels the request's own
		// context (with context.Canceled) inside the read that failed,
		// before that read returns, so a handler that sees its context
		// end first (an agent call streaming the body) could not tell
		// the deadline from a client gone. Read here knows.
		parent := r.Context()
		ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
		b.cancel = cancel
		stop := context.AfterFunc(parent, func() { cancel(b.cause(context.Cause(parent))) })
		defer func() {
			stop()
			cancel(context.Canceled)
		}()
		r.Body = b
		defer b.finish()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// deadlineBody re-arms the connection's read deadline before each read.
// Reads may come from another goroutine than the handler's (an HTTP/2
// client streaming the body to an agent), even after the handler returned.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	step time.Duration // each read must get data this soon
	end  time.Time     // and the whole body by then (zero: no bound)

	cancel context.CancelCauseFunc // the handler's context

	mu       sync.Mutex
	done     bool      // the handler returned: the connection is no longer this request's to time
	ended    error     // the body's read ended (EOF or failure): later reads repeat it
	expired  bool      // a read passed the deadline
	deadline time.Time // the connection's read deadline, as last armed
}

// cause is why the handler's context ends when the request's own context
// ended with parent: errBodyTimeout once the armed read deadline has
// passed on a body not read to its end (net/http canceled it for the read
// that failed), else parent.
func (b *deadlineBody) cause(parent error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.expired || (!b.done && b.ended == nil && !b.deadline.IsZero() && !time.Now().Before(b.deadline)) {
		return errBodyTimeout
	}
	return parent
}

func (b *deadlineBody) arm() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.armLocked()
}

func (b *deadlineBody) armLocked() error {
	if b.done || b.ended != nil {
		return nil
	}
	d := time.Now().Add(b.step)
	if !b.end.IsZero() && b.end.Before(d) {
		d = b.end
	}
	if err := b.rc.SetReadDeadline(d); err != nil {
		return err
	}
	b.deadline = d
	return nil
}

// finish is called when the handler has returned; later reads (which
// net/http refuses anyway) no longer touch the connection.
func (b *deadlineBody) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done = true
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.expired {
		b.mu.Unlock()
		return 0, errBodyTimeout
	}
	if b.ended != nil {
		// Once the body has ended, net/http has cleared the deadline and
		// watches the connection for the client going away; arming it
		// again would make that watch time out and cancel the request's
		// context while its handler still works (a client that reads past
		// EOF, as an HTTP transport streaming the body to an agent may).
		err := b.ended
		b.mu.Unlock()
		return 0, err
	}
	_ = b.armLocked() // it worked before the handler ran
	b.mu.Unlock()
	n, err := b.ReadCloser.Read(p)
	if err == nil {
		return n, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		b.expired = true
		if b.cancel != nil {
			b.cancel(errBodyTimeout)
		}
		return n, fmt.Errorf("%w: %w", errBodyTimeout, err)
	}
	b.ended = err
	return n, err
}
