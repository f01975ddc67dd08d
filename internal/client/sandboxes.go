package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/retry"
)

// CreateSandbox asks for a new sandbox (POST /v1/sandboxes). The sandbox
// exists once the returned operation succeeds; see WaitOperation.
func (c *Client) CreateSandbox(ctx context.Context, req apiv1.CreateSandboxRequest) (apiv1.SandboxWithOperation, error) {
	var out apiv1.SandboxWithOperation
	err := c.do(ctx, request{method: http.MethodPost, path: "/v1/sandboxes", body: req}, &out)
	return out, err
}

// MetadataFilter is one key=value term of a sandbox list filter.
type MetadataFilter struct {
	Key, Value string
}

// ListSandboxesQuery filters and pages GET /v1/sandboxes. Zero values mean
// no filter, the server's default page size and the first page.
type ListSandboxesQuery struct {
	States   []model.SandboxState // any of these states
	Metadata []MetadataFilter     // all of these key=value pairs
	Limit    int
	Cursor   string // a previous page's NextCursor
}

func (q ListSandboxesQuery) values() url.Values {
	v := url.Values{}
	for _, s := range q.States {
		v.Add("state", string(s))
	}
	for _, m := range q.Metadata {
		v.Add("metadata", m.Key+"="+m.Value)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	return v
}

// ListSandboxes returns one page of the project's sandboxes.
func (c *Client) ListSandboxes(ctx context.Context, q ListSandboxesQuery) (apiv1.SandboxList, error) {
	var out apiv1.SandboxList
	err := c.do(ctx, request{method: http.MethodGet, path: "/v1/sandboxes", query: q.values()}, &out)
	return out, err
}

// ListAllSandboxes follows the cursors from q.Cursor to the last page and
// returns every sandbox; q.Limit is the page size.
func (c *Client) ListAllSandboxes(ctx context.Context, q ListSandboxesQuery) (apiv1.SandboxList, error) {
	items, err := allPages("/v1/sandboxes", q.Cursor, func(cursor string) ([]apiv1.Sandbox, string, error) {
		q.Cursor = cursor
		page, err := c.ListSandboxes(ctx, q)
		return page.Sandboxes, page.NextCursor, err
	})
	return apiv1.SandboxList{Sandboxes: items}, err
}

// GetSandbox returns one sandbox.
func (c *Client) GetSandbox(ctx context.Context, id model.SandboxID) (apiv1.Sandbox, error) {
	var out apiv1.Sandbox
	err := c.do(ctx, request{method: http.MethodGet, path: "/v1/sandboxes/" + id.String()}, &out)
	return out, err
}

// DeleteSandbox asks for a sandbox's deletion (DELETE /v1/sandboxes/{id}).
func (c *Client) DeleteSandbox(ctx context.Context, id model.SandboxID) (apiv1.OperationResponse, error) {
	var out apiv1.OperationResponse
	err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/sandboxes/" + id.String()}, &out)
	return out, err
}

// CreateCommand creates a command session in a running sandbox (POST
// /v1/sandboxes/{id}/commands). The process starts on the first Attach to
// the session's AttachURL.
func (c *Client) CreateCommand(ctx context.Context, sandbox model.SandboxID, req apiv1.CreateCommandRequest) (apiv1.CommandSession, error) {
	var out apiv1.CommandSession
	path := "/v1/sandboxes/" + sandbox.String() + "/commands"
	err := c.do(ctx, request{method: http.MethodPost, path: path, body: req}, &out)
	return out, err
}

// CreateAttachment issues a new attachment token for an existing process of
// a sandbox (POST /v1/sandboxes/{id}/processes/{process_id}/attachments),
// allowing the given actions (all of them if none are given).
func (c *Client) CreateAttachment(ctx context.Context, sandbox model.SandboxID, process model.ProcessID, actions ...string) (apiv1.CommandSession, error) {
	var out apiv1.CommandSession
	r := request{method: http.MethodPost, path: "/v1/sandboxes/" + sandbox.String() + "/processes/" + process.String() + "/attachments"}
	if len(actions) > 0 {
		r.body = apiv1.CreateAttachmentRequest{Actions: actions}
	}
	err := c.do(ctx, r, &out)
	return out, err
}

// GetOperation returns an operation. With wait > 0 the server holds the
// request until the operation finishes or wait elapses (long poll).
func (c *Client) GetOperation(ctx context.Context, id model.OperationID, wait time.Duration) (apiv1.Operation, error) {
	var out apiv1.Operation
	r := request{method: http.MethodGet, path: "/v1/operations/" + id.String()}
	if wait > 0 {
		r.query = url.Values{"wait": {wait.String()}}
		r.wait = wait
	}
	err := c.do(ctx, r, &out)
	return out, err
}

// WaitOption configures WaitOperation.
type WaitOption func(*waitConfig)

type waitConfig struct {
	poll     time.Duration
	progress func(apiv1.Operation)
}

// WithPollWait sets the long-poll wait of each request (default 30s). A
// shorter wait reports progress more often.
func WithPollWait(d time.Duration) WaitOption {
	return func(w *waitConfig) {
		if d > 0 {
			w.poll = d
		}
	}
}

// WithProgress calls fn with the operation after every poll that found it
// unfinished.
func WithProgress(fn func(apiv1.Operation)) WaitOption {
	return func(w *waitConfig) { w.progress = fn }
}

// WaitOperation long-polls an operation until it finishes or ctx ends. It
// returns the finished operation with a nil error if it succeeded and with an
// *OperationFailedError if it failed; if ctx ends first, the last state seen
// and an error wrapping ctx's error.
func (c *Client) WaitOperation(ctx context.Context, id model.OperationID, opts ...WaitOption) (apiv1.Operation, error) {
	cfg := waitConfig{poll: 30 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	var last apiv1.Operation
	// Polls in a row that came back early without news wait this backoff
	// (from 100 ms, doubling, at most 1 s), started again by a poll the
	// server held.
	quick := retry.Policy{Initial: 100 * time.Millisecond, Max: time.Second, Jitter: 0.2}.Start(c.clock)
	for {
		start := time.Now()
		op, err := c.GetOperation(ctx, id, cfg.poll)
		if err != nil {
			if ctx.Err() != nil {
				return last, fmt.Errorf("waiting for operation %s (last seen %s): %w", id, stateOrUnknown(last), context.Cause(ctx))
			}
			return last, err
		}
		last = op
		switch model.OperationState(op.State) {
		case model.OpSucceeded:
			return op, nil
		case model.OpFailed:
			return op, &OperationFailedError{Operation: op}
		}
		if cfg.progress != nil {
			cfg.progress(op)
		}
		// A server that does not hold the request must not turn this
		// loop into a busy one.
		if time.Since(start) < cfg.poll/2 {
			if err := quick.Wait(ctx); err != nil {
				return last, fmt.Errorf("waiting for operation %s (last seen %s): %w", id, stateOrUnknown(last), context.Cause(ctx))
			}
		} else {
			quick.Reset()
		}
	}
}

func stateOrUnknown(op apiv1.Operation) string {
	if op.State == "" {
		return "no state yet"
	}
	return op.State
}

// SandboxMetrics returns a sandbox's resource samples between start and
// end (both included; zero: unbounded), oldest first (GET
// /v1/sandboxes/{id}/metrics).
func (c *Client) SandboxMetrics(ctx context.Context, id model.SandboxID, start, end time.Time) (apiv1.SandboxMetricList, error) {
	q := url.Values{}
	if !start.IsZero() {
		q.Set("start", start.UTC().Format(time.RFC3339Nano))
	}
	if !end.IsZero() {
		q.Set("end", end.UTC().Format(time.RFC3339Nano))
	}
	var out apiv1.SandboxMetricList
	err := c.do(ctx, request{method: http.MethodGet, path: "/v1/sandboxes/" + id.String() + "/metrics", query: q}, &out)
	return out, err
}
