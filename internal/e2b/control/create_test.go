package control

import (
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"

	"github.com/airlockdev/airlock/internal/model"
)

func TestParseCreate(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		status int // 0: accepted
		check  func(t *testing.T, s createSpec)
	}{
		{"sdk default", `{"templateID":"base"}`, 0, func(t *testing.T, s createSpec) {
			n := s.native
			if n.Template != "default" || s.e2bTemplate != "base" || n.Timeout != 300 || n.OnTimeout != "delete" || n.Egress != nil {
				t.Fatalf("%+v", n)
			}
			if n.IdleTimeout != nil || n.Metadata[templateKey] != "base" || !n.PublicPorts { // the server's idle limit; public ports, as on E2B
				t.Fatalf("%+v", n)
			}
		}},
		{"code interpreter", `{"templateID":"code-interpreter-v1","timeout":60,"autoPause":true,"metadata":{"a":"b"},"envVars":{"X":"1"}}`, 0, func(t *testing.T, s createSpec) {
			n := s.native
			if n.Template != "code-interpreter" || n.Timeout != 60 || n.OnTimeout != "suspend" || n.Metadata["a"] != "b" || n.Env["X"] != "1" {
				t.Fatalf("%+v", n)
			}
		}},
		{"other template", `{"templateID":"python:3.12","secure":true,"autoResume":{"enabled":true},"volumeMounts":[]}`, 0, func(t *testing.T, s createSpec) {
			if s.native.Template != "python:3.12" {
				t.Fatalf("%+v", s.native)
			}
		}},
		{"timeout 0 ends now", `{"templateID":"base","timeout":0}`, 0, func(t *testing.T, s createSpec) {
			if s.native.Timeout != 1 {
				t.Fatalf("%+v", s.native)
			}
		}},
		{"no internet", `{"templateID":"base","allow_internet_access":false}`, 0, func(t *testing.T, s createSpec) {
			if s.native.Egress == nil || s.native.Egress.Default != "none" {
				t.Fatalf("%+v", s.native.Egress)
			}
		}},
		{"allow list", `{"templateID":"base","network":{"denyOut":["0.0.0.0/0"],"allowOut":["1.1.1.1","example.com"]}}`, 0, func(t *testing.T, s createSpec) {
			e := s.native.Egress
			if e == nil || e.Default != "none" || !slices.Equal(e.Allow, []string{"1.1.1.1", "example.com"}) || len(e.Deny) != 0 {
				t.Fatalf("%+v", e)
			}
		}},
		{"deny list", `{"templateID":"base","network":{"denyOut":["10.0.0.0/8"]}}`, 0, func(t *testing.T, s createSpec) {
			e := s.native.Egress
			if e == nil || e.Default != "public" || !slices.Equal(e.Allow, []string{"0.0.0.0/0"}) || !slices.Equal(e.Deny, []string{"10.0.0.0/8"}) {
				t.Fatalf("%+v", e)
			}
		}},
		{"allow and specific deny", `{"templateID":"base","network":{"denyOut":["198.51.100.0/24"],"allowOut":["198.51.100.1"]}}`, 0, func(t *testing.T, s createSpec) {
			// allowOut wins: the deny rules leave out 198.51.100.1.
			e := s.native.Egress
			want := []string{"198.51.100.0/32", "198.51.100.2/31", "198.51.100.4/30", "198.51.100.8/29", "198.51.100.16/28", "198.51.100.32/27", "198.51.100.64/26", "198.51.100.128/25"}
			if e == nil || e.Default != "public" || !slices.Equal(e.Deny, want) || !slices.Contains(e.Allow, "198.51.100.1") {
				t.Fatalf("%+v", e)
			}
		}},
		{"mask request host", `{"templateID":"base","network":{"maskRequestHost":"custom-host.example.com:${PORT}"}}`, 0, func(t *testing.T, s createSpec) {
			if s.native.Metadata[MaskKey] != "custom-host.example.com:${PORT}" || s.native.Egress != nil {
				t.Fatalf("%+v", s.native)
			}
		}},
		{"bad mask", `{"templateID":"base","network":{"maskRequestHost":"a b:${PORT}"}}`, http.StatusBadRequest, nil},
		{"mask with a path", `{"templateID":"base","network":{"maskRequestHost":"evil.example/x"}}`, http.StatusBadRequest, nil},
		{"mask reserved key", `{"templateID":"base","metadata":{"` + MaskKey + `":"x"}}`, http.StatusBadRequest, nil},
		{"deny by name", `{"templateID":"base","network":{"denyOut":["example.com"]}}`, http.StatusBadRequest, nil},
		{"entry with a port", `{"templateID":"base","network":{"allowOut":["example.com:22"]}}`, http.StatusBadRequest, nil},
		{"egress proxy", `{"templateID":"base","network":{"egressProxy":{"address":"p:1080"}}}`, http.StatusNotImplemented, nil},
		{"rules", `{"templateID":"base","network":{"rules":{"api.example.com":[{"transform":{"headers":{"X-A":"1","x-b":"old"}}},{},{"transform":{"headers":{"X-B":"Bearer ${e2b.secrets.OpenAI-Key}"}}}]}}}`, 0, func(t *testing.T, s createSpec) {
			// No network settings but rules: the server's default, with the rules; a later
			// rule's header wins, the placeholder becomes Airlock's (lower-cased name).
			e := s.native.Egress
			want := []apiv1.HeaderRule{{Host: "api.example.com", Headers: map[string]string{"X-A": "1", "X-B": "Bearer ${secrets.openai-key}"}}}
			if e == nil || e.Default != "" || len(e.Allow) != 0 || !reflect.DeepEqual(e.Headers, want) {
				t.Fatalf("%+v", e)
			}
		}},
		{"rules with allowOut", `{"templateID":"base","network":{"denyOut":["0.0.0.0/0"],"allowOut":["api.example.com"],"rules":{"api.example.com":[{"transform":{"headers":{"X-A":"1"}}}]}}}`, 0, func(t *testing.T, s createSpec) {
			e := s.native.Egress
			if e == nil || e.Default != "none" || len(e.Headers) != 1 || e.Headers[0].Host != "api.example.com" {
				t.Fatalf("%+v", e)
			}
		}},
		{"empty rules", `{"templateID":"base","network":{"rules":{"x.example":[{}]}}}`, 0, func(t *testing.T, s createSpec) {
			if s.native.Egress != nil {
				t.Fatalf("%+v", s.native.Egress)
			}
		}},
		{"rule for an address", `{"templateID":"base","network":{"rules":{"192.0.2.1":[{"transform":{"headers":{"X":"1"}}}]}}}`, http.StatusNotImplemented, nil},
		{"rule for a CIDR", `{"templateID":"base","network":{"rules":{"192.0.2.0/24":[{"transform":{"headers":{"X":"1"}}}]}}}`, http.StatusNotImplemented, nil},
		{"identity token", `{"templateID":"base","network":{"rules":{"a.example":[{"transform":{"headers":{"A":"Bearer ${e2b.identity.tokens.aws}"}}}]}}}`, http.StatusNotImplemented, nil},
		{"unterminated placeholder", `{"templateID":"base","network":{"rules":{"a.example":[{"transform":{"headers":{"A":"${e2b.secrets.x"}}}]}}}`, http.StatusBadRequest, nil},
		{"rules not an object", `{"templateID":"base","network":{"rules":["a.example"]}}`, http.StatusBadRequest, nil},
		{"private traffic", `{"templateID":"base","network":{"allowPublicTraffic":false}}`, 0, func(t *testing.T, s createSpec) {
			if s.native.PublicPorts || s.native.Egress != nil {
				t.Fatalf("%+v", s.native)
			}
		}},
		{"public traffic", `{"templateID":"base","network":{"allowPublicTraffic":true,"allowOut":["1.1.1.1"]}}`, 0, func(t *testing.T, s createSpec) {
			if !s.native.PublicPorts || s.native.Egress == nil || !slices.Equal(s.native.Egress.Allow, []string{"0.0.0.0/0", "1.1.1.1"}) {
				t.Fatalf("%+v", s.native)
			}
		}},
		{"volumes", `{"templateID":"base","volumeMounts":[{"name":"v","path":"/data"},{"name":"vol_aaaaaaaaaaaaaaaaaaaaaaaaaa","path":"/home/user/x"}]}`, 0, func(t *testing.T, s createSpec) {
			want := []apiv1.VolumeMountRequest{{Volume: "v", Path: "/data"}, {Volume: "vol_aaaaaaaaaaaaaaaaaaaaaaaaaa", Path: "/home/user/x"}}
			if !slices.Equal(s.native.VolumeMounts, want) {
				t.Fatalf("volume mounts %+v, want %+v", s.native.VolumeMounts, want)
			}
		}},
		{"no volumes", `{"templateID":"base","volumeMounts":[]}`, 0, func(t *testing.T, s createSpec) {
			if len(s.native.VolumeMounts) != 0 {
				t.Fatalf("%+v", s.native.VolumeMounts)
			}
		}},
		{"volume over /proc", `{"templateID":"base","volumeMounts":[{"name":"v","path":"/proc"}]}`, http.StatusBadRequest, nil},
		{"volume path traversal", `{"templateID":"base","volumeMounts":[{"name":"v","path":"/data/../dev"}]}`, http.StatusBadRequest, nil},
		{"volume bad name", `{"templateID":"base","volumeMounts":[{"name":"../v","path":"/data"}]}`, http.StatusBadRequest, nil},
		{"volume mounts not a list", `{"templateID":"base","volumeMounts":{"name":"v"}}`, http.StatusBadRequest, nil},
		{"mcp", `{"templateID":"base","mcp":{"x":{}}}`, 0, func(t *testing.T, s createSpec) {
			// The SDK starts the gateway in the sandbox; nothing of it
			// reaches the native create.
			if s.e2bTemplate != "base" || len(s.native.Metadata) != 1 || s.native.Env != nil {
				t.Fatalf("%+v", s.native)
			}
		}},
		{"mcp null", `{"templateID":"base","mcp":null}`, 0, func(*testing.T, createSpec) {}},
		{"mcp not an object", `{"templateID":"base","mcp":["x"]}`, http.StatusBadRequest, nil},
		{"mcp a string", `{"templateID":"base","mcp":"x"}`, http.StatusBadRequest, nil},
		{"iam", `{"templateID":"base","iam":{"tokens":{}}}`, http.StatusNotImplemented, nil},
		{"no template", `{}`, http.StatusBadRequest, nil},
		{"negative timeout", `{"templateID":"base","timeout":-1}`, http.StatusBadRequest, nil},
		{"reserved key", `{"templateID":"base","metadata":{"` + templateKey + `":"x"}}`, http.StatusBadRequest, nil},
		{"reserved prefix", `{"templateID":"base","metadata":{"e2b.airlock/public-ports":"x"}}`, http.StatusBadRequest, nil},
		{"reserved prefix, case aside", `{"templateID":"base","metadata":{"Airlock/x":"x"}}`, http.StatusBadRequest, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var in createIn
			if err := json.Unmarshal([]byte(tt.body), &in); err != nil {
				t.Fatal(err)
			}
			s, err := parseCreate(in)
			if tt.status == 0 {
				if err != nil {
					t.Fatal(err)
				}
				tt.check(t, s)
				return
			}
			he, ok := asHTTPError(err)
			if !ok || he.status != tt.status {
				t.Fatalf("err = %v, want status %d", err, tt.status)
			}
		})
	}
}

func FuzzParseCreate(f *testing.F) {
	f.Add(`{"templateID":"base","timeout":10,"network":{"denyOut":["0.0.0.0/0"],"allowOut":["a"]}}`)
	f.Add(`{"templateID":"x","allow_internet_access":true,"autoPause":false}`)
	f.Fuzz(func(t *testing.T, body string) {
		var in createIn
		if json.Unmarshal([]byte(body), &in) != nil {
			return
		}
		s, err := parseCreate(in)
		if err != nil {
			if _, ok := asHTTPError(err); !ok {
				t.Fatalf("error %v is not an httpError", err)
			}
			return
		}
		n := s.native
		if n.Template == "" || n.Timeout < 1 || n.Metadata[templateKey] != s.e2bTemplate {
			t.Fatalf("%+v", n)
		}
		if _, err := model.ParseOnTimeout(n.OnTimeout); err != nil {
			t.Fatal(err)
		}
		if e := n.Egress; e != nil && e.Default != "" && e.Default != "none" && e.Default != "public" {
			t.Fatalf("egress default %q", e.Default)
		}
	})
}
