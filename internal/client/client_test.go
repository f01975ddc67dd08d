package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// hijackClose drops the connection without an HTTP response, as a server
// that crashes mid-request does.
func hijackClose(t *testing.T, w http.ResponseWriter) {
	t.Helper()
	hj, ok := w.(http.Hijacker)
	if !ok {
		t.Error("response writer cannot hijack")
		return
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		t.Error(err)
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // RST, not FIN
	}
	conn.Close()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func newTestClient(t *testing.T, url string, opts ...Option) *Client {
	t.Helper()
	opts = append([]Option{WithRetries(4, time.Millisecond)}, opts...)
	c, err := New(url, "key_test.secret", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type recorded struct {
	mu   sync.Mutex
	keys []string
}

func (r *recorded) add(k string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = append(r.keys, k)
	return len(r.keys)
}

func (r *recorded) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.keys...)
}

func TestRetrySameIdempotencyKey(t *testing.T) {
	sbx := model.NewSandboxID()
	op := model.NewOperationID()
	for _, failure := range []string{"dropped connection", "503", "502 without JSON"} {
		t.Run(failure, func(t *testing.T) {
			var rec recorded
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPost || r.URL.Path != "/v1/sandboxes" {
					http.NotFound(w, r)
					return
				}
				if got := r.Header.Get("Authorization"); got != "Bearer key_test.secret" {
					t.Errorf("Authorization = %q", got)
				}
				var req apiv1.CreateSandboxRequest
				if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Template != "default" {
					t.Errorf("body %+v, %v", req, err)
				}
				n := rec.add(r.Header.Get("Idempotency-Key"))
				if n <= 2 {
					switch failure {
					case "dropped connection":
						hijackClose(t, w)
					case "503":
						w.Header().Set("Retry-After", "0")
						writeJSON(w, 503, apiv1.Error{Code: apiv1.CodeUnavailable, Message: "starting"})
					default:
						w.WriteHeader(502)
						_, _ = io.WriteString(w, "<html>bad gateway</html>")
					}
					return
				}
				writeJSON(w, 202, apiv1.SandboxWithOperation{
					Sandbox:   apiv1.Sandbox{ID: sbx.String(), State: "pending"},
					Operation: apiv1.Operation{ID: op.String(), Kind: "create", State: "pending", SandboxID: sbx.String()},
				})
			}))
			defer srv.Close()
			c := newTestClient(t, srv.URL)
			got, err := c.CreateSandbox(context.Background(), apiv1.CreateSandboxRequest{Template: "default"})
			if err != nil {
				t.Fatal(err)
			}
			if got.Sandbox.ID != sbx.String() || got.Operation.ID != op.String() {
				t.Fatalf("got %+v", got)
			}
			keys := rec.all()
			if len(keys) != 3 {
				t.Fatalf("%d attempts, want 3", len(keys))
			}
			if _, err := model.ParseIdempotencyKey(keys[0]); err != nil {
				t.Fatalf("key %q: %v", keys[0], err)
			}
			for _, k := range keys {
				if k != keys[0] {
					t.Fatalf("retries used different keys: %q", keys)
				}
			}
			// A new call gets a new key.
			if _, err := c.CreateSandbox(context.Background(), apiv1.CreateSandboxRequest{Template: "default"}); err != nil {
				t.Fatal(err)
			}
			if keys := rec.all(); keys[3] == keys[0] {
				t.Fatalf("second call reused key %q", keys[0])
			}
		})
	}
}

func TestRetriesGiveUp(t *testing.T) {
	var rec recorded
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(r.Header.Get("Idempotency-Key"))
		writeJSON(w, 503, apiv1.Error{Code: apiv1.CodeUnavailable, Message: "draining"})
	}))
	defer srv.Close()
	c := newTestClient(t, srv.URL, WithRetries(2, time.Millisecond))
	_, err := c.DeleteSandbox(context.Background(), model.NewSandboxID())
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 503 || apiErr.Code != apiv1.CodeUnavailable {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(err.Error(), "gave up after 3 attempts") {
		t.Errorf("err = %q, want the attempt count", err)
	}
	if n := len(rec.all()); n != 3 {
		t.Errorf("%d attempts, want 3", n)
	}
}

func TestNoRetryOnClientErrors(t *testing.T) {
	var rec recorded
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(r.Header.Get("Idempotency-Key"))
		writeJSON(w, 409, apiv1.Error{Code: apiv1.CodeIdempotencyKeyReused, Message: "different request"})
	}))
	defer srv.Close()
	c := newTestClient(t, srv.URL)
	_, err := c.CreateSandbox(context.Background(), apiv1.CreateSandboxRequest{})
	if !IsCode(err, apiv1.CodeIdempotencyKeyReused) {
		t.Fatalf("err = %v", err)
	}
	if n := len(rec.all()); n != 1 {
		t.Errorf("%d attempts, want 1", n)
	}
}

