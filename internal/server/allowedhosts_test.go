package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/airlockdev/airlock/internal/api"
	"github.com/airlockdev/airlock/internal/apiv1"
)

// TestHostAllowList plays DNS rebinding against the server's handler
// chain: a page on rebind.attacker.example whose name now resolves to the
// server sends its requests with that Host; every unauthenticated route
// (/healthz, /readyz, /openapi.json, E2B's header-routed sandbox traffic)
// answers 421 host_not_allowed. The server's own names (--listen,
// --advertise-url, --public-url, --e2b-domain and the names under it,
// --allowed-hosts), addresses (a Kubernetes probe's pod IP), localhost
// and E2B sandbox host names keep working.
func TestHostAllowList(t *testing.T) {
	a, _ := newTestAPI(t, api.Config{Ready: func(context.Context) error { return nil }})
	host, _ := os.Hostname()
	sandboxTraffic := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("E2b-Sandbox-Id") != "" || r.Host == "3000-sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa.sbx.test" {
			w.WriteHeader(http.StatusTeapot) // the gateway's part
			return
		}
		a.Handler().ServeHTTP(w, r)
	})
	for _, tc := range []struct {
		name string
		opts Options
		host string
		want int
	}{
		{"listen address", Options{Listen: "127.0.0.1:7070"}, "127.0.0.1:7070", 200},
		{"localhost", Options{Listen: "127.0.0.1:7070"}, "localhost:7070", 200},
		{"pod IP of a probe", Options{Listen: "0.0.0.0:7070"}, "10.244.1.7:7070", 200},
		{"IPv6", Options{Listen: "[::1]:7070"}, "[::1]:7070", 200},
		{"listen name", Options{Listen: "airlock.internal:7070"}, "airlock.internal:7070", 200},
		{"advertise URL", Options{Listen: "0.0.0.0:7070", AdvertiseURL: "http://node-3.cluster.example:7070"}, "node-3.cluster.example:7070", 200},
		{"public URL", Options{Listen: "0.0.0.0:7070", PublicURL: "https://airlock.example.com"}, "airlock.example.com", 200},
		{"host name", Options{Listen: "0.0.0.0:7070"}, host + ":7070", 200},
		{"allowed host", Options{Listen: "0.0.0.0:7070", AllowedHosts: []string{"airlock.airlock.svc.cluster.local"}}, "airlock.airlock.svc.cluster.local:7070", 200},
		{"allowed suffix", Options{Listen: "0.0.0.0:7070", AllowedHosts: []string{"*.corp.example"}}, "api.corp.example", 200},
		{"any", Options{Listen: "0.0.0.0:7070", AllowedHosts: []string{"*"}}, "rebind.attacker.example:7070", 200},
		{"e2b domain", Options{Listen: "0.0.0.0:7070", E2BDomain: "sbx.test:7070"}, "sbx.test:7070", 200},
		{"under the e2b domain", Options{Listen: "0.0.0.0:7070", E2BDomain: "sbx.test"}, "api.sbx.test", 200},
		{"sandbox host, no e2b domain", Options{Listen: "127.0.0.1:7070"}, "3000-sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa.sbx.test", 418},
		// The attacker's.
		{"rebound name", Options{Listen: "127.0.0.1:7070"}, "rebind.attacker.example:7070", 421},
		{"rebound name, wildcard listen", Options{Listen: "0.0.0.0:7070", PublicURL: "https://airlock.example.com"}, "rebind.attacker.example", 421},
		{"name like an allowed one", Options{Listen: "0.0.0.0:7070", PublicURL: "https://airlock.example.com"}, "airlock.example.com.attacker.example", 421},
		{"sandbox host off the e2b domain", Options{Listen: "0.0.0.0:7070", E2BDomain: "sbx.test"}, "3000-sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa.attacker.example", 421},
		{"sandbox host without e2b", Options{Listen: "127.0.0.1:7070", NoE2B: true}, "3000-sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa.sbx.test", 421},
		{"e2b domain without e2b", Options{Listen: "0.0.0.0:7070", NoE2B: true, E2BDomain: "sbx.test"}, "api.sbx.test", 421},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := allowedHosts(tc.opts, tc.opts.AdvertiseURL)
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(hostChecked(sandboxTraffic, l, tc.opts))
			defer srv.Close()
			for _, path := range []string{"/healthz", "/readyz", "/openapi.json"} {
				req, err := http.NewRequest("GET", srv.URL+path, nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Host = tc.host
				res, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != tc.want {
					t.Fatalf("GET %s with Host %s: %d %s, want %d", path, tc.host, res.StatusCode, body, tc.want)
				}
				if tc.want == 421 {
					var e apiv1.Error
					if json.Unmarshal(body, &e) != nil || e.Code != apiv1.CodeHostNotAllowed {
						t.Fatalf("GET %s with Host %s: %s", path, tc.host, body)
					}
				}
			}
			// E2B's header routing from a rebound page is refused too.
			req, _ := http.NewRequest("GET", srv.URL+"/health", nil)
			req.Host = tc.host
			req.Header.Set("E2b-Sandbox-Id", "sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa")
			req.Header.Set("E2b-Sandbox-Port", "49983")
			res, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if want := map[bool]int{true: 421, false: 418}[tc.want == 421]; res.StatusCode != want {
				t.Fatalf("header-routed request with Host %s: %d, want %d", tc.host, res.StatusCode, want)
			}
		})
	}
	if _, err := allowedHosts(Options{Listen: "127.0.0.1:7070", AllowedHosts: []string{"bad host"}}, ""); err == nil {
		t.Fatal("a malformed --allowed-hosts was taken")
	}
}
