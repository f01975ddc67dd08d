package api

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/api/openapitest"
)

func TestReadBodyLimit(t *testing.T) {
	t.Parallel()
	const limit = 16
	for _, c := range []struct {
		name    string
		body    string
		chunked bool
		status  int // 0: accepted
	}{
		{"at the limit", strings.Repeat("a", limit), false, 0},
		{"over the limit", strings.Repeat("a", limit+1), false, http.StatusRequestEntityTooLarge},
		{"chunked at the limit", strings.Repeat("a", limit), true, 0},
		{"chunked over the limit", strings.Repeat("a", 10*limit), true, http.StatusRequestEntityTooLarge},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/", strings.NewReader(c.body))
			r.Header.Set("Content-Type", "application/json; charset=UTF-8")
			if c.chunked {
				r.ContentLength = -1
				r.Body = io.NopCloser(strings.NewReader(c.body))
			}
			b, err := readBody(r, limit)
			var ae *apiError
			switch {
			case c.status == 0 && (err != nil || string(b) != c.body):
				t.Fatalf("readBody = %q, %v", b, err)
			case c.status != 0 && (!errors.As(err, &ae) || ae.status != c.status):
				t.Fatalf("readBody error %v, want status %d", err, c.status)
			}
		})
	}
}

// TestChunkedOversizeBody: a body without Content-Length is cut at the limit too.
func TestChunkedOversizeBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *envConfig) { c.MaxBodyBytes = 1024 })
	before := e.dump()
	hr, err := http.NewRequest("POST", e.srv.URL+"/v1/sandboxes", io.NopCloser(strings.NewReader(`{"metadata": {"k": "`+strings.Repeat("x", 4096)+`"}}`)))
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Authorization", "Bearer "+e.keyA)
	hr = hr.WithContext(openapitest.ExpectInvalidRequest(hr.Context()))
	res, err := e.client.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	r := &resp{status: res.StatusCode, header: res.Header, body: b}
	r.wantError(t, http.StatusRequestEntityTooLarge, "payload_too_large")
	if e.dump() != before {
		t.Fatal("an oversize body changed the store")
	}
}
