package client

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

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

func filesPath(sb model.SandboxID, op string) string {
	return "/v1/sandboxes/" + sb.String() + "/files/" + op
}

// FileOption changes one file call.
type FileOption func(*fileOptions)

type fileOptions struct {
	user *apiv1.User
}

// AsUser runs a file call as the guest user u: the sandbox kernel checks
// permissions as u's UID and primary GID, and what the call creates
// belongs to u. A nil u runs it as the sandbox agent (root), the default.
func AsUser(u *apiv1.User) FileOption {
	return func(o *fileOptions) { o.user = u }
}

func fileOpts(opts []FileOption) fileOptions {
	var o fileOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// fileQuery is ?path=p with the options' user.
func fileQuery(p model.GuestPath, opts []FileOption) url.Values {
	q := url.Values{"path": {p.String()}}
	if u := fileOpts(opts).user; u != nil {
		q.Set(apiv1.FileUserQuery, strconv.FormatInt(u.UID, 10)+":"+strconv.FormatInt(u.GID, 10))
	}
	return q
}

// StatFile describes a file in a sandbox (a final symlink is not followed).
func (c *Client) StatFile(ctx context.Context, sb model.SandboxID, p model.GuestPath, opts ...FileOption) (apiv1.FileInfo, error) {
	var out apiv1.FileInfo
	err := c.do(ctx, request{method: http.MethodGet, path: filesPath(sb, "stat"), query: fileQuery(p, opts)}, &out)
	return out, err
}

// ListFiles lists a directory in a sandbox.
func (c *Client) ListFiles(ctx context.Context, sb model.SandboxID, p model.GuestPath, opts ...FileOption) (apiv1.FileList, error) {
	var out apiv1.FileList
	err := c.do(ctx, request{method: http.MethodGet, path: filesPath(sb, "list"), query: fileQuery(p, opts)}, &out)
	return out, err
}

// Mkdir creates a directory and its missing parents in a sandbox.
func (c *Client) Mkdir(ctx context.Context, sb model.SandboxID, p model.GuestPath, opts ...FileOption) (apiv1.FileInfo, error) {
	var out apiv1.FileInfo
	err := c.do(ctx, request{method: http.MethodPost, path: filesPath(sb, "mkdir"), body: apiv1.MkdirRequest{Path: p.String(), User: fileOpts(opts).user}}, &out)
	return out, err
}

// MkdirOwned creates a directory and its missing parents in a sandbox as
// the agent, giving each directory it creates to owner
// (apiv1.MkdirRequest.Owner).
func (c *Client) MkdirOwned(ctx context.Context, sb model.SandboxID, p model.GuestPath, owner apiv1.User) (apiv1.FileInfo, error) {
	var out apiv1.FileInfo
	err := c.do(ctx, request{method: http.MethodPost, path: filesPath(sb, "mkdir"), body: apiv1.MkdirRequest{Path: p.String(), Owner: &owner}}, &out)
	return out, err
}

// SetFileMetadata replaces the metadata of a file in a sandbox and
// describes the file.
func (c *Client) SetFileMetadata(ctx context.Context, sb model.SandboxID, p model.GuestPath, m map[string]string, opts ...FileOption) (apiv1.FileInfo, error) {
	var out apiv1.FileInfo
	err := c.do(ctx, request{method: http.MethodPost, path: filesPath(sb, "metadata"), body: apiv1.SetFileMetadataRequest{Path: p.String(), Metadata: m, User: fileOpts(opts).user}}, &out)
	return out, err
}

// MoveFile renames a file or directory in a sandbox and describes the
// result. An AsUser option overrides req.User.
func (c *Client) MoveFile(ctx context.Context, sb model.SandboxID, req apiv1.MoveRequest, opts ...FileOption) (apiv1.FileInfo, error) {
	if u := fileOpts(opts).user; u != nil {
		req.User = u
	}
	var out apiv1.FileInfo
	err := c.do(ctx, request{method: http.MethodPost, path: filesPath(sb, "move"), body: req}, &out)
	return out, err
}

// RemoveFile removes a file, symlink or directory in a sandbox.
func (c *Client) RemoveFile(ctx context.Context, sb model.SandboxID, p model.GuestPath, recursive bool, opts ...FileOption) error {
	var out apiv1.RemoveResponse
	return c.do(ctx, request{method: http.MethodPost, path: filesPath(sb, "remove"), body: apiv1.RemoveRequest{Path: p.String(), Recursive: recursive, User: fileOpts(opts).user}}, &out)
}

// CreateTransfer authorizes one byte stream on the data plane.
func (c *Client) CreateTransfer(ctx context.Context, sb model.SandboxID, p model.GuestPath, direction string, opts ...FileOption) (apiv1.Transfer, error) {
	var out apiv1.Transfer
	err := c.do(ctx, request{method: http.MethodPost, path: filesPath(sb, "transfers"), body: apiv1.CreateTransferRequest{Path: p.String(), Direction: direction, User: fileOpts(opts).user}}, &out)
	return out, err
}

// transfer makes a transfer and sends its one data-plane request. Bodies
// are streamed, never retried: a failed transfer is reported.
func (c *Client) transfer(ctx context.Context, sb model.SandboxID, p model.GuestPath, direction, query string, body io.Reader, contentType string, opts []FileOption) (*http.Response, error) {
	tr, err := c.CreateTransfer(ctx, sb, p, direction, opts...)
	if err != nil {
		return nil, err
	}
	u, err := c.resolve(tr.URL)
	if err != nil {
		return nil, err
	}
	if query != "" {
		u.RawQuery = query
	}
	req, err := http.NewRequestWithContext(ctx, tr.Method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", direction, p, err)
	}
	req.Header.Set("Authorization", "Bearer "+tr.Token)
	req.Header.Set("User-Agent", c.userAgent)
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", direction, p, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, readAPIError(resp)
	}
	return resp, nil
}

