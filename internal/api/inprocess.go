package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/connbudget"
	"github.com/airlockdev/airlock/internal/model"
)

// In-process calls.
//
// The server's E2B translators act only through this API, with
// internal/client, as any client does. InProcess carries their requests
// without a connection: an http.RoundTripper that serves each request
// with the server's own handler, in this process, the answer streamed to
// the caller as the handler writes it (SSE, long downloads and upgraded
// connections included).
//
// A request it carries can also bear a caller the server already
// authenticated (AsSandbox): the E2B gateway has checked the request's
// sandbox access token (or signed URL) and read the sandbox, so the API
// takes that caller as it would take the token's — same scope (the
// sandbox's own routes, principal.inScope), same rate limit and audit —
// without a token to sign, verify and look up again. The caller lives in
// the context of the request InProcess builds, under an unexported key
// that only RoundTrip sets, on a context it makes afresh: nothing that
// arrives over the network, header or otherwise, can carry it.

// inProcessKey keys the *inProcessCall of a request InProcess serves.
type inProcessKey struct{}

// inProcessCall marks a request InProcess serves.
type inProcessCall struct {
	// p is the caller the server vouches for; nil: the request is
	// authenticated as any other (its Authorization header).
	p *principal
}

// inProcessFrom returns the mark of a request InProcess serves, or nil.
func inProcessFrom(ctx context.Context) *inProcessCall {
	c, _ := ctx.Value(inProcessKey{}).(*inProcessCall)
	return c
}

// vouched reports whether the request is one the server's own code sent
// in-process bearing a caller it authenticated (the E2B gateway's).
func vouched(ctx context.Context) bool {
	c := inProcessFrom(ctx)
	return c != nil && c.p != nil
}

// forwardCredential gives a request this node forwards to the sandbox's
// node (forward.go) the credential the node authenticates: an in-process
// caller has none of its own, so it gets its sandbox's access token.
func (a *API) forwardCredential(r *http.Request, p principal, extra http.Header) error {
	c := inProcessFrom(r.Context())
	if c == nil || c.p == nil {
		return nil // the request's own Authorization goes along
	}
	tok, err := a.cfg.Attach.IssueSandbox(auth.SandboxClaims{Sandbox: p.sandbox, Project: p.project})
	if err != nil {
		return fmt.Errorf("sign the sandbox token of a forwarded in-process request: %w", err)
	}
	extra.Set("Authorization", "Bearer "+tok)
	return nil
}

// InProcess is an http.RoundTripper into the server's handler. Get one
// with API.InProcess.
type InProcess struct {
	h   http.Handler
	log *slog.Logger
	p   *principal // the caller its requests bear; nil: none
}

// InProcess returns a transport that serves requests with h, the server's
// whole handler (this API, with the data plane mounted beside it), in
// this process. Its requests are authenticated as any (the Authorization
// header), unless made through AsSandbox. Only the server calls it.
func (a *API) InProcess(h http.Handler) *InProcess {
	return &InProcess{h: h, log: a.log}
}

// AsSandbox returns a transport like t whose requests act as the access
// token of sandbox sb of project would, without one. The caller vouches
// that it authenticated the request it acts for and that sb is project's.
func (t *InProcess) AsSandbox(project model.ProjectID, sb model.SandboxID) http.RoundTripper {
	return &InProcess{h: t.h, log: t.log, p: &principal{project: project, role: model.RoleMember, sandbox: sb}}
}

// errInProcessClosed is what a handler's write gets once the caller
// closed the response body, and its request's context's cause.
var errInProcessClosed = errors.New("api: the in-process caller closed the response")

