package envdfs

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

// filesHandler serves envd's GET and POST /files.
type filesHandler struct {
	log *slog.Logger
}

// FilesHandler serves envd's /files: GET downloads a file, POST uploads
// one or more (multipart/form-data or application/octet-stream). Errors
// are JSON {code, message} with code the HTTP status.
//
// A multipart upload writes each part named "file" to the path its
// filename carries (relative to the user's home when not absolute); with a
// ?path= query every such part is written to that path instead (the SDK
// sends ?path= only for single-file writes). Files are written as the
// user; missing parent directories are created as E2B's envd creates
// them, owned by the user, also where only root may create them (under
// "/"). Uploads are streamed to the native API, which writes each file to
// a temporary name and renames it over the target when complete. The
// native API has no size limit for an upload: the bound is the sandbox's
// disk, and a write that fills it fails with 500 (the native API does not
// tell ENOSPC from other write failures, so 507 is never sent).
// X-Metadata-<key> headers (envd ≥ 0.6.2) are the written files' metadata,
// kept as their extended attributes user.e2b.<key> (model.FileMetadata
// bounds them); a bad one is 400 before anything is written.
func FilesHandler(logger *slog.Logger) http.Handler {
	return &filesHandler{log: logger}
}

// fileResult is one written file in the answer to POST /files.
type fileResult struct {
	Path     string            `json:"path"`
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// metadataHeaderPrefix starts the headers that carry a write's file
// metadata (X-Metadata-<key>: <value>), as E2B's SDK sends them.
const metadataHeaderPrefix = "X-Metadata-"

// uploadMetadata parses the X-Metadata-* headers of an upload (keys
// lowercased, as E2B's envd keeps them); a bad one is 400 before anything
// is written.
func uploadMetadata(h http.Header) (model.FileMetadata, error) {
	raw := map[string]string{}
	for k, vs := range h {
		key, ok := cutPrefixFold(k, metadataHeaderPrefix)
		if !ok {
			continue
		}
		if len(vs) != 1 {
			return nil, errorf(http.StatusBadRequest, "metadata header %s is given %d times", textclip.Bytes(k, maxEcho), len(vs))
		}
		raw[key] = vs[0]
	}
	m, err := model.ParseFileMetadata(raw)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "%v", err)
	}
	return m, nil
}

// cutPrefixFold is strings.CutPrefix ignoring ASCII case.
func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return "", false
	}
	return s[len(prefix):], true
}

// httpError is an /files error: status and message.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func errorf(status int, format string, args ...any) error {
	return &httpError{status: status, msg: fmt.Sprintf(format, args...)}
}

// statusOf maps a Connect code to the HTTP status envd's /files answers.
func statusOf(code connect.Code) int {
	switch code {
	case connect.CodeInvalidArgument:
		return http.StatusBadRequest
	case connect.CodeUnauthenticated:
		return http.StatusUnauthorized
	case connect.CodePermissionDenied:
		return http.StatusForbidden
	case connect.CodeNotFound:
		return http.StatusNotFound
	case connect.CodeAlreadyExists, connect.CodeFailedPrecondition, connect.CodeAborted:
		return http.StatusConflict
	case connect.CodeResourceExhausted:
		return http.StatusTooManyRequests
	case connect.CodeUnimplemented:
		return http.StatusNotImplemented
	case connect.CodeUnavailable:
		return http.StatusServiceUnavailable
	case connect.CodeDeadlineExceeded:
		return http.StatusGatewayTimeout
	case connect.CodeCanceled:
		return 499
	}
	return http.StatusInternalServerError
}

