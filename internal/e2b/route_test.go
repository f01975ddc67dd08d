package e2b

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/airlockdev/airlock/internal/model"
)

func TestRouteOf(t *testing.T) {
	sb := model.NewSandboxID()
	tests := []struct {
		name    string
		host    string
		headers map[string]string
		want    Route
		err     string // "" ok, "not" errNotSandbox, "bad" other error
	}{
		{"headers", "127.0.0.1:8080", map[string]string{headerSandboxID: sb.String(), headerSandboxPort: "49983"}, Route{sb, 49983}, ""},
		{"headers win over host", "3000-" + sb.String() + ".example.test", map[string]string{headerSandboxID: sb.String(), headerSandboxPort: "49999"}, Route{sb, 49999}, ""},
		{"host", "3000-" + sb.String() + ".sbx.test:8080", nil, Route{sb, 3000}, ""},
		{"host upper case id", "3000-" + toUpper(sb.String()) + ".sbx.test", nil, Route{sb, 3000}, ""},
		{"plain ip", "127.0.0.1:8080", nil, Route{}, "not"},
		{"localhost", "localhost:8080", nil, Route{}, "not"},
		{"name without dash", "api.example.test", nil, Route{}, "not"},
		{"first label not a port", "api-x.example.test", nil, Route{}, "not"},
		{"no domain", "3000-" + sb.String(), nil, Route{}, "not"},
		{"host bad id is not sandbox traffic", "3000-nope.example.test", nil, Route{}, "not"},
		{"dashed ip name", "10-0-0-5.sslip.io", nil, Route{}, "not"},
		{"header bad id", "h", map[string]string{headerSandboxID: "nope", headerSandboxPort: "1"}, Route{}, "bad"},
		{"header missing port", "h", map[string]string{headerSandboxID: sb.String()}, Route{}, "bad"},
		{"header port zero", "h", map[string]string{headerSandboxID: sb.String(), headerSandboxPort: "0"}, Route{}, "bad"},
		{"header port too big", "h", map[string]string{headerSandboxID: sb.String(), headerSandboxPort: "65536"}, Route{}, "bad"},
		{"header port leading zero", "h", map[string]string{headerSandboxID: sb.String(), headerSandboxPort: "080"}, Route{}, "bad"},
		{"header port sign", "h", map[string]string{headerSandboxID: sb.String(), headerSandboxPort: "+80"}, Route{}, "bad"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Host = tc.host
			for k, v := range tc.headers {
				r.Header.Set(k, v)
			}
			got, err := RouteOf(r, "")
			switch tc.err {
			case "":
				if err != nil || got != tc.want {
					t.Fatalf("RouteOf = %+v, %v; want %+v", got, err, tc.want)
				}
			case "not":
				if !errors.Is(err, errNotSandbox) {
					t.Fatalf("RouteOf = %+v, %v; want errNotSandbox", got, err)
				}
			default:
				if err == nil || errors.Is(err, errNotSandbox) {
					t.Fatalf("RouteOf = %+v, %v; want a malformed-request error", got, err)
				}
			}
		})
	}
}

func toUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

func FuzzRouteOf(f *testing.F) {
	f.Add("3000-sbx_abc.example.test", "", "")
	f.Add("h", model.NewSandboxID().String(), "49983")
	f.Fuzz(func(t *testing.T, host, id, port string) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Host = host
		if id != "" {
			r.Header.Set(headerSandboxID, id)
			r.Header.Set(headerSandboxPort, port)
		}
		got, err := RouteOf(r, "")
		if err != nil {
			return
		}
		if got.Port == 0 {
			t.Fatalf("port 0 accepted: %+v", got)
		}
		if _, err := model.ParseSandboxID(got.Sandbox.String()); err != nil {
			t.Fatalf("unparsable sandbox accepted: %+v", got)
		}
	})
}

func TestRouteOfDomain(t *testing.T) {
	sb := model.NewSandboxID()
	tests := []struct {
		host, domain string
		sandbox      bool
	}{
		{"3000-" + sb.String() + ".sbx.test", "sbx.test", true},
		{"3000-" + sb.String() + ".sbx.test:8080", "sbx.test:8080", true},
		{"3000-" + sb.String() + ".SBX.test:9", "sbx.test", true},
		{"3000-" + sb.String() + ".other.test", "sbx.test", false},
		{"3000-" + sb.String() + ".evil.sbx.test", "sbx.test", false},
		{"3000-" + sb.String() + ".other.test", "", true},
	}
	for _, tc := range tests {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Host = tc.host
		got, err := RouteOf(r, tc.domain)
		if tc.sandbox != (err == nil) || tc.sandbox && got != (Route{sb, 3000}) {
			t.Errorf("RouteOf(%q, domain %q) = %+v, %v; want sandbox traffic %v", tc.host, tc.domain, got, err, tc.sandbox)
		}
	}
}
