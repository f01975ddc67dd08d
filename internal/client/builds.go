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

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// GetBuild returns a template build (GET /v1/builds/{id}).
func (c *Client) GetBuild(ctx context.Context, id model.BuildID) (apiv1.Build, error) {
	var out apiv1.Build
	err := c.do(ctx, request{method: http.MethodGet, path: "/v1/builds/" + id.String()}, &out)
	return out, err
}

// BuildFilter selects builds: Name "" is any; State is a build state,
// "active" (pending or running) or "" (any).
type BuildFilter struct {
	Name   string
	State  string
	Limit  int
	Cursor string
}

// ListBuilds returns a page of builds, newest first (GET /v1/builds).
func (c *Client) ListBuilds(ctx context.Context, f BuildFilter) (apiv1.BuildList, error) {
	q := url.Values{}
	if f.Name != "" {
		q.Set("name", f.Name)
	}
	if f.State != "" {
		q.Set("state", f.State)
	}
	if f.Limit > 0 {
		q.Set("limit", fmt.Sprint(f.Limit))
	}
	if f.Cursor != "" {
		q.Set("cursor", f.Cursor)
	}
	var out apiv1.BuildList
	err := c.do(ctx, request{method: http.MethodGet, path: "/v1/builds", query: q}, &out)
	return out, err
}

// BuildEvent is one event of a build's log stream: Log text (with Offset,
// the log's byte offset after it), or Progress.
type BuildEvent struct {
	Log      string
	Offset   int64
	Progress *apiv1.BuildProgressEventData
}

// FollowBuild streams build id's log (GET /v1/builds/{id}/log) to fn until
// the build finishes, and returns the finished build. With follow false it
// sends the log so far and returns the build as it is. A dropped stream is
// opened again from the log offset of the last log event received (sent as
// Last-Event-ID), so no log text is dropped or passed to fn twice.
func (c *Client) FollowBuild(ctx context.Context, id model.BuildID, follow bool, fn func(BuildEvent) error) (apiv1.Build, error) {
	var offset int64 // the log's byte offset after the text passed to fn
	for attempt := 0; ; attempt++ {
		before := offset
		b, done, err := c.followOnce(ctx, id, follow, &offset, fn)
		if done || err == nil {
			return b, err
		}
		if offset > before {
			attempt = 0 // the stream got somewhere: not a failing server
		}
		var rt *retryableError
		if !errors.As(err, &rt) || ctx.Err() != nil || attempt >= 30 {
			return apiv1.Build{}, err
		}
		if err := c.sleep(ctx, c.backoff(min(attempt, 4))); err != nil {
			return apiv1.Build{}, err
		}
	}
}

// followOnce reads one log stream. done says the stream ended with its done
// event (b is the build); a retryable error says it may be opened again.
func (c *Client) followOnce(ctx context.Context, id model.BuildID, follow bool, offset *int64, fn func(BuildEvent) error) (b apiv1.Build, done bool, err error) {
	u := *c.base
	u.Path += "/v1/builds/" + id.String() + "/log"
	if !follow {
		u.RawQuery = "follow=false"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return b, false, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("User-Agent", c.userAgent)
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	if *offset > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(*offset, 10))
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if ctx.Err() != nil {
			return b, false, context.Cause(ctx)
		}
		return b, false, &retryableError{err: fmt.Errorf("GET %s: %w", u.String(), err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		apiErr := readAPIError(resp)
		if retryableStatus(resp.StatusCode) {
			return b, false, &retryableError{err: apiErr}
		}
		return b, false, apiErr
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		return b, false, fmt.Errorf("build log: server answered with content type %q, not text/event-stream", resp.Header.Get("Content-Type"))
	}
	dec := NewSSEDecoder(resp.Body)
	for {
		ev, err := dec.Next()
		if err != nil {
			if ctx.Err() != nil {
				return b, false, context.Cause(ctx)
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				err = errors.New("the stream ended before the build did")
			}
			return b, false, &retryableError{err: fmt.Errorf("build log %s: %w", id, err)}
		}
		switch ev.Type {
		case apiv1.EventBuildLog:
			var d apiv1.BuildLogEventData
			if err := json.Unmarshal([]byte(ev.Data), &d); err != nil {
				return b, false, fmt.Errorf("malformed log event: %w", err)
			}
			if d.Offset <= *offset {
				return b, false, fmt.Errorf("build log %s: a log event ends at byte %d, not after %d where the stream resumed", id, d.Offset, *offset)
			}
			*offset = d.Offset
			if err := fn(BuildEvent{Log: d.Text, Offset: d.Offset}); err != nil {
				return b, true, err
			}
		case apiv1.EventBuildProgress:
			var d apiv1.BuildProgressEventData
			if err := json.Unmarshal([]byte(ev.Data), &d); err != nil {
				return b, false, fmt.Errorf("malformed progress event: %w", err)
			}
			if err := fn(BuildEvent{Progress: &d}); err != nil {
				return b, true, err
			}
		case apiv1.EventBuildDone:
			if err := json.Unmarshal([]byte(ev.Data), &b); err != nil {
				return b, false, fmt.Errorf("malformed done event: %w", err)
			}
			return b, true, nil
		}
	}
}

// ActiveBuild returns the newest pending or running build that is to name
// name, if there is one.
func (c *Client) ActiveBuild(ctx context.Context, name string) (apiv1.Build, bool, error) {
	l, err := c.ListBuilds(ctx, BuildFilter{Name: name, State: "active", Limit: 1})
	if err != nil || len(l.Builds) == 0 {
		return apiv1.Build{}, false, err
	}
	return l.Builds[0], true, nil
}
