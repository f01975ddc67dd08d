package control

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
)

func TestOwns(t *testing.T) {
	tests := []struct {
		path string
		want bool
	}{
		{"/sandboxes", true},
		{"/sandboxes/sbx_x/pause", true},
		{"/v2/sandboxes", true},
		{"/v2/sandboxes/x/connect", true},
		{"/v3/templates", true},
		{"/templates/aliases/x", true},
		{"/snapshots", true},
		{"/volumes/v", true},
		{"/volumecontent/v/path", true},
		{"/secrets", true},
		{"/v1/sandboxes", false},
		{"/data/x", false},
		{"/healthz", false},
		{"/readyz", false},
		{"/openapi.json", false},
		{"/sandboxesx", false},
		{"/", false},
	}
	for _, tt := range tests {
		if got := Owns(tt.path); got != tt.want {
			t.Errorf("Owns(%q) = %v, want %v", tt.path, got, tt.want)
		}
	}
}

// newTestHandler returns a Handler whose native API is native, and a
// counter of Native calls.
func newTestHandler(t *testing.T, native http.Handler) (*Handler, *atomic.Int32) {
	t.Helper()
	srv := httptest.NewServer(native)
	t.Cleanup(srv.Close)
	var calls atomic.Int32
	h, err := New(Config{
		Native: func(key string) (*client.Client, error) {
			calls.Add(1)
			return client.New(srv.URL, key, client.WithHTTPClient(srv.Client()), client.WithRetries(0, 0))
		},
		AccessToken: func(context.Context, apiv1.Sandbox) (string, error) { return "test-only-token", nil },
		Domain:      "sbx.test:8080",
	})
	if err != nil {
		t.Fatal(err)
	}
	return h, &calls
}

func TestErrors(t *testing.T) {
	native := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Header.Get("Authorization") == "Bearer bad":
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(apiv1.Error{Code: apiv1.CodeUnauthenticated, Message: "unknown key"})
		case r.Header.Get("Authorization") == "Bearer limited":
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
			_ = json.NewEncoder(w).Encode(apiv1.Error{Code: apiv1.CodeRateLimited, Message: "slow down"})
		default:
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(apiv1.Error{Code: apiv1.CodeNotFound, Message: "sandbox not found"})
		}
	})
	h, calls := newTestHandler(t, native)
	tests := []struct {
		name, method, path, key, body string
		status                        int
		msg                           string
		nativeCalls                   int32
	}{
		{"no key", "GET", "/v2/sandboxes", "", "", 401, "missing X-API-Key", 0},
		{"bad key", "GET", "/v2/sandboxes", "bad", "", 401, "unknown key", 1},
		{"rate limited", "POST", "/sandboxes/sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa/pause", "limited", "", 429, "slow down", 1},
		{"missing", "GET", "/sandboxes/sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa", "k", "", 404, "not found", 1},
		{"malformed id", "DELETE", "/sandboxes/nope", "k", "", 404, "not found", 1},
		{"templates", "POST", "/v3/templates", "k", "{}", 501, "POST /v3/templates is not supported", 0},
		{"fork of a malformed id", "POST", "/sandboxes/x/fork", "k", "{}", 404, "not found", 1},
		{"network of a malformed id", "PUT", "/sandboxes/x/network", "k", "{}", 404, "not found", 1},
		{"network rules for an address", "PUT", "/sandboxes/sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa/network", "k", `{"rules":{"192.0.2.1":[{"transform":{"headers":{"X":"1"}}}]}}`, 501, "network.rules", 1},
		{"network deny by name", "PUT", "/sandboxes/sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa/network", "k", `{"denyOut":["a.example"]}`, 400, "denyOut", 1},
		{"template delete", "DELETE", "/templates/base", "k", "", 501, "only snapshots", 1},
		{"wrong method", "DELETE", "/v2/sandboxes", "k", "", 501, "not supported", 0},
		{"not e2b", "GET", "/v1/sandboxes", "k", "", 404, "not an E2B API path", 0},
		{"bad json", "POST", "/v2/sandboxes", "k", "{", 400, "not valid JSON", 1},
		{"too large", "POST", "/v2/sandboxes", "k", `{"templateID":"` + strings.Repeat("a", maxBody) + `"}`, 413, "larger than", 1},
		{"bad list query", "GET", "/v2/sandboxes?limit=0", "k", "", 400, "limit", 1},
		{"unsupported create", "POST", "/sandboxes", "k", `{"templateID":"base","iam":{}}`, 501, "iam", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := calls.Load()
			req := httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body))
			if tt.key != "" {
				req.Header.Set("X-API-Key", tt.key)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.status, rec.Body)
			}
			var e errorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
				t.Fatalf("body %q: %v", rec.Body, err)
			}
			if e.Code != tt.status || !strings.Contains(e.Message, tt.msg) {
				t.Fatalf("body %+v, want code %d and %q", e, tt.status, tt.msg)
			}
			if ra := rec.Header().Get("Retry-After"); (tt.status == 429) != (ra == "7") {
				t.Fatalf("Retry-After %q on a %d", ra, tt.status)
			}
			if n := calls.Load() - before; n != tt.nativeCalls {
				t.Fatalf("%d native clients made, want %d", n, tt.nativeCalls)
			}
		})
	}
}
