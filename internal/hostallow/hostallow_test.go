package hostallow

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

func TestAllows(t *testing.T) {
	t.Parallel()
	l, err := Parse([]string{"airlock.example.com", "*.corp.example", "Svc.NS.", "10.0.0.9"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host string
		want bool
	}{
		// What every list allows.
		{"", true},
		{"127.0.0.1:7070", true},
		{"127.0.0.1", true},
		{"10.1.2.3:7070", true}, // a pod IP (Kubernetes probes)
		{"[::1]:7070", true},
		{"[fd00::5]", true},
		{"::1", true},
		{"localhost:7070", true},
		{"LOCALHOST", true},
		{"app.localhost:7070", true},
		// The list's names.
		{"airlock.example.com", true},
		{"AIRLOCK.example.com.:443", true},
		{"svc.ns:7070", true},
		{"x.corp.example", true},
		{"a.b.corp.example:8080", true},
		// DNS rebinding: the attacker's names.
		{"corp.example", false}, // *.domain is not the domain itself
		{"rebind.attacker.example:7070", false},
		{"airlock.example.com.attacker.example", false},
		{"evilairlock.example.com", false},
		{"xcorp.example", false},
		{"localhost.attacker.example", false},
		{"127.0.0.1.nip.io:7070", false},
		{"bad host", false},
		{"a..b", false},
		{"[::1", false},
	} {
		if got := l.Allows(tc.host); got != tc.want {
			t.Errorf("Allows(%q) = %v, want %v", tc.host, got, tc.want)
		}
	}
	anyHost, err := Parse([]string{"*"})
	if err != nil || !anyHost.Allows("rebind.attacker.example") {
		t.Fatalf("* allows nothing more: %v", err)
	}
	var zero List
	if zero.Allows("airlock.example.com") || !zero.Allows("127.0.0.1:1") {
		t.Fatal("the zero List")
	}
}

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", "a b", "*.", "**.x", "x.*", "http://x", "a..b", "-", "x/y"} {
		if _, err := Parse([]string{p}); !errors.Is(err, model.ErrInvalid) {
			t.Errorf("Parse(%q) = %v, want ErrInvalid", p, err)
		}
	}
}

// TestHandlerRefusesRebinding: a request whose Host is not allowed never
// reaches the routes; it gets 421 host_not_allowed in JSON.
func TestHandlerRefusesRebinding(t *testing.T) {
	t.Parallel()
	l, err := Parse([]string{"airlock.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	reached := 0
	h := Handler(l, func(host string) bool { return host == "3000-sbx.anything" }, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached++
		w.WriteHeader(http.StatusOK)
	}))
	for _, tc := range []struct {
		host   string
		status int
	}{
		{"airlock.example.com:7070", 200},
		{"127.0.0.1:7070", 200},
		{"3000-sbx.anything", 200},
		{"rebind.attacker.example:7070", 421},
	} {
		reached = 0
		r := httptest.NewRequest("GET", "/healthz", nil)
		r.Host = tc.host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.status {
			t.Fatalf("%s: %d, want %d", tc.host, w.Code, tc.status)
		}
		if tc.status != 200 {
			var e apiv1.Error
			if reached != 0 || json.Unmarshal(w.Body.Bytes(), &e) != nil || e.Code != apiv1.CodeHostNotAllowed || e.Message == "" ||
				w.Header().Get("Content-Type") != "application/json" {
				t.Fatalf("%s: reached %d, %s %q", tc.host, reached, w.Header().Get("Content-Type"), w.Body)
			}
		}
	}
}