// RoundTrip serves req with the handler and returns the response once its
// header is written (or the handler returned); the body streams what the
// handler writes after. Canceling req's context cancels the handler's,
// as a dropped connection would.
func (t *InProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil {
		closeReqBody(req)
		return nil, errors.New("api: in-process request without a URL")
	}
	if t.p != nil && (t.p.sandbox == "" || t.p.project == "" || t.p.project == model.SystemProject) {
		closeReqBody(req)
		return nil, errors.New("api: in-process request for no sandbox")
	}
	if err := req.Context().Err(); err != nil {
		closeReqBody(req)
		return nil, context.Cause(req.Context())
	}
	// The caller's client connection goes with the request, so that a
	// credential checked here counts that connection as authenticated
	// (the E2B gateway's callers).
	base := connbudget.Carry(req.Context(), context.Background())
	ctx, cancel := context.WithCancelCause(context.WithValue(base, inProcessKey{}, &inProcessCall{p: t.p}))
	sreq, body := serverRequest(ctx, req)
	w := newInWriter(req, sreq.Method, body, cancel)
	stop := context.AfterFunc(req.Context(), func() { w.callerGone(context.Cause(req.Context())) })
	go t.serve(w, sreq, body, cancel, stop)
	<-w.ready
	return w.response(req)
}

func closeReqBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// serve runs the handler, as net/http's server would: a panic is logged
// (but http.ErrAbortHandler) and breaks the response, the request's
// context ends when the handler returns, the request body is closed.
func (t *InProcess) serve(w *inWriter, r *http.Request, body *inRequestBody, cancel context.CancelCauseFunc, stop func() bool) {
	defer stop()
	defer cancel(context.Canceled)
	if body != nil {
		defer body.Close()
	}
	defer func() {
		v := recover()
		if v == nil {
			w.finish()
			return
		}
		if v != http.ErrAbortHandler {
			t.log.Error("in-process handler panic", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		}
		w.abort(fmt.Errorf("api: the in-process handler of %s %s failed", r.Method, r.URL.Path))
	}()
	t.h.ServeHTTP(w, r)
}

// serverRequest is req as a server would receive it, on ctx.
func serverRequest(ctx context.Context, req *http.Request) (*http.Request, *inRequestBody) {
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	u := &url.URL{Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery}
	if u.Path == "" {
		u.Path = "/"
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	h := req.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Del("Host")
	// The caller's address when it proxies a client's request (a clone of
	// the client's, as httputil.ReverseProxy makes); else none to name.
	remote := req.RemoteAddr
	if remote == "" {
		remote = "in-process"
	}
	sreq := (&http.Request{
		Method: method, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: http.NoBody, Host: host, RemoteAddr: remote, RequestURI: u.RequestURI(),
	}).WithContext(ctx)
	if req.Body == nil || req.Body == http.NoBody {
		closeReqBody(req)
		return sreq, nil
	}
	// A body http.NewRequest made replayable is in memory: its reads
	// never wait, so no deadline needs a goroutine.
	body := &inRequestBody{src: req.Body, inMemory: req.GetBody != nil}
	sreq.Body = body
	sreq.ContentLength = req.ContentLength
	switch {
	case req.ContentLength > 0:
		h.Set("Content-Length", strconv.FormatInt(req.ContentLength, 10))
	default: // a body of unknown length, as a chunked one arrives
		sreq.ContentLength = -1
		sreq.TransferEncoding = []string{"chunked"}
	}
	return sreq, body
}

// Buffering of a response: net/http's server sends the header once the
// handler flushes, returns or has written this much; a caller that reads
// nothing holds the handler's writes back once this much waits.
const (
	inProcessCommitAt  = 2048
	inProcessMaxBuffer = 256 << 10
)

// inWriter is the http.ResponseWriter of a request InProcess serves, and
// the body of its response. It implements http.Flusher, http.Hijacker
// and the deadlines of http.ResponseController.
type inWriter struct {
	method string
	header http.Header
	body   *inRequestBody // nil: the request has none
	cancel context.CancelCauseFunc
	ready  chan struct{} // closed once the response (or the failure) is there

	mu        sync.Mutex
	cond      sync.Cond
	status    int
	committed bool // the header is out: ready is closed
	resp      *http.Response
	rtErr     error    // the response failed before its header
	conn      net.Conn // the caller's end of a hijacked connection
	buf       []byte   // written, not yet read
	written   int64
	done      bool  // the handler returned: EOF after buf
	broken    error // the handler failed after the header: the reader's error after buf
	closed    bool  // the caller closed the body
	gone      error // the caller's context ended
	deadline  time.Time
	timer     *time.Timer
}

func newInWriter(req *http.Request, method string, body *inRequestBody, cancel context.CancelCauseFunc) *inWriter {
	w := &inWriter{method: method, header: http.Header{}, body: body, cancel: cancel, ready: make(chan struct{})}
	w.cond.L = &w.mu
	return w
}

func (w *inWriter) Header() http.Header { return w.header }

func (w *inWriter) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.status != 0 || w.conn != nil || code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		return // a second status, or an informational one: not passed on
	}
	w.status = code
}

