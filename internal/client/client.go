// Package client is the Go client of Airlock's management API (/v1) and of
// its data plane (SSE attach streams and WebSocket attachments). The `airlock` CLI is built on it.
//
// Every mutating call carries a fresh random Idempotency-Key and is retried
// with the same key after a transport failure or a 502/503/504, so a retry can
// never create anything twice. Attach streams reconnect with Last-Event-ID
// after a dropped connection.
package client

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/retry"
)

// Limits on what the client reads from a server.
const (
	maxResponseBody = 32 << 20 // a successful JSON response
	maxErrorBody    = 64 << 10 // an error response
)

// Client talks to one Airlock server with one API key. It is safe for
// concurrent use.
type Client struct {
	base       *url.URL
	apiKey     string
	http       *http.Client
	userAgent  string
	retries    int           // extra attempts after the first one
	firstDelay time.Duration // delay before the first retry; doubles each time
	maxDelay   time.Duration
	reqTimeout time.Duration // per attempt, plus the long-poll wait
	reconnects int           // attach reconnect attempts without progress
	clock      retry.Clock   // what retries wait on (a fake in tests)
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the client use h. Its Timeout must be zero: attach
// streams run for as long as their command does, and the client bounds each
// management request itself (see WithRequestTimeout).
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// WithRetries sets how many times a failed request is retried after a
// transport failure or a 502/503/504 (default 4), and the delay before the
// first retry (default 100ms; it doubles each time, with jitter, up to 2s).
// n = 0 disables retries.
func WithRetries(n int, firstDelay time.Duration) Option {
	return func(c *Client) {
		c.retries = max(n, 0)
		if firstDelay > 0 {
			c.firstDelay = firstDelay
		}
	}
}

// WithRequestTimeout bounds each attempt of a management request (default
// 60s; a long poll gets its wait on top). Zero means no per-attempt bound.
func WithRequestTimeout(d time.Duration) Option {
	return func(c *Client) { c.reqTimeout = max(d, 0) }
}

// WithReconnects sets how many times in a row an attach stream tries to
// reconnect without receiving an event before it gives up (default 8, about 9s
// of backoff: enough for a server restart).
func WithReconnects(n int) Option { return func(c *Client) { c.reconnects = max(n, 0) } }

// New returns a client for the server at baseURL (http or https, e.g.
// "http://127.0.0.1:7070") that authenticates with apiKey.
func New(baseURL, apiKey string, opts ...Option) (*Client, error) {
	u, err := parseBaseURL(baseURL)
	if err != nil {
		return nil, err
	}
	if strings.ContainsAny(apiKey, " \t\r\n") {
		return nil, errors.New("client: API key must not contain whitespace")
	}
	c := &Client{
		base:       u,
		apiKey:     apiKey,
		userAgent:  "airlock-client",
		retries:    4,
		firstDelay: 100 * time.Millisecond,
		maxDelay:   2 * time.Second,
		reqTimeout: 60 * time.Second,
		reconnects: 8,
		clock:      retry.SystemClock(),
	}
	for _, o := range opts {
		o(c)
	}
	if c.http == nil {
		c.http = &http.Client{
			Transport: http.DefaultTransport.(*http.Transport).Clone(),
			// A redirect is never part of the API; surface it instead of
			// replaying a request (and its credentials) elsewhere.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return c, nil
}

func parseBaseURL(s string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("client: server URL %q: %w", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("client: server URL %q must start with http:// or https://", s)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("client: server URL %q has no host", s)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("client: server URL %q must not carry a query, fragment or user info", s)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// BaseURL returns the server's base URL, without a trailing slash.
func (c *Client) BaseURL() string { return c.base.String() }

// request describes one management API call.
type request struct {
	method string
	path   string     // path below the base URL, built from validated IDs (nothing to escape)
	query  url.Values // may be nil
	body   any        // JSON-encoded when non-nil
	wait   time.Duration
	// optionalBody accepts a 2xx without a body (e.g. 204), leaving out as is.
	optionalBody bool
	header       http.Header // extra request headers (If-None-Match)
}

func (r request) String() string { return r.method + " " + r.path }

// describe names the request with its full URL, for transport errors.
func (c *Client) describe(r request) string { return r.method + " " + c.base.String() + r.path }

type idempotencyKeyCtx struct{}

// WithIdempotencyKey returns a context that makes the mutating call made with
// it send key as its Idempotency-Key instead of a fresh random one. A caller
// that repeats a call after the client gave up (e.g. across a server
// restart) with the same key gets the first call's result, never a second
// effect.
func WithIdempotencyKey(ctx context.Context, key model.IdempotencyKey) context.Context {
	return context.WithValue(ctx, idempotencyKeyCtx{}, key)
}

// newIdempotencyKey returns a fresh random key (128 bits).
func newIdempotencyKey() model.IdempotencyKey {
	return model.IdempotencyKey("airlock-" + crand.Text())
}

// do performs r, retrying transport failures and 502/503/504 with the same
// Idempotency-Key, and decodes a 2xx JSON body into out (if non-nil).
func (c *Client) do(ctx context.Context, r request, out any) error {
	var body []byte
	if r.body != nil {
		b, err := json.Marshal(r.body)
		if err != nil {
			return fmt.Errorf("%s: encoding request: %w", r, err)
		}
		body = b
	}
	var key model.IdempotencyKey
	if r.method != http.MethodGet && r.method != http.MethodHead {
		if k, ok := ctx.Value(idempotencyKeyCtx{}).(model.IdempotencyKey); ok && k != "" {
			key = k
		} else {
			key = newIdempotencyKey()
		}
	}
	for attempt := 0; ; attempt++ {
		retryAfter, err := c.attempt(ctx, r, body, key, out)
		if err == nil {
			return nil
		}
		var rt *retryableError
		if !errors.As(err, &rt) {
			return err
		}
		if attempt >= c.retries || ctx.Err() != nil {
			if attempt > 0 {
				return fmt.Errorf("%w (gave up after %d attempts)", rt.err, attempt+1)
			}
			return rt.err
		}
		delay := c.backoff(attempt)
		if retryAfter > delay {
			delay = min(retryAfter, c.maxDelay)
		}
		if err := c.sleep(ctx, delay); err != nil {
			return fmt.Errorf("%w (while retrying: %w)", rt.err, err)
		}
	}
}

// retryableError marks a failure that may be retried with the same key.
type retryableError struct{ err error }

func (e *retryableError) Error() string { return e.err.Error() }
func (e *retryableError) Unwrap() error { return e.err }

// attempt performs one try of r. A retryable failure comes back as a
// *retryableError; retryAfter is the server's Retry-After hint, if any.
func (c *Client) attempt(ctx context.Context, r request, body []byte, key model.IdempotencyKey, out any) (retryAfter time.Duration, err error) {
	if c.reqTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.reqTimeout+r.wait)
		defer cancel()
	}
	u := *c.base
	u.Path += r.path
	u.RawQuery = r.query.Encode()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u.String(), rd)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", r, err)
	}
	for k, vs := range r.header {
		req.Header[k] = vs
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key.String())
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its "Get <url>:" prefix repeats what r says
		}
		return 0, c.transportError(ctx, r, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		apiErr := readAPIError(resp)
		// A resume_timeout already waited out the server's bound; the
		// same request again would wait as long once more.
		if retryableStatus(resp.StatusCode) && apiErr.Code != apiv1.CodeResumeTimeout {
			return parseRetryAfter(resp.Header.Get("Retry-After")), &retryableError{err: apiErr}
		}
		return 0, apiErr
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody+1))
	if err != nil {
		return 0, c.transportError(ctx, r, fmt.Errorf("reading response: %w", err))
	}
	if len(data) > maxResponseBody {
		return 0, fmt.Errorf("%s: response larger than %d bytes", r, maxResponseBody)
	}
	if out == nil {
		return 0, nil
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if r.optionalBody {
			return 0, nil
		}
		return 0, fmt.Errorf("%s: HTTP %d with an empty body, expected JSON", r, resp.StatusCode)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return 0, fmt.Errorf("%s: decoding HTTP %d response: %w", r, resp.StatusCode, err)
	}
	return 0, nil
}

