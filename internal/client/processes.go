package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// ListProcesses returns the processes of a running sandbox (GET
// /v1/sandboxes/{id}/processes).
func (c *Client) ListProcesses(ctx context.Context, sandbox model.SandboxID) (apiv1.ProcessList, error) {
	var out apiv1.ProcessList
	err := c.do(ctx, request{method: http.MethodGet, path: "/v1/sandboxes/" + sandbox.String() + "/processes"}, &out)
	return out, err
}

// GetProcess returns one process. With wait > 0 the server answers as soon
// as the process has exited, or after wait.
func (c *Client) GetProcess(ctx context.Context, sandbox model.SandboxID, pid model.ProcessID, wait time.Duration) (apiv1.Process, error) {
	var out apiv1.Process
	r := request{method: http.MethodGet, path: "/v1/sandboxes/" + sandbox.String() + "/processes/" + pid.String()}
	if wait > 0 {
		r.query = url.Values{"wait": {wait.String()}}
		r.wait = wait
	}
	err := c.do(ctx, r, &out)
	return out, err
}

// SignalProcess sends a signal ("TERM", "9", …) to a process through the
// management API.
func (c *Client) SignalProcess(ctx context.Context, sandbox model.SandboxID, pid model.ProcessID, signal string) (apiv1.Process, error) {
	var out apiv1.Process
	path := "/v1/sandboxes/" + sandbox.String() + "/processes/" + pid.String() + "/signal"
	err := c.do(ctx, request{method: http.MethodPost, path: path, body: apiv1.SignalRequest{Signal: signal}}, &out)
	return out, err
}

// DataPlane is the data-plane side of one command session: its process's
// input routes, authorized by the session's attachment token.
type DataPlane struct {
	c     *Client
	base  *url.URL // the attach URL; the other routes are its siblings
	token string
}

// DataPlane returns the input routes of the session whose attach URL and
// token are given.
func (c *Client) DataPlane(attachURL, token string) (*DataPlane, error) {
	u, err := c.resolve(attachURL)
	if err != nil {
		return nil, fmt.Errorf("data plane: %w", err)
	}
	return &DataPlane{c: c, base: u, token: token}, nil
}

func (d *DataPlane) url(route string, q url.Values) string {
	u := *d.base
	u.Path = siblingPath(u.Path, route)
	u.RawQuery = q.Encode()
	return u.String()
}

// siblingPath replaces the last element of an attach path (".../attach")
// with route.
func siblingPath(p, route string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[:i+1] + route
		}
	}
	return route
}

// Stdin streams r into the process's stdin; closeAfter closes stdin after
// r's end. It returns once the agent has written all of r. It holds a
// request open only while r has data (see stdinIdle): an interactive
// reader that is quiet for a while costs the server no stream.
func (d *DataPlane) Stdin(ctx context.Context, r io.Reader, closeAfter bool) error {
	return d.stdinIdle(ctx, r, closeAfter, stdinIdle)
}

// stdinIdle is how long Stdin keeps a stdin request open with nothing to
// send: then it ends the request (the server writes what came) and opens
// a new one when r has more, well before the server's stdin idle timeout
// (--stdin-idle-timeout, 60 s by default) would end it.
const stdinIdle = 20 * time.Second

func (d *DataPlane) stdinIdle(ctx context.Context, r io.Reader, closeAfter bool, idle time.Duration) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	in := &stdinPump{chunks: make(chan []byte)}
	// Owned by this call: it returns at r's end or error, or after r's
	// next read once ctx is done (a terminal's blocked Read is not
	// interruptible; it ends with the process or the input).
	go in.run(ctx, r)
	for {
		var first []byte
		select {
		case b, ok := <-in.chunks:
			if !ok {
				return d.stdinEnd(ctx, in, closeAfter)
			}
			first = b
		case <-ctx.Done():
			return ctx.Err()
		}
		body := &stdinBody{ctx: ctx, chunks: in.chunks, pending: first, idle: idle}
		if err := d.postStdin(ctx, body, false); err != nil {
			return err
		}
		if body.ended {
			return d.stdinEnd(ctx, in, closeAfter)
		}
	}
}

// stdinEnd is the end of r: its error, or closing stdin if asked.
func (d *DataPlane) stdinEnd(ctx context.Context, in *stdinPump, closeAfter bool) error {
	if in.err != nil { // written before chunks was closed
		return fmt.Errorf("reading stdin: %w", in.err)
	}
	if !closeAfter {
		return nil
	}
	return d.postStdin(ctx, http.NoBody, true)
}

func (d *DataPlane) postStdin(ctx context.Context, body io.Reader, closeAfter bool) error {
	q := url.Values{}
	if closeAfter {
		q.Set("close", "1")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url("stdin", q), body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	return d.send(req)
}

// stdinPump reads r into chunks, which it closes at r's end (err set
// first if r failed).
type stdinPump struct {
	chunks chan []byte
	err    error
}

func (p *stdinPump) run(ctx context.Context, r io.Reader) {
	defer close(p.chunks)
	for {
		buf := make([]byte, 32<<10)
		n, err := r.Read(buf)
		if n > 0 {
			select {
			case p.chunks <- buf[:n]:
			case <-ctx.Done():
				return
			}
		}
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			p.err = err
			return
		}
	}
}

// stdinBody is one stdin request's body: the chunks of the pump until it
// ends (ended) or none comes for idle.
type stdinBody struct {
	ctx     context.Context
	chunks  <-chan []byte
	pending []byte
	idle    time.Duration
	ended   bool
}

func (b *stdinBody) Read(p []byte) (int, error) {
	if len(b.pending) == 0 {
		if b.ended {
			return 0, io.EOF
		}
		t := time.NewTimer(b.idle)
		defer t.Stop()
		select {
		case c, ok := <-b.chunks:
			if !ok {
				b.ended = true
				return 0, io.EOF
			}
			b.pending = c
		case <-t.C:
			return 0, io.EOF // quiet: end this request, the next chunk opens another
		case <-b.ctx.Done():
			return 0, b.ctx.Err()
		}
	}
	n := copy(p, b.pending)
	b.pending = b.pending[n:]
	return n, nil
}

// Signal sends a signal to the process.
func (d *DataPlane) Signal(ctx context.Context, signal string) error {
	return d.postJSON(ctx, "signal", apiv1.SignalRequest{Signal: signal})
}

// Resize changes a PTY process's terminal size.
func (d *DataPlane) Resize(ctx context.Context, rows, cols int) error {
	return d.postJSON(ctx, "resize", apiv1.ResizeRequest{Rows: rows, Cols: cols})
}

func (d *DataPlane) postJSON(ctx context.Context, route string, v any) error {
	body, err := jsonBody(v)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url(route, nil), body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return d.send(req)
}

func (d *DataPlane) send(req *http.Request) error {
	req.Header.Set("Authorization", "Bearer "+d.token)
	req.Header.Set("User-Agent", d.c.userAgent)
	resp, err := d.c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return readAPIError(resp)
	}
	return nil
}

func jsonBody(v any) (io.Reader, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return bytes.NewReader(b), nil
}