func (h *filesHandler) writeError(ctx context.Context, w http.ResponseWriter, err error) {
	status, msg := http.StatusInternalServerError, err.Error()
	var he *httpError
	var ce *connect.Error
	switch {
	case errors.As(err, &he):
		status, msg = he.status, he.msg
	case errors.As(err, &ce):
		status, msg = statusOf(ce.Code()), ce.Message()
	}
	if status >= 500 {
		h.log.WarnContext(ctx, "e2b /files failed", "status", status, "err", err)
	}
	writeJSON(w, status, map[string]any{"code": status, "message": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (h *filesHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var err error
	switch r.Method {
	case http.MethodGet:
		err = h.download(w, r)
	case http.MethodPost:
		err = h.upload(w, r)
	default:
		w.Header().Set("Allow", "GET, POST")
		err = errorf(http.StatusMethodNotAllowed, "method %s not allowed on /files", r.Method)
	}
	if err != nil {
		h.writeError(r.Context(), w, err)
	}
}

// fileQuery reads ?username= and ?path= (the signature parameters are the
// gateway's) and resolves the caller.
func fileQuery(r *http.Request) (caller, string, error) {
	q := r.URL.Query()
	c, err := resolveCaller(r.Context(), q.Get("username"))
	if err != nil {
		return caller{}, "", err
	}
	return c, q.Get("path"), nil
}

// download: GET /files?path= → the file's bytes, gzipped when the client
// accepts it.
func (h *filesHandler) download(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	c, raw, err := fileQuery(r)
	if err != nil {
		return err
	}
	if raw == "" {
		return errorf(http.StatusBadRequest, "the path query parameter is required")
	}
	p, err := c.path(raw)
	if err != nil {
		return err
	}
	useGzip, identityOK := true, true
	if ae, ok := r.Header["Accept-Encoding"]; ok {
		useGzip, identityOK = acceptsGzip(strings.Join(ae, ","))
	} else {
		useGzip = false
	}
	if !useGzip && !identityOK {
		return errorf(http.StatusNotAcceptable, "no acceptable encoding: this server sends gzip or identity")
	}
	body, size, err := c.t.Native.Download(ctx, c.t.Sandbox, p, c.as())
	if err != nil {
		return nativeError(ctx, "download "+p.String(), err)
	}
	defer body.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Add("Vary", "Accept-Encoding")
	var out io.Writer = flushWriter{w}
	var gz *gzip.Writer
	if useGzip {
		w.Header().Set("Content-Encoding", "gzip")
		gz = gzip.NewWriter(out)
		out = gz
	} else if size >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	}
	w.WriteHeader(http.StatusOK)
	n, err := io.CopyBuffer(out, body, make([]byte, 256<<10))
	if err == nil && gz != nil {
		err = gz.Close()
	}
	if err != nil {
		// The status is sent: break the stream so the client cannot take
		// a truncated file for a whole one.
		if ctx.Err() == nil {
			h.log.WarnContext(ctx, "e2b download broke", "path", p, "bytes", n, "err", err)
		}
		panic(http.ErrAbortHandler)
	}
	return nil
}

// flushWriter hides ReadFrom so the copy buffer bounds memory.
type flushWriter struct{ w io.Writer }

func (f flushWriter) Write(b []byte) (int, error) { return f.w.Write(b) }

// upload: POST /files → 200 [{path, name, type: "file"}…].
func (h *filesHandler) upload(w http.ResponseWriter, r *http.Request) error {
	c, raw, err := fileQuery(r)
	if err != nil {
		return err
	}
	meta, err := uploadMetadata(r.Header)
	if err != nil {
		return err
	}
	c.meta = meta
	var dst model.GuestPath
	if raw != "" {
		if dst, err = c.path(raw); err != nil {
			return err
		}
	}
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		return errorf(http.StatusBadRequest, "Content-Type must be multipart/form-data or application/octet-stream")
	}
	var out []fileResult
	switch mt {
	case "multipart/form-data":
		out, err = h.uploadMultipart(r, c, dst, params["boundary"])
	case "application/octet-stream":
		out, err = h.uploadRaw(r, c, dst)
	default:
		return errorf(http.StatusBadRequest, "Content-Type must be multipart/form-data or application/octet-stream, not %s", textclip.Bytes(mt, maxEcho))
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *filesHandler) uploadRaw(r *http.Request, c caller, dst model.GuestPath) ([]fileResult, error) {
	if dst == "" {
		return nil, errorf(http.StatusBadRequest, "the path query parameter is required for application/octet-stream uploads")
	}
	var body io.Reader = r.Body
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, errorf(http.StatusBadRequest, "request body is not gzip: %v", err)
		}
		defer zr.Close()
		body = zr
	default:
		return nil, errorf(http.StatusBadRequest, "Content-Encoding %q is not supported (gzip or identity)", textclip.Bytes(enc, maxEcho))
	}
	res, err := writeFile(r.Context(), c, dst, body)
	if err != nil {
		return nil, err
	}
	return []fileResult{res}, nil
}