func (w *inWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conn != nil {
		return 0, http.ErrHijacked
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	for w.committed && len(w.buf) >= inProcessMaxBuffer && !w.closed && w.gone == nil {
		if !w.deadline.IsZero() && !time.Now().Before(w.deadline) {
			return 0, os.ErrDeadlineExceeded
		}
		w.cond.Wait()
	}
	switch {
	case w.closed:
		return 0, errInProcessClosed
	case w.gone != nil:
		return 0, w.gone
	}
	w.written += int64(len(p))
	if w.method == http.MethodHead {
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	if !w.committed && len(w.buf) > inProcessCommitAt {
		w.commitLocked()
	}
	w.cond.Broadcast()
	return len(p), nil
}

// Flush sends the header, and what was written, to the caller now.
func (w *inWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conn != nil {
		return
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.commitLocked()
	w.cond.Broadcast()
}

// Hijack hands the handler the server's end of an in-memory connection;
// the caller reads the response from the other end (an upgrade's 101,
// then the upgraded connection).
func (w *inWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conn != nil {
		return nil, nil, http.ErrHijacked
	}
	if w.committed {
		return nil, nil, errors.New("api: in-process hijack after the response started")
	}
	server, caller := net.Pipe()
	w.conn = caller
	close(w.ready)
	return server, bufio.NewReadWriter(bufio.NewReader(server), bufio.NewWriter(server)), nil
}

// SetReadDeadline bounds the reads of the request body (withBodyDeadline).
func (w *inWriter) SetReadDeadline(t time.Time) error {
	if w.body != nil {
		w.body.setDeadline(t)
	}
	return nil
}

// SetWriteDeadline bounds the writes the caller's reading holds back.
func (w *inWriter) SetWriteDeadline(t time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.deadline = t
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	if !t.IsZero() {
		w.timer = time.AfterFunc(time.Until(t), func() {
			w.mu.Lock()
			w.cond.Broadcast()
			w.mu.Unlock()
		})
	}
	w.cond.Broadcast()
	return nil
}

// EnableFullDuplex: the request body can always be read while the
// response is written.
func (w *inWriter) EnableFullDuplex() error { return nil }

// commitLocked makes the response: its header is what the handler set
// so far, and its body what it writes.
func (w *inWriter) commitLocked() {
	if w.committed || w.rtErr != nil {
		return
	}
	w.committed = true
	h := w.header.Clone()
	// Sniffed as net/http's server does.
	_, hasType := h["Content-Type"]
	if !hasType && bodyAllowed(w.status) && len(w.buf) > 0 && h.Get("Transfer-Encoding") == "" && h.Get("Content-Encoding") == "" {
		h.Set("Content-Type", http.DetectContentType(w.buf[:min(len(w.buf), 512)]))
	}
	resp := &http.Response{
		Status: strconv.Itoa(w.status) + " " + http.StatusText(w.status), StatusCode: w.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h, ContentLength: -1,
	}
	if cl, err := strconv.ParseInt(h.Get("Content-Length"), 10, 64); err == nil && cl >= 0 {
		resp.ContentLength = cl
	} else if w.done && bodyAllowed(w.status) && h.Get("Transfer-Encoding") == "" {
		// A handler that returned before its answer grew: net/http
		// gives it a length.
		resp.ContentLength = w.written
		h.Set("Content-Length", strconv.FormatInt(w.written, 10))
	}
	switch {
	case w.method == http.MethodHead:
		resp.Body = http.NoBody
	case !bodyAllowed(w.status):
		resp.Body, resp.ContentLength = http.NoBody, 0
	default:
		resp.Body = &inResponseBody{w: w}
	}
	w.resp = resp
	close(w.ready)
}

// finish: the handler returned.
func (w *inWriter) finish() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.conn != nil {
		return // the handler had the connection; it closed it
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.done = true
	w.commitLocked()
	w.cond.Broadcast()
}

// abort: the handler panicked. Before the header the round trip fails;
// after it, the body ends with an error, as a broken connection's would.
func (w *inWriter) abort(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.conn != nil {
		return
	}
	w.done = true
	if !w.committed {
		w.rtErr = err
		w.committed = true
		close(w.ready)
	} else {
		w.broken = fmt.Errorf("%w: %w", io.ErrUnexpectedEOF, err)
	}
	w.cond.Broadcast()
}

// callerGone: the caller's context ended. The handler's context ends
// with it, a round trip waiting for the header fails, and reads of the
// body fail.
func (w *inWriter) callerGone(cause error) {
	w.cancel(cause)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gone = cause
	if !w.committed && w.conn == nil {
		w.rtErr = cause
		w.committed = true
		close(w.ready)
	}
	w.cond.Broadcast()
}

// response is what RoundTrip returns once ready is closed.
func (w *inWriter) response(req *http.Request) (*http.Response, error) {
	w.mu.Lock()
	resp, err, conn := w.resp, w.rtErr, w.conn
	w.mu.Unlock()
	switch {
	case conn != nil:
		return hijackedResponse(req, conn)
	case err != nil:
		return nil, err
	}
	resp.Request = req
	return resp, nil
}

// hijackedResponse reads the response a handler wrote on a hijacked
// connection; a 101's body is the upgraded connection, readable and
// writable, as net/http's transport gives it.
func hijackedResponse(req *http.Request, conn net.Conn) (*http.Response, error) {
	stop := context.AfterFunc(req.Context(), func() { _ = conn.Close() })
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if !stop() {
		err = context.Cause(req.Context())
	}
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Body = &upgradedBody{r: br, conn: conn}
		return resp, nil
	}
	resp.Body = &connBody{ReadCloser: resp.Body, conn: conn}
	return resp, nil
}

// upgradedBody is the connection after a 101.
type upgradedBody struct {
	r    *bufio.Reader
	conn net.Conn
}

func (b *upgradedBody) Read(p []byte) (int, error)  { return b.r.Read(p) }
func (b *upgradedBody) Write(p []byte) (int, error) { return b.conn.Write(p) }
func (b *upgradedBody) Close() error                { return b.conn.Close() }

// connBody is a response read from a hijacked connection.
type connBody struct {
	io.ReadCloser
	conn net.Conn
}

func (b *connBody) Close() error {
	err := b.ReadCloser.Close()
	_ = b.conn.Close()
	return err
}

func bodyAllowed(status int) bool {
	return (status < 100 || status > 199) && status != http.StatusNoContent && status != http.StatusNotModified
}

// inResponseBody is the body of a response InProcess returns.
type inResponseBody struct{ w *inWriter }

func (b *inResponseBody) Read(p []byte) (int, error) {
	w := b.w
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.buf) == 0 && !w.done && !w.closed && w.gone == nil {
		w.cond.Wait()
	}
	switch {
	case w.closed:
		return 0, errors.New("http: read on closed response body")
	case w.gone != nil:
		return 0, w.gone
	case len(w.buf) > 0:
		n := copy(p, w.buf)
		w.buf = w.buf[n:]
		if len(w.buf) == 0 {
			w.buf = w.buf[:0:0] // let a large buffer go
		}
		w.cond.Broadcast() // a writer may wait for room
		return n, nil
	case w.broken != nil:
		return 0, w.broken
	}
	return 0, io.EOF
}

// Close ends the response for the caller: the handler's writes fail and
// its context ends, as when a client drops its connection.
func (b *inResponseBody) Close() error {
	w := b.w
	w.mu.Lock()
	already, finished := w.closed, w.done
	w.closed, w.buf = true, nil
	w.cond.Broadcast()
	w.mu.Unlock()
	if !already && !finished {
		w.cancel(errInProcessClosed)
	}
	return nil
}

// inRequestBody is the body of a request InProcess serves. A read
// deadline (withBodyDeadline's) bounds each read: while one is set, the
// caller's body is read by a goroutine, so that a read can give up.
type inRequestBody struct {
	src      io.ReadCloser
	inMemory bool

	mu       sync.Mutex
	deadline time.Time
	pumping  bool
	asks     chan int
	got      chan pumped
	waiting  bool // a read of the pump is under way
	left     []byte
	leftErr  error
	closed   bool
}

type pumped struct {
	b   []byte
	err error
}

func (b *inRequestBody) setDeadline(t time.Time) {
	b.mu.Lock()
	b.deadline = t
	b.mu.Unlock()
}

func (b *inRequestBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return 0, http.ErrBodyReadAfterClose
	}
	if !b.pumping && (b.deadline.IsZero() || b.inMemory) {
		b.mu.Unlock()
		return b.src.Read(p)
	}
	if len(b.left) > 0 {
		n := copy(p, b.left)
		b.left = b.left[n:]
		b.mu.Unlock()
		return n, nil
	}
	if b.leftErr != nil {
		err := b.leftErr
		b.mu.Unlock()
		return 0, err
	}
	if !b.pumping {
		b.pumping = true
		b.asks = make(chan int)
		b.got = make(chan pumped, 1)
		go b.pump(b.asks, b.got)
	}
	if !b.waiting {
		b.waiting = true
		b.asks <- len(p)
	}
	deadline := b.deadline
	b.mu.Unlock()

	var expired <-chan time.Time
	if !deadline.IsZero() {
		d := time.Until(deadline)
		if d <= 0 {
			return 0, os.ErrDeadlineExceeded
		}
		t := time.NewTimer(d)
		defer t.Stop()
		expired = t.C
	}
	select {
	case r := <-b.got:
		b.mu.Lock()
		defer b.mu.Unlock()
		b.waiting = false
		n := copy(p, r.b)
		if n < len(r.b) {
			b.left = r.b[n:]
			b.leftErr = r.err
			return n, nil
		}
		if r.err != nil {
			b.leftErr = r.err
		}
		return n, r.err
	case <-expired:
		return 0, os.ErrDeadlineExceeded
	}
}

// pump reads the caller's body for Read, one read per ask.
func (b *inRequestBody) pump(asks <-chan int, got chan<- pumped) {
	for n := range asks {
		buf := make([]byte, min(max(n, 512), 32<<10))
		m, err := b.src.Read(buf)
		got <- pumped{buf[:m], err}
		if err != nil {
			return
		}
	}
}

// Close closes the caller's body (as a RoundTripper must). A pump still
// in a read of it closes it once that read returns.
func (b *inRequestBody) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	pumping := b.pumping
	if pumping {
		close(b.asks)
	}
	b.mu.Unlock()
	if pumping {
		go b.src.Close()
		return nil
	}
	return b.src.Close()
}