// transportError wraps a failure below HTTP. It is retryable unless the
// caller's context ended or the failure cannot be transient.
func (c *Client) transportError(ctx context.Context, r request, err error) error {
	wrapped := fmt.Errorf("%s: %w", c.describe(r), err)
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return wrapped
	}
	if retryableTransport(err) {
		return &retryableError{err: wrapped}
	}
	return wrapped
}

func retryableStatus(code int) bool {
	return code == http.StatusBadGateway || code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout
}

// parseRetryAfter reads a Retry-After header given in seconds.
func parseRetryAfter(v string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return 0
	}
	return time.Duration(min(n, 3600)) * time.Second
}

// retryPolicy is the client's backoff: firstDelay doubling per retry, at
// most maxDelay, with ±25% jitter.
func (c *Client) retryPolicy() retry.Policy {
	return retry.Policy{Initial: c.firstDelay, Max: c.maxDelay, Jitter: 0.25}
}

// backoff returns the delay before retry number attempt+1: firstDelay·2^attempt
// with ±25% jitter, at most maxDelay (before the jitter), at least 1 ms.
func (c *Client) backoff(attempt int) time.Duration {
	return max(c.retryPolicy().Nth(attempt), time.Millisecond)
}

// sleep waits for d on the client's clock or until ctx ends.
func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	return retry.Sleep(ctx, c.clock, d)
}

// resolve turns a possibly relative URL from the server into an absolute one.
func (c *Client) resolve(ref string) (*url.URL, error) {
	u, err := url.Parse(ref)
	if err != nil {
		return nil, fmt.Errorf("client: URL %q: %w", ref, err)
	}
	if !u.IsAbs() {
		u = c.base.ResolveReference(u)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("client: URL %q must be http or https", ref)
	}
	return u, nil
}
