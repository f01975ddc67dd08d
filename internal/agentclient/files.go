package agentclient

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/airlockdev/airlock/internal/agentproto"
)

// File methods: see the /v1/files endpoints in agentproto. Refusals are
// *Error with the agentproto file codes (CodeNotFound, CodeInvalidPath,
// CodeIsADirectory, …). Streams are never buffered whole: bodies go out as
// they are read and come back as io.ReadClosers.

// FileOption changes one file call.
type FileOption func(*fileOptions)

type fileOptions struct {
	user *agentproto.FileUser
}

// AsUser runs the file call as u (agentproto.QueryFileUser): the guest
// kernel checks permissions as u's, and files created belong to u. A nil u
// changes nothing (the call runs as the agent).
func AsUser(u *agentproto.FileUser) FileOption {
	return func(o *fileOptions) { o.user = u }
}

// filePath is the request path of a file endpoint: path=p (if not empty)
// and the options' query parameters. A user needs an agent that has
// FeatureFileUser (an older one would ignore it and act as root).
func (c *Client) filePath(ctx context.Context, endpoint, p string, opts []FileOption) (string, error) {
	var o fileOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.user != nil {
		if err := c.require(ctx, agentproto.FeatureFileUser); err != nil {
			return "", err
		}
	}
	q := url.Values{}
	if p != "" {
		q.Set("path", p)
	}
	if o.user != nil {
		q.Set(agentproto.QueryFileUser, o.user.String())
	}
	if len(q) == 0 {
		return "/v1/files/" + endpoint, nil
	}
	return "/v1/files/" + endpoint + "?" + q.Encode(), nil
}

// Stat describes a guest path without following a final symlink.
func (c *Client) Stat(ctx context.Context, p string, opts ...FileOption) (agentproto.FileInfo, error) {
	var fi agentproto.FileInfo
	path, err := c.filePath(ctx, "stat", p, opts)
	if err != nil {
		return fi, err
	}
	err = c.call(ctx, http.MethodGet, path, nil, http.StatusOK, &fi)
	return fi, err
}

// ListDir lists a guest directory.
func (c *Client) ListDir(ctx context.Context, p string, opts ...FileOption) (agentproto.FileList, error) {
	var l agentproto.FileList
	path, err := c.filePath(ctx, "list", p, opts)
	if err != nil {
		return l, err
	}
	err = c.callCapped(ctx, http.MethodGet, path, nil, http.StatusOK, &l, maxListBytes)
	return l, err
}

// Mkdir creates a directory and its missing parents.
func (c *Client) Mkdir(ctx context.Context, req agentproto.MkdirRequest, opts ...FileOption) (agentproto.FileInfo, error) {
	var fi agentproto.FileInfo
	if req.Owner != nil {
		if err := c.require(ctx, agentproto.FeatureMkdirOwner); err != nil {
			return fi, err
		}
	}
	path, err := c.filePath(ctx, "mkdir", "", opts)
	if err != nil {
		return fi, err
	}
	err = c.call(ctx, http.MethodPost, path, req, http.StatusOK, &fi)
	return fi, err
}

// SetMetadata replaces a file's metadata (agentproto.SetMetadataRequest)
// and describes it; it needs an agent with FeatureFileMetadata.
func (c *Client) SetMetadata(ctx context.Context, req agentproto.SetMetadataRequest, opts ...FileOption) (agentproto.FileInfo, error) {
	var fi agentproto.FileInfo
	if err := c.require(ctx, agentproto.FeatureFileMetadata); err != nil {
		return fi, err
	}
	path, err := c.filePath(ctx, "metadata", "", opts)
	if err != nil {
		return fi, err
	}
	err = c.call(ctx, http.MethodPost, path, req, http.StatusOK, &fi)
	return fi, err
}

// Move renames a file or directory.
func (c *Client) Move(ctx context.Context, req agentproto.MoveRequest, opts ...FileOption) error {
	path, err := c.filePath(ctx, "move", "", opts)
	if err != nil {
		return err
	}
	return c.call(ctx, http.MethodPost, path, req, http.StatusNoContent, nil)
}

// Remove removes a file, symlink or directory.
func (c *Client) Remove(ctx context.Context, req agentproto.RemoveRequest, opts ...FileOption) error {
	path, err := c.filePath(ctx, "remove", "", opts)
	if err != nil {
		return err
	}
	return c.call(ctx, http.MethodPost, path, req, http.StatusNoContent, nil)
}

