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

// GetSandboxEgress returns a sandbox's egress policy (GET /v1/sandboxes/{id}/egress).
func (c *Client) GetSandboxEgress(ctx context.Context, id model.SandboxID) (apiv1.SandboxEgress, error) {
	var out apiv1.SandboxEgress
	err := c.do(ctx, request{method: http.MethodGet, path: "/v1/sandboxes/" + id.String() + "/egress"}, &out)
	return out, err
}

// SetSandboxEgress replaces a sandbox's egress policy; a running sandbox
// follows it at once (PUT /v1/sandboxes/{id}/egress).
func (c *Client) SetSandboxEgress(ctx context.Context, id model.SandboxID, p apiv1.EgressPolicy) (apiv1.SandboxEgress, error) {
	var out apiv1.SandboxEgress
	err := c.do(ctx, request{method: http.MethodPut, path: "/v1/sandboxes/" + id.String() + "/egress", body: p}, &out)
	return out, err
}

// ExplainEgress asks what the sandbox's policy decides for host and port
// (POST /v1/sandboxes/{id}/egress/explain).
func (c *Client) ExplainEgress(ctx context.Context, id model.SandboxID, host string, port uint16) (apiv1.ExplainEgressResponse, error) {
	var out apiv1.ExplainEgressResponse
	err := c.do(ctx, request{method: http.MethodPost, path: "/v1/sandboxes/" + id.String() + "/egress/explain",
		body: apiv1.ExplainEgressRequest{Host: host, Port: port}}, &out)
	return out, err
}

// EgressDecisions returns the sandbox's decisions after seq after
// (GET /v1/sandboxes/{id}/egress/decisions).
func (c *Client) EgressDecisions(ctx context.Context, id model.SandboxID, after uint64) (apiv1.EgressDecisionList, error) {
	var out apiv1.EgressDecisionList
	q := url.Values{}
	if after > 0 {
		q.Set("after", strconv.FormatUint(after, 10))
	}
	err := c.do(ctx, request{method: http.MethodGet, path: "/v1/sandboxes/" + id.String() + "/egress/decisions", query: q}, &out)
	return out, err
}

// DecisionEvent is one item of a followed decision stream: a decision, or
// a count of decisions the server's bounded log dropped before they were
// read.
type DecisionEvent struct {
	Decision *apiv1.EgressDecision
	Dropped  uint64
}

// FollowEgressDecisions streams the sandbox's decisions after seq after to
// fn until the sandbox is deleted (nil), ctx ends, or fn fails. A dropped
// stream is opened again after the last decision received (Last-Event-ID),
// so none is passed to fn twice.
func (c *Client) FollowEgressDecisions(ctx context.Context, id model.SandboxID, after uint64, fn func(DecisionEvent) error) error {
	for attempt := 0; ; attempt++ {
		before := after
		done, err := c.followDecisionsOnce(ctx, id, &after, fn)
		if done {
			return err
		}
		if after > before {
			attempt = 0
		}
		var rt *retryableError
		if !errors.As(err, &rt) || ctx.Err() != nil || attempt >= 30 {
			return err
		}
		if err := c.sleep(ctx, c.backoff(min(attempt, 4))); err != nil {
			return err
		}
	}
}

func (c *Client) followDecisionsOnce(ctx context.Context, id model.SandboxID, after *uint64, fn func(DecisionEvent) error) (done bool, err error) {
	u := *c.base
	u.Path += "/v1/sandboxes/" + id.String() + "/egress/decisions"
	u.RawQuery = "follow=true"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return true, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("User-Agent", c.userAgent)
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	if *after > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatUint(*after, 10))
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return true, context.Cause(ctx)
		}
		return false, &retryableError{err: fmt.Errorf("GET %s: %w", u.String(), err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		apiErr := readAPIError(resp)
		if retryableStatus(resp.StatusCode) {
			return false, &retryableError{err: apiErr}
		}
		return true, apiErr
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		return true, fmt.Errorf("egress decisions: server answered with content type %q, not text/event-stream", resp.Header.Get("Content-Type"))
	}
	dec := NewSSEDecoder(resp.Body)
	for {
		ev, err := dec.Next()
		if err != nil {
			if ctx.Err() != nil {
				return true, context.Cause(ctx)
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				err = errors.New("the stream ended early")
			}
			return false, &retryableError{err: fmt.Errorf("egress decisions of %s: %w", id, err)}
		}
		switch ev.Type {
		case apiv1.EventEgressDecision:
			var d apiv1.EgressDecision
			if err := json.Unmarshal([]byte(ev.Data), &d); err != nil {
				return true, fmt.Errorf("malformed decision event: %w", err)
			}
			if d.Seq <= *after {
				continue // already passed on
			}
			*after = d.Seq
			if err := fn(DecisionEvent{Decision: &d}); err != nil {
				return true, err
			}
		case apiv1.EventEgressDropped:
			var d apiv1.EgressDroppedEventData
			if err := json.Unmarshal([]byte(ev.Data), &d); err != nil {
				return true, fmt.Errorf("malformed dropped event: %w", err)
			}
			if err := fn(DecisionEvent{Dropped: d.Dropped}); err != nil {
				return true, err
			}
		case apiv1.EventEgressEnd:
			return true, nil
		}
	}
}

