package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/textclip"
)

// APIError is an error response of the server. Code is one of the stable
// apiv1.Code… values; it is empty when the server (or a proxy in front of
// it) answered with something other than an apiv1.Error JSON body, and then
// Message says what came back instead.
type APIError struct {
	Status  int
	Code    string
	Message string
	// RetryAfter is the server's Retry-After (whole seconds) on a 429 or
	// 503, 0 when it sent none.
	RetryAfter time.Duration
}

// Error returns "message (code)", or just the message when there is no code.
func (e *APIError) Error() string {
	if e.Code == "" {
		return e.Message
	}
	return e.Message + " (" + e.Code + ")"
}

// IsCode reports whether err is an *APIError with the given code.
func IsCode(err error, code string) bool {
	var e *APIError
	return errors.As(err, &e) && e.Code == code
}

// readAPIError turns a non-2xx response into an *APIError.
func readAPIError(resp *http.Response) *APIError {
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	status := fmt.Sprintf("HTTP %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	if err != nil {
		return &APIError{Status: resp.StatusCode, Message: fmt.Sprintf("%s (reading the error body failed: %v)", status, err)}
	}
	e := decodeAPIError(resp.StatusCode, resp.Header.Get("Content-Type"), data)
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
		e.RetryAfter = time.Duration(secs) * time.Second
	}
	return e
}

// decodeAPIError decodes an apiv1.Error body. Anything else becomes an
// APIError without a code whose message shows the status and a bounded,
// printable excerpt of the body.
func decodeAPIError(status int, contentType string, body []byte) *APIError {
	var e apiv1.Error
	mt, _, _ := mime.ParseMediaType(contentType)
	isJSON := mt == "application/json" || strings.HasSuffix(mt, "+json")
	if err := json.Unmarshal(body, &e); err == nil && e.Code != "" {
		msg := e.Message
		if msg == "" {
			msg = fmt.Sprintf("HTTP %d %s", status, http.StatusText(status))
		}
		return &APIError{Status: status, Code: e.Code, Message: msg}
	}
	text := fmt.Sprintf("HTTP %d %s", status, http.StatusText(status))
	switch {
	case len(strings.TrimSpace(string(body))) == 0:
		text += " with an empty body"
	case isJSON:
		text += ": JSON error body without a code: " + excerpt(body)
	default:
		if mt == "" {
			mt = "no content type"
		}
		text += fmt.Sprintf(": non-JSON error body (%s): %s", mt, excerpt(body))
	}
	return &APIError{Status: status, Message: text}
}

// excerpt returns at most 200 bytes of b as a quoted, printable string (at
// most about 800 characters once escaped).
func excerpt(b []byte) string {
	const n = 200
	s := strings.TrimSpace(string(b))
	p := textclip.Prefix(s, n)
	q := fmt.Sprintf("%q", p)
	if len(p) < len(s) {
		q += textclip.Marker
	}
	return q
}

// retryableTransport reports whether a failure below HTTP may be transient:
// the server was down or restarting, or the connection broke or stalled.
// A retry carries the same Idempotency-Key, so it is safe even when the
// server did receive the first attempt.
func retryableTransport(err error) bool {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF):
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// OperationFailedError reports an operation that finished as failed.
type OperationFailedError struct {
	Operation apiv1.Operation
}

// Error says which operation failed and why.
func (e *OperationFailedError) Error() string {
	op := e.Operation
	what := fmt.Sprintf("operation %s (%s of %s) failed", op.ID, op.Kind, op.SandboxID)
	if op.Error == nil {
		return what + " without a reason"
	}
	if op.Error.Code == "" {
		return what + ": " + op.Error.Message
	}
	return what + ": " + op.Error.Message + " (" + op.Error.Code + ")"
}
