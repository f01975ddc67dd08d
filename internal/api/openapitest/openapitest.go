// Package openapitest checks HTTP exchanges against an OpenAPI 3.1 document
// so that a test suite fails when the server and its document drift apart.
// Wrap a test's HTTP client with (*Validator).Client: every request and
// every response it carries is validated (path, parameters, security, body,
// status, headers, content type and body), and any mismatch fails the test.
//
// It uses github.com/getkin/kin-openapi, whose openapi3filter validates
// OpenAPI 3.1 documents with a JSON Schema 2020-12 validator (type arrays,
// const, prefixItems, numeric exclusive bounds, propertyNames).
package openapitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/airlockdev/airlock/internal/textclip"
)

// Validator validates requests and responses against one document.
type Validator struct {
	doc    *openapi3.T
	router routers.Router
	errRef *openapi3.SchemaRef // components/schemas/Error, for unrouted answers
}

// New loads and validates an OpenAPI 3.1 document. The document must define
// components/schemas/Error, the body of answers to unknown routes.
func New(ctx context.Context, document []byte) (*Validator, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(document)
	if err != nil {
		return nil, fmt.Errorf("load OpenAPI document: %w", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		return nil, fmt.Errorf("OpenAPI document is version %s, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(ctx, openapi3.EnableSchemaPatternValidation(), openapi3.EnableSchemaFormatValidation()); err != nil {
		return nil, fmt.Errorf("invalid OpenAPI document: %w", err)
	}
	errRef := doc.Components.Schemas["Error"]
	if errRef == nil || errRef.Value == nil {
		return nil, errors.New("OpenAPI document has no components/schemas/Error")
	}
	// The router matches on the request's path only: drop the servers list.
	doc.Servers = nil
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route OpenAPI document: %w", err)
	}
	return &Validator{doc: doc, router: router, errRef: errRef}, nil
}

// Document returns the loaded document.
func (v *Validator) Document() *openapi3.T { return v.doc }

type expectInvalidKey struct{}

type testKey struct{}

// WithTest makes the Client report mismatches of the requests made with ctx
// to t (a subtest, say) instead of the test the Client was made for.
func WithTest(ctx context.Context, t testing.TB) context.Context {
	return context.WithValue(ctx, testKey{}, t)
}

// ExpectInvalidRequest marks the requests made with ctx as ones the document
// must reject (a test of bad input): the Validator then fails the test if
// the document accepts the request, and still validates the response.
func ExpectInvalidRequest(ctx context.Context) context.Context {
	return context.WithValue(ctx, expectInvalidKey{}, true)
}

func expectsInvalid(ctx context.Context) bool {
	b, _ := ctx.Value(expectInvalidKey{}).(bool)
	return b
}

// options are the filter options: strict about statuses and bodies,
// never altering the request (no defaults filled in).
func options() *openapi3filter.Options {
	return &openapi3filter.Options{
		IncludeResponseStatus:             true,
		RejectWhenRequestBodyNotSpecified: true,
		SkipSettingDefaults:               true,
		MultiError:                        true,
		AuthenticationFunc:                authenticate,
	}
}

// authenticate checks only that the credential the scheme names is present
// in the right shape; whether it is valid is the server's business.
func authenticate(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	scheme := in.SecurityScheme
	r := in.RequestValidationInput.Request
	switch {
	case scheme.Type == "http" && strings.EqualFold(scheme.Scheme, "bearer"):
		kind, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		if !ok || !strings.EqualFold(kind, "Bearer") || token == "" {
			return errors.New("no Bearer credential in Authorization")
		}
		return nil
	case scheme.Type == "apiKey" && scheme.In == "cookie":
		if c, err := r.Cookie(scheme.Name); err != nil || c.Value == "" {
			return fmt.Errorf("no %s cookie", scheme.Name)
		}
		return nil
	case scheme.Type == "apiKey" && scheme.In == "query":
		if r.URL.Query().Get(scheme.Name) == "" {
			return fmt.Errorf("no %s query parameter", scheme.Name)
		}
		return nil
	}
	return fmt.Errorf("unsupported security scheme %s/%s", scheme.Type, scheme.Scheme)
}

// Exchange is the outcome of validating one request.
type Exchange struct {
	input    *openapi3filter.RequestValidationInput // nil if no route matched
	RouteErr error                                  // no documented route matched
	ReqErr   error                                  // the request does not match its operation
}

// Route returns the documented path template and method, if one matched.
func (e *Exchange) Route() (method, path string, ok bool) {
	if e.input == nil {
		return "", "", false
	}
	return e.input.Route.Method, e.input.Route.Path, true
}

// CheckRequest validates req, whose body is given separately (req.Body is
// not read).
func (v *Validator) CheckRequest(ctx context.Context, req *http.Request, body []byte) *Exchange {
	clone := req.Clone(ctx)
	clone.Body = io.NopCloser(bytes.NewReader(body))
	clone.ContentLength = int64(len(body))
	route, params, err := v.router.FindRoute(clone)
	if err != nil {
		return &Exchange{RouteErr: fmt.Errorf("%s %s is not in the document: %w", req.Method, req.URL.Path, err)}
	}
	in := &openapi3filter.RequestValidationInput{Request: clone, PathParams: params, Route: route, Options: options()}
	return &Exchange{input: in, ReqErr: openapi3filter.ValidateRequest(ctx, in)}
}

// CheckResponse validates a response to the request of ex. Without a
// matched route the response must be a documented error (404 or 405) with
// an Error body. An event stream's body is not read (pass nil).
func (v *Validator) CheckResponse(ctx context.Context, ex *Exchange, status int, header http.Header, body []byte) error {
	if ex.input == nil {
		if status != http.StatusNotFound && status != http.StatusMethodNotAllowed {
			return fmt.Errorf("unrouted request answered %d, want 404 or 405", status)
		}
		return v.checkErrorBody(header, body)
	}
	opts := options()
	if isEventStream(header) {
		opts.ExcludeResponseBody = true
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: ex.input,
		Status:                 status,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                opts,
	}
	return openapi3filter.ValidateResponse(ctx, out)
}

func (v *Validator) checkErrorBody(header http.Header, body []byte) error {
	if mt, _, _ := mime.ParseMediaType(header.Get("Content-Type")); mt != "application/json" {
		return fmt.Errorf("error response has Content-Type %q, want application/json", header.Get("Content-Type"))
	}
	var val any
	if err := json.Unmarshal(body, &val); err != nil {
		return fmt.Errorf("error response is not JSON: %w", err)
	}
	if err := v.errRef.Value.VisitJSON(val, openapi3.EnableJSONSchema2020()); err != nil {
		return fmt.Errorf("error response does not match components/schemas/Error: %w", err)
	}
	return nil
}

func isEventStream(h http.Header) bool {
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	return mt == "text/event-stream"
}

// Client returns an HTTP client whose every exchange is validated; any
// mismatch fails t (with t.Errorf, so the test goes on and shows the rest).
// Base nil means http.DefaultTransport.
func (v *Validator) Client(t testing.TB, base http.RoundTripper) *http.Client {
	if base == nil {
		base = http.DefaultTransport
	}
	return &http.Client{Transport: &transport{t: t, v: v, base: base}}
}

type transport struct {
	t    testing.TB
	v    *Validator
	base http.RoundTripper
}

func (tr *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	t := tr.t
	if sub, ok := ctx.Value(testKey{}).(testing.TB); ok {
		t = sub
	}
	var body []byte
	if req.Body != nil {
		var err error
		body, err = io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("openapitest: read request body: %w", err)
		}
	}
	ex := tr.v.CheckRequest(context.WithoutCancel(ctx), req, body)
	what := req.Method + " " + req.URL.RequestURI()
	invalid := ex.RouteErr != nil || ex.ReqErr != nil
	switch {
	case expectsInvalid(ctx) && !invalid:
		t.Errorf("openapitest: %s: the test sends it as invalid, but the OpenAPI document accepts it", what)
	case !expectsInvalid(ctx) && ex.RouteErr != nil:
		t.Errorf("openapitest: %v", ex.RouteErr)
	case !expectsInvalid(ctx) && ex.ReqErr != nil:
		t.Errorf("openapitest: request %s does not match the OpenAPI document: %v", what, ex.ReqErr)
	}

	out := req.Clone(ctx)
	out.Body = io.NopCloser(bytes.NewReader(body))
	if req.ContentLength <= 0 && len(body) > 0 {
		out.ContentLength = -1 // the caller's length was unknown: keep it so (chunked)
	} else {
		out.ContentLength = int64(len(body))
	}
	if len(body) == 0 {
		out.Body = http.NoBody
	}
	resp, err := tr.base.RoundTrip(out)
	if err != nil {
		return nil, err
	}
	if isEventStream(resp.Header) {
		if err := tr.v.CheckResponse(context.WithoutCancel(ctx), ex, resp.StatusCode, resp.Header, nil); err != nil {
			t.Errorf("openapitest: response to %s does not match the OpenAPI document: %v", what, err)
		}
		return resp, nil
	}
	respBody, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("openapitest: read response body: %w", err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(respBody))
	if req.Method != http.MethodHead {
		if err := tr.v.CheckResponse(context.WithoutCancel(ctx), ex, resp.StatusCode, resp.Header, respBody); err != nil {
			t.Errorf("openapitest: response to %s does not match the OpenAPI document: %v\nstatus %d, body: %s",
				what, err, resp.StatusCode, textclip.Bytes(string(respBody), 2000))
		}
	}
	return resp, nil
}
