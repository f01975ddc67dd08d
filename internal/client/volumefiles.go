package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// The volume content API (/v1/volumes/{id}/files): a volume's files
// without a sandbox.

func volumeFilesPath(v model.VolumeRef, op string) string {
	return "/v1/volumes/" + url.PathEscape(v.String()) + "/files/" + op
}

// StatVolumeFile describes a file of a volume.
func (c *Client) StatVolumeFile(ctx context.Context, v model.VolumeRef, p model.VolumeFilePath) (apiv1.VolumeFile, error) {
	var out apiv1.VolumeFile
	err := c.do(ctx, request{method: http.MethodGet, path: volumeFilesPath(v, "stat"), query: url.Values{"path": {p.String()}}}, &out)
	return out, err
}

// ListVolumeFiles lists a directory of a volume to depth (1: its entries).
func (c *Client) ListVolumeFiles(ctx context.Context, v model.VolumeRef, p model.VolumeFilePath, depth int) (apiv1.VolumeFileList, error) {
	var out apiv1.VolumeFileList
	q := url.Values{"path": {p.String()}, "depth": {strconv.Itoa(max(depth, 1))}}
	err := c.do(ctx, request{method: http.MethodGet, path: volumeFilesPath(v, "list"), query: q}, &out)
	return out, err
}

// MkdirVolumeFile makes a directory of a volume and its parents.
func (c *Client) MkdirVolumeFile(ctx context.Context, v model.VolumeRef, req apiv1.VolumeMkdirRequest) (apiv1.VolumeFile, error) {
	var out apiv1.VolumeFile
	err := c.do(ctx, request{method: http.MethodPost, path: volumeFilesPath(v, "mkdir"), body: req}, &out)
	return out, err
}

// RemoveVolumeFile removes a file or directory of a volume.
func (c *Client) RemoveVolumeFile(ctx context.Context, v model.VolumeRef, req apiv1.VolumeRemoveRequest) error {
	var out apiv1.RemoveResponse
	return c.do(ctx, request{method: http.MethodPost, path: volumeFilesPath(v, "remove"), body: req}, &out)
}

// MoveVolumeFile renames a file or directory inside a volume.
func (c *Client) MoveVolumeFile(ctx context.Context, v model.VolumeRef, req apiv1.VolumeMoveRequest) (apiv1.VolumeFile, error) {
	var out apiv1.VolumeFile
	err := c.do(ctx, request{method: http.MethodPost, path: volumeFilesPath(v, "move"), body: req}, &out)
	return out, err
}

// SetVolumeFileMetadata changes the mode or owner of a file of a volume.
func (c *Client) SetVolumeFileMetadata(ctx context.Context, v model.VolumeRef, req apiv1.VolumeMetadataRequest) (apiv1.VolumeFile, error) {
	var out apiv1.VolumeFile
	err := c.do(ctx, request{method: http.MethodPost, path: volumeFilesPath(v, "metadata"), body: req}, &out)
	return out, err
}

// ReadVolumeFile opens a file of a volume for reading; size is its length.
// A body that ends early returns an error from Read.
func (c *Client) ReadVolumeFile(ctx context.Context, v model.VolumeRef, p model.VolumeFilePath) (body io.ReadCloser, size int64, err error) {
	resp, err := c.stream(ctx, http.MethodGet, volumeFilesPath(v, "content"), url.Values{"path": {p.String()}}, nil)
	if err != nil {
		return nil, 0, err
	}
	return resp.Body, resp.ContentLength, nil
}

// WriteVolumeFile streams r into a file of a volume (replaced atomically
// when complete; parents made). query may carry mode (octal), uid, gid
// and overwrite.
func (c *Client) WriteVolumeFile(ctx context.Context, v model.VolumeRef, p model.VolumeFilePath, r io.Reader, query url.Values) (apiv1.VolumeFile, error) {
	var out apiv1.VolumeFile
	q := url.Values{"path": {p.String()}}
	for k, vs := range query {
		q[k] = vs
	}
	resp, err := c.stream(ctx, http.MethodPut, volumeFilesPath(v, "content"), q, r)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	return out, decodeSmall(resp.Body, &out)
}

// stream sends one request whose body (or answer) is a byte stream, not
// JSON, without the client's retries (a stream cannot be replayed) and
// without its per-request timeout (a large file takes its time).
func (c *Client) stream(ctx context.Context, method, path string, query url.Values, body io.Reader) (*http.Response, error) {
	u := *c.base
	u.Path += path
	u.RawQuery = query.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("User-Agent", c.userAgent)
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, readAPIError(resp)
	}
	return resp, nil
}
