package integration

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
)

// TestHostAllowListServer: DNS rebinding against a real server. A page on
// rebind.attacker.example, its name now resolving to the server, sends
// the server requests with that Host: /healthz, /readyz, /openapi.json,
// the console, E2B's header routing and --metrics-listen all answer 421
// host_not_allowed. The server's address, localhost and a name given with
// --allowed-hosts are served as before.
func TestHostAllowListServer(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runc")
	metricsAddr := freeLoopbackAddr(t)
	s := newServer(t, build(t), serverConfig{runtime: "runc", extraArgs: []string{
		"--metrics-listen", metricsAddr, "--allowed-hosts", "airlock.internal"}})
	s.start()
	ctx := ctxFor(t, time.Minute)
	hc := s.httpClient()
	u, err := url.Parse(s.url)
	if err != nil {
		t.Fatal(err)
	}
	_, port := u.Hostname(), u.Port()
	get := func(base, path, host string, hdr map[string]string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, "GET", base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, b
	}
	e2b := map[string]string{"E2b-Sandbox-Id": "sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa", "E2b-Sandbox-Port": "49983"}
	for _, host := range []string{"rebind.attacker.example:" + port, "rebind.attacker.example", "airlock.internal.attacker.example:" + port} {
		for _, c := range []struct {
			base, path string
			hdr        map[string]string
		}{
			{s.url, "/healthz", nil}, {s.url, "/readyz", nil}, {s.url, "/openapi.json", nil}, {s.url, "/ui/", nil},
			{s.url, "/health", e2b}, {"http://" + metricsAddr, "/metrics", nil},
		} {
			code, body := get(c.base, c.path, host, c.hdr)
			var e apiv1.Error
			if code != http.StatusMisdirectedRequest || json.Unmarshal(body, &e) != nil || e.Code != apiv1.CodeHostNotAllowed {
				t.Errorf("GET %s%s with Host %s: %d %.200s, want 421 host_not_allowed", c.base, c.path, host, code, body)
			}
		}
	}
	for _, host := range []string{u.Host, "localhost:" + port, "airlock.internal:" + port, "AIRLOCK.internal."} {
		if code, body := get(s.url, "/healthz", host, nil); code != http.StatusOK {
			t.Errorf("GET /healthz with Host %s: %d %s", host, code, body)
		}
	}
	if code, body := get("http://"+metricsAddr, "/metrics", metricsAddr, nil); code != http.StatusOK {
		t.Errorf("GET /metrics on --metrics-listen by address: %d %.200s", code, body)
	}
	// The CLI, by address, as ever.
	if _, err := s.client().ListSandboxes(ctx, client.ListSandboxesQuery{}); err != nil {
		t.Fatalf("list sandboxes: %v", err)
	}
}