// Download opens a regular file of a sandbox for reading; size is its
// length, or -1 if the server did not say. A body that ends early returns
// an error from Read, never a clean EOF.
func (c *Client) Download(ctx context.Context, sb model.SandboxID, p model.GuestPath, opts ...FileOption) (body io.ReadCloser, size int64, err error) {
	resp, err := c.transfer(ctx, sb, p, apiv1.DirectionDownload, "", nil, "", opts)
	if err != nil {
		return nil, 0, err
	}
	return resp.Body, resp.ContentLength, nil
}

// Upload streams r into a file of a sandbox (replaced atomically when
// complete). mode < 0 keeps an existing file's mode (0644 for a new one).
func (c *Client) Upload(ctx context.Context, sb model.SandboxID, p model.GuestPath, mode int, r io.Reader, opts ...FileOption) (apiv1.FileInfo, error) {
	q := ""
	if mode >= 0 {
		q = "mode=" + strconv.FormatInt(int64(mode), 8)
	}
	var out apiv1.FileInfo
	resp, err := c.transfer(ctx, sb, p, apiv1.DirectionUpload, q, io.NopCloser(r), "application/octet-stream", opts)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	return out, decodeSmall(resp.Body, &out)
}

// TarOut streams a sandbox directory as a tar archive.
func (c *Client) TarOut(ctx context.Context, sb model.SandboxID, dir model.GuestPath, opts ...FileOption) (io.ReadCloser, error) {
	resp, err := c.transfer(ctx, sb, dir, apiv1.DirectionTarOut, "", nil, "", opts)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// TarIn extracts a tar stream into a sandbox directory (created if missing).
func (c *Client) TarIn(ctx context.Context, sb model.SandboxID, dir model.GuestPath, r io.Reader, opts ...FileOption) (apiv1.TarResult, error) {
	var out apiv1.TarResult
	resp, err := c.transfer(ctx, sb, dir, apiv1.DirectionTarIn, "", io.NopCloser(r), "application/x-tar", opts)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	return out, decodeSmall(resp.Body, &out)
}

// FileWatch reads the events of a directory watch.
type FileWatch struct {
	body io.ReadCloser
	sc   *bufio.Scanner
	// Ready is the server's first event (NetworkFS: the directory is on a
	// network file system).
	Ready apiv1.FileEvent
}

// WatchFiles watches a sandbox directory's entries. The server's "ready"
// event has been read when it returns.
func (c *Client) WatchFiles(ctx context.Context, sb model.SandboxID, dir model.GuestPath, opts ...FileOption) (*FileWatch, error) {
	resp, err := c.transfer(ctx, sb, dir, apiv1.DirectionWatch, "", nil, "", opts)
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	w := &FileWatch{body: resp.Body, sc: sc}
	ev, err := w.Next()
	if err != nil || ev.Type != "ready" {
		w.Close()
		return nil, fmt.Errorf("watch %s: no ready event (%v)", dir, err)
	}
	w.Ready = ev
	return w, nil
}

// Next returns the next event; io.EOF when the server ended the watch.
func (w *FileWatch) Next() (apiv1.FileEvent, error) {
	var ev apiv1.FileEvent
	for w.sc.Scan() {
		if len(w.sc.Bytes()) == 0 {
			continue
		}
		if err := json.Unmarshal(w.sc.Bytes(), &ev); err != nil {
			return ev, fmt.Errorf("bad watch event: %w", err)
		}
		return ev, nil
	}
	if err := w.sc.Err(); err != nil {
		return ev, err
	}
	return ev, io.EOF
}

// Close ends the watch.
func (w *FileWatch) Close() error { return w.body.Close() }

func decodeSmall(r io.Reader, v any) error {
	if err := json.NewDecoder(io.LimitReader(r, maxResponseBody)).Decode(v); err != nil {
		return fmt.Errorf("decode response: %w", err)
	}
	return nil
}

// IsNotFound reports whether err says a sandbox file (or the sandbox) does not exist.
func IsNotFound(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.Code == apiv1.CodeNotFound
}
