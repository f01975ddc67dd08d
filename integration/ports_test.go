package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// upgradeEcho is a one-connection server for busybox nc -e: it answers an
// HTTP Upgrade request with 101 and then echoes what it reads.
const upgradeEcho = `#!/bin/sh
while IFS= read -r line; do
	line=$(printf '%s' "$line" | tr -d '\r')
	[ -z "$line" ] && break
done
printf 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n'
exec cat
`

// TestSandboxPortProxy: on each runtime, a server in a sandbox is reached through
// /v1/sandboxes/{id}/ports/{port}/… (HTTP and an upgraded connection),
// under the egress rules: the host's connections to the guest work while
// the guest still cannot open one to the host's API; a closed port answers
// 502 port_unreachable.
func TestSandboxPortProxy(t *testing.T) {
	airtest.RequireRoot(t)
	bins := build(t)
	for _, rt := range runtimes() {
		t.Run(rt, func(t *testing.T) {
			airtest.RequireBinary(t, rt)
			s := newServer(t, bins, serverConfig{runtime: rt})
			s.start()
			testPortProxy(t, s)
		})
	}
}

func testPortProxy(t *testing.T, s *server) {
	ctx := ctxFor(t, 3*time.Minute)
	c := s.client()
	sb := createSandbox(ctx, t, c, apiv1.CreateSandboxRequest{})
	id := model.SandboxID(sb.ID)
	_, gw := sandboxAddrs(ctx, t, c, id)

	setup := fmt.Sprintf(`set -e
mkdir -p /tmp/www/sub
echo 'hello from the guest' > /tmp/www/index.html
echo 'deeper' > /tmp/www/sub/page.txt
cat > /tmp/upgrade.sh <<'EOF'
%sEOF
chmod +x /tmp/upgrade.sh`, upgradeEcho)
	if res := execIn(ctx, t, c, id, "sh", "-c", setup); res.exitCode != 0 {
		t.Fatalf("setup: %d %s %s", res.exitCode, res.stdout, res.stderr)
	}
	for _, args := range [][]string{
		{"busybox", "httpd", "-f", "-p", "3000", "-h", "/tmp/www"},
		{"busybox", "nc", "-ll", "-p", "3001", "-e", "/tmp/upgrade.sh"},
	} {
		if _, err := c.CreateCommand(ctx, id, apiv1.CreateCommandRequest{Args: args, Background: true}); err != nil {
			t.Fatalf("start %v: %v", args, err)
		}
	}

	hc := s.httpClient()
	get := func(path string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, "GET", s.url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+s.key)
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res.StatusCode, string(b)
	}
	ports := func(port int, rest string) string { return fmt.Sprintf("/v1/sandboxes/%s/ports/%d/%s", id, port, rest) }

	// The guest's server, by content (retry while httpd starts).
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, body := get(ports(3000, ""))
		if status == http.StatusOK && body == "hello from the guest\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the guest's httpd: %d %q", status, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if status, body := get(ports(3000, "sub/page.txt")); status != http.StatusOK || body != "deeper\n" {
		t.Errorf("sub/page.txt: %d %q", status, body)
	}
	if status, _ := get(ports(3000, "missing.txt")); status != http.StatusNotFound {
		t.Errorf("the guest's 404 came back as %d", status)
	}

	// An upgraded connection carries bytes both ways.
	portUpgrade(ctx, t, s, ports(3001, "ws"))

	// Nothing listens: 502 port_unreachable, JSON.
	status, body := get(ports(3999, ""))
	var e apiv1.Error
	if status != http.StatusBadGateway || json.Unmarshal([]byte(body), &e) != nil || e.Code != apiv1.CodePortUnreachable {
		t.Errorf("closed port: %d %s", status, body)
	}

	// The egress rules still hold for what the guest opens: the host's
	// API (through the gateway address, and its loopback) is out of reach.
	u, err := url.Parse(s.url)
	if err != nil {
		t.Fatal(err)
	}
	_, apiPort, _ := net.SplitHostPort(u.Host)
	for _, host := range []string{gw.String(), "127.0.0.1"} {
		res := execIn(ctx, t, c, id, "sh", "-c",
			fmt.Sprintf(`printf 'GET /healthz HTTP/1.0\r\n\r\n' | nc -w 3 %s %s 2>&1; true`, host, apiPort))
		if strings.Contains(res.stdout, `"status":"ok"`) {
			t.Errorf("the guest reached the host's API at %s:%s: %q", host, apiPort, res.stdout)
		}
	}
	// A refused request is not activity; the proxied ones were: the
	// sandbox shows a last activity.
	got, err := c.GetSandbox(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.LastActivityAt == nil {
		t.Error("no last activity after proxied requests")
	}
}

// portUpgrade sends an Upgrade request through the port proxy over a raw
// connection and checks the echo.
func portUpgrade(ctx context.Context, t *testing.T, s *server, path string) {
	t.Helper()
	u, err := url.Parse(s.url)
	if err != nil {
		t.Fatal(err)
	}
	var conn net.Conn
	if s.cfg.netns != nil {
		t.Fatal("portUpgrade dials the server directly; it does not run in a netns")
	}
	conn, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", path, u.Host, s.key)
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("upgrade: %d %s", res.StatusCode, b)
	}
	for _, msg := range []string{"ping\n", "through the port proxy\n"} {
		if _, err := io.WriteString(conn, msg); err != nil {
			t.Fatal(err)
		}
		got, err := br.ReadString('\n')
		if err != nil || got != msg {
			t.Fatalf("echo of %q: %q, %v", msg, got, err)
		}
	}
}