// ListEgressProfiles returns every egress profile.
func (c *Client) ListEgressProfiles(ctx context.Context) (apiv1.EgressProfileList, error) {
	var out apiv1.EgressProfileList
	err := c.do(ctx, request{method: http.MethodGet, path: "/v1/egress-profiles"}, &out)
	return out, err
}

// GetEgressProfile returns one egress profile.
func (c *Client) GetEgressProfile(ctx context.Context, name string) (apiv1.EgressProfile, error) {
	var out apiv1.EgressProfile
	if err := pathName("egress profile", name); err != nil {
		return out, err
	}
	err := c.do(ctx, request{method: http.MethodGet, path: "/v1/egress-profiles/" + name}, &out)
	return out, err
}

// PutEgressProfile creates or replaces an egress profile (admin).
func (c *Client) PutEgressProfile(ctx context.Context, name string, p apiv1.PutEgressProfileRequest) (apiv1.EgressProfile, error) {
	var out apiv1.EgressProfile
	if err := pathName("egress profile", name); err != nil {
		return out, err
	}
	err := c.do(ctx, request{method: http.MethodPut, path: "/v1/egress-profiles/" + name, body: p}, &out)
	return out, err
}

// DeleteEgressProfile deletes an egress profile (admin).
func (c *Client) DeleteEgressProfile(ctx context.Context, name string) (apiv1.EgressProfile, error) {
	var out apiv1.EgressProfile
	if err := pathName("egress profile", name); err != nil {
		return out, err
	}
	err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/egress-profiles/" + name}, &out)
	return out, err
}

// PutSecret creates or replaces a secret of the key's project. The value is
// sent once and never comes back.
func (c *Client) PutSecret(ctx context.Context, name string, s apiv1.PutSecretRequest) (apiv1.Secret, error) {
	var out apiv1.Secret
	if err := pathName("secret", name); err != nil {
		return out, err
	}
	err := c.do(ctx, request{method: http.MethodPut, path: "/v1/secrets/" + name, body: s}, &out)
	return out, err
}

// CreateSecret creates a secret of the key's project, never replacing
// one: a name the project has is a 409 already_exists *APIError.
func (c *Client) CreateSecret(ctx context.Context, name string, s apiv1.PutSecretRequest) (apiv1.Secret, error) {
	var out apiv1.Secret
	if err := pathName("secret", name); err != nil {
		return out, err
	}
	err := c.do(ctx, request{method: http.MethodPut, path: "/v1/secrets/" + name, body: s, header: http.Header{"If-None-Match": {"*"}}}, &out)
	return out, err
}

// GetSecret shows a secret of the project (never its value).
func (c *Client) GetSecret(ctx context.Context, name string) (apiv1.Secret, error) {
	var out apiv1.Secret
	if err := pathName("secret", name); err != nil {
		return out, err
	}
	err := c.do(ctx, request{method: http.MethodGet, path: "/v1/secrets/" + name}, &out)
	return out, err
}

// ListSecrets lists the project's secrets (never values).
func (c *Client) ListSecrets(ctx context.Context) (apiv1.SecretList, error) {
	var out apiv1.SecretList
	err := c.do(ctx, request{method: http.MethodGet, path: "/v1/secrets"}, &out)
	return out, err
}

// DeleteSecret deletes a secret of the project.
func (c *Client) DeleteSecret(ctx context.Context, name string) (apiv1.Secret, error) {
	var out apiv1.Secret
	if err := pathName("secret", name); err != nil {
		return out, err
	}
	err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/secrets/" + name}, &out)
	return out, err
}

// pathName checks a name that goes into a request path: the server's name
// rules are stricter, but nothing here may need escaping.
func pathName(what, name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("%s name %q: 1-64 characters", what, name)
	}
	for _, ch := range name {
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '_' || ch == '.') {
			return fmt.Errorf("%s name %q: only letters, digits, '-', '_' and '.'", what, name)
		}
	}
	return nil
}