func (h *filesHandler) uploadMultipart(r *http.Request, c caller, dst model.GuestPath, boundary string) ([]fileResult, error) {
	if boundary == "" {
		return nil, errorf(http.StatusBadRequest, "multipart/form-data without a boundary")
	}
	mr := multipart.NewReader(r.Body, boundary)
	var out []fileResult
	for {
		part, err := mr.NextRawPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, errorf(http.StatusBadRequest, "bad multipart body: %v", err)
		}
		d, err := parseDisposition(part.Header.Get("Content-Disposition"))
		if err != nil {
			return nil, errorf(http.StatusBadRequest, "part %d: %v", len(out)+1, err)
		}
		if d.Name != "file" {
			continue // other fields: not E2B's; NextRawPart skips the rest of the part
		}
		target := dst
		if target == "" {
			if !d.HasFile || d.FileName == "" {
				return nil, errorf(http.StatusBadRequest, "part %d has no filename and there is no path query parameter", len(out)+1)
			}
			if target, err = c.path(d.FileName); err != nil {
				return nil, err
			}
		}
		res, err := writeFile(r.Context(), c, target, part)
		if err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	if len(out) == 0 {
		return nil, errorf(http.StatusBadRequest, "no part named file in the multipart body")
	}
	return out, nil
}

// bodyReader remembers the error the request body failed with, to tell a
// bad upload from a failed write.
type bodyReader struct {
	r   io.Reader
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		b.err = err
	}
	return n, err
}

// writeFile creates dst's missing parents (the caller's, as E2B's envd
// makes them), streams r into dst (replacing it: a new file, without the
// metadata of the one it replaces) and sets the caller's metadata on it.
func writeFile(ctx context.Context, c caller, dst model.GuestPath, r io.Reader) (fileResult, error) {
	if err := c.mkdirParents(ctx, dst); err != nil {
		return fileResult{}, err
	}
	br := &bodyReader{r: r}
	fi, err := c.t.Native.Upload(ctx, c.t.Sandbox, dst, -1, br, c.as())
	if br.err != nil {
		var mbe *http.MaxBytesError
		if errors.As(br.err, &mbe) {
			return fileResult{}, errorf(http.StatusRequestEntityTooLarge, "upload of %s: %v", dst, br.err)
		}
		return fileResult{}, errorf(http.StatusBadRequest, "upload of %s: reading the request body: %v", dst, br.err)
	}
	if err != nil {
		return fileResult{}, nativeError(ctx, "upload "+dst.String(), err)
	}
	p := fi.Path
	if p == "" {
		p = dst.String()
	}
	res := fileResult{Path: p, Name: path.Base(p), Type: "file"}
	if len(c.meta) > 0 {
		fi, err := c.t.Native.SetFileMetadata(ctx, c.t.Sandbox, dst, c.meta, c.as())
		if err != nil {
			return fileResult{}, nativeError(ctx, "set the metadata of "+dst.String(), err)
		}
		res.Metadata = fi.Metadata
	}
	return res, nil
}