// stream sends one request whose body (may be nil) is streamed and returns
// the response if its status is want.
func (c *Client) stream(ctx context.Context, method, path string, body io.Reader, contentType string, want int) (*http.Response, error) {
	cc, err := c.conn(ctx)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://agent"+path, body)
	if err != nil {
		return nil, fmt.Errorf("agent %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := cc.RoundTrip(req)
	if err != nil {
		return nil, fmt.Errorf("agent %s %s: %w", method, path, err)
	}
	if resp.StatusCode != want {
		defer resp.Body.Close()
		return nil, responseError(resp)
	}
	return resp, nil
}

// ReadFile opens a regular guest file for reading; size is its length
// (the body has exactly that many bytes, or fails).
func (c *Client) ReadFile(ctx context.Context, p string, opts ...FileOption) (body io.ReadCloser, size int64, err error) {
	path, err := c.filePath(ctx, "content", p, opts)
	if err != nil {
		return nil, 0, err
	}
	resp, err := c.stream(ctx, http.MethodGet, path, nil, "", http.StatusOK)
	if err != nil {
		return nil, 0, err
	}
	return resp.Body, resp.ContentLength, nil
}

// WriteFile streams r into a guest file (created or replaced atomically).
// mode < 0 keeps the mode of an existing file (0644 for a new one).
func (c *Client) WriteFile(ctx context.Context, p string, mode int, r io.Reader, opts ...FileOption) (agentproto.FileInfo, error) {
	var fi agentproto.FileInfo
	path, err := c.filePath(ctx, "content", p, opts)
	if err != nil {
		return fi, err
	}
	if mode >= 0 {
		path += "&mode=" + strconv.FormatInt(int64(mode), 8)
	}
	resp, err := c.stream(ctx, http.MethodPut, path, r, "application/octet-stream", http.StatusOK)
	if err != nil {
		return fi, err
	}
	defer resp.Body.Close()
	if err := decodeCapped(resp.Body, maxJSONBytes, "response", &fi); err != nil {
		return fi, fmt.Errorf("agent PUT %s: %w", path, err)
	}
	return fi, nil
}

// TarOut streams a guest directory as a tar archive. A stream that breaks
// before the tar trailer means the archive is incomplete.
func (c *Client) TarOut(ctx context.Context, dir string, opts ...FileOption) (io.ReadCloser, error) {
	path, err := c.filePath(ctx, "tar", dir, opts)
	if err != nil {
		return nil, err
	}
	resp, err := c.stream(ctx, http.MethodGet, path, nil, "", http.StatusOK)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// TarIn extracts a tar stream into a guest directory (created if missing).
func (c *Client) TarIn(ctx context.Context, dir string, r io.Reader, opts ...FileOption) (agentproto.TarResult, error) {
	var res agentproto.TarResult
	path, err := c.filePath(ctx, "tar", dir, opts)
	if err != nil {
		return res, err
	}
	resp, err := c.stream(ctx, http.MethodPut, path, r, "application/x-tar", http.StatusOK)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	if err := decodeCapped(resp.Body, maxJSONBytes, "response", &res); err != nil {
		return res, fmt.Errorf("agent PUT tar %s: %w", dir, err)
	}
	return res, nil
}

// maxWatchEvent bounds one line (event) of a watch stream.
const maxWatchEvent = 64 << 10

// WatchStream reads the events of a directory watch. It is not safe for
// concurrent use.
type WatchStream struct {
	body io.ReadCloser
	sc   *bufio.Scanner
	// Ready is the agent's first event (its NetworkFS says whether the
	// directory is on a network file system).
	Ready agentproto.FileEvent
}

// Watch watches a guest directory's entries. The agent's first event
// (type "ready") has been read when Watch returns: changes made after it are
// reported.
func (c *Client) Watch(ctx context.Context, dir string, opts ...FileOption) (*WatchStream, error) {
	path, err := c.filePath(ctx, "watch", dir, opts)
	if err != nil {
		return nil, err
	}
	resp, err := c.stream(ctx, http.MethodGet, path, nil, "", http.StatusOK)
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), maxWatchEvent)
	ws := &WatchStream{body: resp.Body, sc: sc}
	ev, err := ws.Next()
	if err != nil {
		ws.Close()
		return nil, fmt.Errorf("agent watch %s: %w", dir, err)
	}
	if ev.Type != agentproto.FileEventReady {
		ws.Close()
		return nil, fmt.Errorf("agent watch %s: first event %q, want %q", dir, ev.Type, agentproto.FileEventReady)
	}
	ws.Ready = ev
	return ws, nil
}

// Next returns the next event; io.EOF when the agent ended the stream (the
// directory went away).
func (w *WatchStream) Next() (agentproto.FileEvent, error) {
	for w.sc.Scan() {
		if len(w.sc.Bytes()) == 0 {
			continue
		}
		var ev agentproto.FileEvent
		if err := json.Unmarshal(w.sc.Bytes(), &ev); err != nil {
			return ev, fmt.Errorf("bad watch event: %w", err)
		}
		return ev, nil
	}
	if err := w.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return agentproto.FileEvent{}, fmt.Errorf("%w: a watch event is over %d bytes", ErrResponseTooLarge, maxWatchEvent)
		}
		return agentproto.FileEvent{}, err
	}
	return agentproto.FileEvent{}, io.EOF
}

// Close ends the watch.
func (w *WatchStream) Close() error { return w.body.Close() }