func TestConnectionRefusedIsRetriedThenReported(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := newTestClient(t, "http://"+addr, WithRetries(2, time.Millisecond))
	_, err = c.GetSandbox(context.Background(), model.NewSandboxID())
	if err == nil || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), "3 attempts") {
		t.Fatalf("err = %v", err)
	}
}

func TestAPIErrorDecoding(t *testing.T) {
	tests := []struct {
		name        string
		status      int
		contentType string
		body        string
		wantCode    string
		wantMsg     string
	}{
		{"json", 404, "application/json", `{"code":"not_found","message":"no sandbox sbx_x"}`, "not_found", "no sandbox sbx_x"},
		{"json without content type", 400, "", `{"code":"invalid_request","message":"bad"}`, "invalid_request", "bad"},
		{"json without message", 401, "application/json", `{"code":"unauthenticated"}`, "unauthenticated", "HTTP 401 Unauthorized"},
		{"html", 500, "text/html", "<h1>oops</h1>", "", `HTTP 500 Internal Server Error: non-JSON error body (text/html): "<h1>oops</h1>"`},
		{"plain text", 404, "text/plain; charset=utf-8", "404 page not found\n", "", `HTTP 404 Not Found: non-JSON error body (text/plain): "404 page not found"`},
		{"empty", 403, "", "", "", "HTTP 403 Forbidden with an empty body"},
		{"json of another shape", 400, "application/json", `{"error":"x"}`, "", `HTTP 400 Bad Request: JSON error body without a code: "{\"error\":\"x\"}"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.contentType != "" {
					w.Header().Set("Content-Type", tt.contentType)
				} else {
					w.Header()["Content-Type"] = nil
				}
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			_, err := newTestClient(t, srv.URL).GetSandbox(context.Background(), model.NewSandboxID())
			var apiErr *APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("err = %v (%T), want *APIError", err, err)
			}
			if apiErr.Status != tt.status || apiErr.Code != tt.wantCode || apiErr.Message != tt.wantMsg {
				t.Fatalf("got %+v, want status %d code %q message %q", apiErr, tt.status, tt.wantCode, tt.wantMsg)
			}
		})
	}
	long := decodeAPIError(500, "text/plain", []byte(strings.Repeat("x", 5000)))
	if len(long.Message) > 300 || !strings.HasSuffix(long.Message, "…") {
		t.Errorf("long body message not bounded: %d bytes", len(long.Message))
	}
	if got := (&APIError{Code: "not_found", Message: "gone"}).Error(); got != "gone (not_found)" {
		t.Errorf("Error() = %q", got)
	}
}

func TestBadSuccessBodies(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/templates":
			_, _ = io.WriteString(w, "not json")
		case "/v1/admin/projects":
			w.WriteHeader(200)
		default:
			w.Header().Set("Location", "http://elsewhere.invalid/")
			w.WriteHeader(http.StatusFound)
		}
	}))
	defer srv.Close()
	c := newTestClient(t, srv.URL)
	ctx := context.Background()
	if _, err := c.ListTemplates(ctx); err == nil || !strings.Contains(err.Error(), "decoding HTTP 200 response") {
		t.Errorf("non-JSON success: err = %v", err)
	}
	if _, err := c.ListProjects(ctx); err == nil || !strings.Contains(err.Error(), "empty body") {
		t.Errorf("empty success: err = %v", err)
	}
	if _, err := c.ListSandboxes(ctx, ListSandboxesQuery{}); err == nil || !strings.Contains(err.Error(), "302") {
		t.Errorf("redirect: err = %v", err)
	}
}

func TestRequestShapes(t *testing.T) {
	type seen struct{ method, uri, key string }
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, seen{r.Method, r.URL.RequestURI(), r.Header.Get("Idempotency-Key")})
		mu.Unlock()
		switch {
		case r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, "/v1/admin/keys/"):
			w.WriteHeader(http.StatusNoContent)
		default:
			writeJSON(w, 200, map[string]any{})
		}
	}))
	defer srv.Close()
	c := newTestClient(t, srv.URL+"/")
	ctx := context.Background()
	sbx, op, prj, key := model.NewSandboxID(), model.NewOperationID(), model.NewProjectID(), model.NewAPIKeyID()
	bld := model.NewBuildID()
	calls := []struct {
		call     func() error
		method   string
		uri      string
		mutating bool
	}{
		{func() error {
			_, err := c.ListSandboxes(ctx, ListSandboxesQuery{
				States:   []model.SandboxState{model.StateRunning, model.StateFailed},
				Metadata: []MetadataFilter{{"team", "a b"}, {"x/y", "1=2"}},
				Limit:    5, Cursor: "abc",
			})
			return err
		}, "GET", "/v1/sandboxes?cursor=abc&limit=5&metadata=team%3Da+b&metadata=x%2Fy%3D1%3D2&state=running&state=failed", false},
		{func() error { _, err := c.GetSandbox(ctx, sbx); return err }, "GET", "/v1/sandboxes/" + sbx.String(), false},
		{func() error { _, err := c.DeleteSandbox(ctx, sbx); return err }, "DELETE", "/v1/sandboxes/" + sbx.String(), true},
		{func() error {
			_, err := c.CreateCommand(ctx, sbx, apiv1.CreateCommandRequest{Args: []string{"true"}})
			return err
		}, "POST", "/v1/sandboxes/" + sbx.String() + "/commands", true},
		{func() error { _, err := c.GetOperation(ctx, op, 0); return err }, "GET", "/v1/operations/" + op.String(), false},
		{func() error { _, err := c.GetOperation(ctx, op, 30*time.Second); return err }, "GET", "/v1/operations/" + op.String() + "?wait=30s", false},
		{func() error { _, err := c.ListTemplates(ctx); return err }, "GET", "/v1/templates", false},
		{func() error { _, err := c.GetBuild(ctx, bld); return err }, "GET", "/v1/builds/" + bld.String(), false},
		{func() error {
			_, err := c.ListBuilds(ctx, BuildFilter{Name: "default", State: "active", Limit: 1})
			return err
		}, "GET", "/v1/builds?limit=1&name=default&state=active", false},
		{func() error {
			_, err := c.ImportTemplate(ctx, apiv1.ImportTemplateRequest{Source: "/srv/rootfs"})
			return err
		}, "POST", "/v1/templates", true},
		{func() error { _, err := c.CreateProject(ctx, "team-a"); return err }, "POST", "/v1/admin/projects", true},
		{func() error { _, err := c.ListProjects(ctx); return err }, "GET", "/v1/admin/projects", false},
		{func() error {
			_, err := c.CreateAPIKey(ctx, apiv1.CreateAPIKeyRequest{ProjectID: prj.String(), Role: "member"})
			return err
		}, "POST", "/v1/admin/keys", true},
		{func() error { _, err := c.ListAPIKeys(ctx, ""); return err }, "GET", "/v1/admin/keys", false},
		{func() error { _, err := c.ListAPIKeys(ctx, prj); return err }, "GET", "/v1/admin/keys?project_id=" + prj.String(), false},
		{func() error { _, err := c.RevokeAPIKey(ctx, key); return err }, "DELETE", "/v1/admin/keys/" + key.String(), true},
	}
	for i, call := range calls {
		if err := call.call(); err != nil {
			t.Fatalf("call %d (%s %s): %v", i, call.method, call.uri, err)
		}
		mu.Lock()
		g := got[len(got)-1]
		mu.Unlock()
		if g.method != call.method || g.uri != call.uri {
			t.Errorf("call %d: %s %s, want %s %s", i, g.method, g.uri, call.method, call.uri)
		}
		if (g.key != "") != call.mutating {
			t.Errorf("call %d: Idempotency-Key %q, mutating %v", i, g.key, call.mutating)
		}
	}
}

func TestListAllSandboxesFollowsCursors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cur := r.URL.Query().Get("cursor")
		if r.URL.Query().Get("state") != "running" {
			t.Errorf("filter lost on page %q: %s", cur, r.URL.RawQuery)
		}
		next := map[string]string{"": "p2", "p2": "p3", "p3": ""}[cur]
		writeJSON(w, 200, apiv1.SandboxList{Sandboxes: []apiv1.Sandbox{{ID: "page-" + cur}}, NextCursor: next})
	}))
	defer srv.Close()
	c := newTestClient(t, srv.URL)
	all, err := c.ListAllSandboxes(context.Background(), ListSandboxesQuery{States: []model.SandboxState{model.StateRunning}})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Sandboxes) != 3 || all.Sandboxes[2].ID != "page-p3" || all.NextCursor != "" {
		t.Fatalf("got %+v", all)
	}
}

func TestWaitOperation(t *testing.T) {
	op := model.NewOperationID()
	for _, final := range []string{"succeeded", "failed"} {
		t.Run(final, func(t *testing.T) {
			var mu sync.Mutex
			polls := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Query().Get("wait") != "50ms" {
					t.Errorf("wait = %q", r.URL.Query().Get("wait"))
				}
				mu.Lock()
				polls++
				n := polls
				mu.Unlock()
				o := apiv1.Operation{ID: op.String(), Kind: "create", SandboxID: "sbx_x", State: "pending"}
				switch {
				case n == 2:
					o.State = "running"
				case n >= 3:
					o.State = final
					if final == "failed" {
						o.Error = &apiv1.Error{Code: "runtime_error", Message: "runsc: boom"}
					}
				}
				writeJSON(w, 200, o)
			}))
			defer srv.Close()
			c := newTestClient(t, srv.URL)
			var progress []string
			got, err := c.WaitOperation(context.Background(), op, WithPollWait(50*time.Millisecond),
				WithProgress(func(o apiv1.Operation) { progress = append(progress, o.State) }))
			if got.State != final {
				t.Fatalf("state %q, want %q", got.State, final)
			}
			if strings.Join(progress, ",") != "pending,running" {
				t.Errorf("progress %v", progress)
			}
			var failed *OperationFailedError
			switch final {
			case "succeeded":
				if err != nil {
					t.Fatal(err)
				}
			case "failed":
				if !errors.As(err, &failed) || !strings.Contains(err.Error(), "runsc: boom (runtime_error)") {
					t.Fatalf("err = %v", err)
				}
			}
		})
	}
}

func TestWaitOperationContextEnds(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, apiv1.Operation{ID: "op_x", State: "running"}) // never holds, never finishes
	}))
	defer srv.Close()
	c := newTestClient(t, srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	got, err := c.WaitOperation(ctx, model.NewOperationID(), WithPollWait(10*time.Second))
	if !errors.Is(err, context.DeadlineExceeded) || got.State != "running" {
		t.Fatalf("got %+v, %v", got, err)
	}
	if time.Since(start) > 3*time.Second {
		t.Fatalf("took %v", time.Since(start))
	}
}

func TestNewValidatesURL(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:7070", "ftp://x", "http://", "http://x/?a=b", "http://u:p@x"} {
		if _, err := New(u, "k"); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
	c, err := New(" http://127.0.0.1:7070/base/ ", "k")
	if err != nil || c.BaseURL() != "http://127.0.0.1:7070/base" {
		t.Fatalf("%v, %v", c, err)
	}
	if _, err := New("http://x", "two words"); err == nil {
		t.Error("key with whitespace accepted")
	}
}

func ExampleAPIError() {
	err := error(&APIError{Status: 404, Code: apiv1.CodeNotFound, Message: "sandbox sbx_x not found"})
	fmt.Println(err, IsCode(err, apiv1.CodeNotFound))
	// Output: sandbox sbx_x not found (not_found) true
}

func FuzzDecodeAPIError(f *testing.F) {
	f.Add(404, "application/json", []byte(`{"code":"not_found","message":"x"}`))
	f.Add(502, "text/html", []byte("<html>"))
	f.Add(500, "", []byte(""))
	f.Add(400, "application/problem+json", []byte(`{"code":1}`))
	f.Fuzz(func(t *testing.T, status int, ct string, body []byte) {
		e := decodeAPIError(status, ct, body)
		if e == nil || e.Status != status || e.Message == "" {
			t.Fatalf("decodeAPIError = %+v", e)
		}
		if e.Code == "" && len(e.Message) > 1000 {
			t.Fatalf("unbounded message: %d bytes", len(e.Message))
		}
	})
}

func TestExcerptCutsAtCharacterBoundary(t *testing.T) {
	body := strings.Repeat("a", 199) + "é" + strings.Repeat("b", 50) // é straddles byte 200
	got := excerpt([]byte(body))
	if want := fmt.Sprintf("%q…", strings.Repeat("a", 199)); got != want {
		t.Errorf("excerpt = %s, want %s", got, want)
	}
}

func TestExplicitIdempotencyKey(t *testing.T) {
	var rec recorded
	sbx := model.NewSandboxID()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(r.Header.Get("Idempotency-Key"))
		writeJSON(w, 202, apiv1.OperationResponse{Operation: apiv1.Operation{ID: model.NewOperationID().String(), Kind: "delete", State: "pending", SandboxID: sbx.String()}})
	}))
	defer srv.Close()
	c := newTestClient(t, srv.URL)
	ctx := WithIdempotencyKey(context.Background(), "my-key-1")
	for i := 0; i < 2; i++ {
		if _, err := c.DeleteSandbox(ctx, sbx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.DeleteSandbox(context.Background(), sbx); err != nil {
		t.Fatal(err)
	}
	keys := rec.all()
	if len(keys) != 3 || keys[0] != "my-key-1" || keys[1] != "my-key-1" || keys[2] == "my-key-1" || keys[2] == "" {
		t.Fatalf("keys %q: want the explicit key twice, then a fresh one", keys)
	}
}
