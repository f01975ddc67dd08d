package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/e2b/envd/processpb"
	"github.com/airlockdev/airlock/internal/e2b/envd/processpb/processpbconnect"
	"github.com/airlockdev/airlock/internal/e2b/envdfs/filesystempb"
	"github.com/airlockdev/airlock/internal/e2b/envdfs/filesystempb/filesystempbconnect"
	"github.com/airlockdev/airlock/internal/model"
)

// headerEcho is a one-connection server for busybox nc -e: it answers an
// HTTP request with the request's own request line and header lines as
// its body.
const headerEcho = `#!/bin/sh
hdrs=""
while IFS= read -r line; do
	line=$(printf '%s' "$line" | tr -d '\r')
	[ -z "$line" ] && break
	hdrs="$hdrs$line
"
done
printf 'HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n%s' "$hdrs"
`

// envdHeaders is a transport that sends every request to envd's port of
// a sandbox through the server's E2B gateway, as the E2B SDKs do with
// E2B_SANDBOX_URL.
type envdHeaders struct {
	sandbox, token string
}

func (h envdHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("E2b-Sandbox-Id", h.sandbox)
	r.Header.Set("E2b-Sandbox-Port", "49983")
	if h.token != "" {
		r.Header.Set("X-Access-Token", h.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestE2BGateway drives a real server's E2B front door on runc, as E2B
// clients reach it, every translated call carried to Airlock's API
// in-process: the control API's create (public ports by default, private
// with network.allowPublicTraffic false), envd's process and filesystem
// services (a Start's streamed output, a large /files download streamed
// back), guest ports (public, private with the traffic token, native;
// what the guest's server sees: the caller's X-Forwarded-*, none of its
// credentials; an upgraded connection), and an authenticated request
// waking a paused sandbox while anonymous traffic does not.
func TestE2BGateway(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runc")
	// Reached (header routing) by a name of its own, as behind a proxy:
	// the Host allow-list takes it from --allowed-hosts.
	s := newServer(t, build(t), serverConfig{runtime: "runc", extraArgs: []string{"--allowed-hosts", "app.example.test"}})
	s.start()
	ctx := ctxFor(t, 6*time.Minute)
	native := s.client()
	e := e2bCaller{t: t, ctx: ctx, base: s.url, key: s.key, http: s.httpClient()}

	// Create: public ports by default, private on request; a native
	// sandbox is not public.
	var pub, priv e2bSandbox
	e.ok("POST", "/v2/sandboxes", map[string]any{"templateID": "base", "timeout": 300}, 201, &pub)
	e.ok("POST", "/v2/sandboxes", map[string]any{"templateID": "base", "timeout": 300, "network": map[string]any{"allowPublicTraffic": false}}, 201, &priv)
	nat := createSandbox(ctx, t, native, apiv1.CreateSandboxRequest{})
	for _, c := range []struct {
		id   string
		want bool
	}{{pub.SandboxID, true}, {priv.SandboxID, false}, {nat.ID, false}} {
		sb, err := native.GetSandbox(ctx, model.SandboxID(c.id))
		if err != nil || sb.PublicPorts != c.want {
			t.Fatalf("sandbox %s: public_ports %v, want %v (%v)", c.id, sb.PublicPorts, c.want, err)
		}
	}
	pubID := model.SandboxID(pub.SandboxID)

	// envd through the gateway.
	envdClient := &http.Client{Transport: envdHeaders{sandbox: pub.SandboxID, token: pub.EnvdAccessToken}}
	pc := processpbconnect.NewProcessClient(envdClient, s.url, connect.WithProtoJSON())
	fc := filesystempbconnect.NewFilesystemClient(envdClient, s.url)
	if _, err := pc.List(ctx, connect.NewRequest(&processpb.ListRequest{})); err != nil {
		t.Fatalf("process List: %v", err)
	}
	anon := processpbconnect.NewProcessClient(&http.Client{Transport: envdHeaders{sandbox: pub.SandboxID}}, s.url, connect.WithProtoJSON())
	if _, err := anon.List(ctx, connect.NewRequest(&processpb.ListRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("process List without the token: %v, want unauthenticated", err)
	}
	st, err := pc.Start(ctx, connect.NewRequest(shCmd("for i in 1 2 3; do echo line$i; sleep 0.2; done; echo err >&2; exit 3")))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	ev := startEvents(st)
	ev.startPid(t)
	run := ev.rest(t)
	st.Close()
	if run.stdout.String() != "line1\nline2\nline3\n" || run.stderr.String() != "err\n" || run.end.GetExitCode() != 3 {
		t.Fatalf("Start through the gateway: stdout %q stderr %q end %v", run.stdout.String(), run.stderr.String(), run.end)
	}
	if info, err := fc.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: "/tmp"})); err != nil || info.Msg.GetEntry().GetName() != "tmp" {
		t.Fatalf("filesystem Stat /tmp: %v, %v", info, err)
	}
	big := make([]byte, 24<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	if _, err := native.Upload(ctx, pubID, "/tmp/big.bin", 0o644, bytes.NewReader(big)); err != nil {
		t.Fatal(err)
	}
	q := url.Values{"path": {"/tmp/big.bin"}, "username": {"root"}}
	res, err := envdClient.Get(s.url + "/files?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, err := io.Copy(h, res.Body)
	res.Body.Close()
	if wantSum := sha256.Sum256(big); res.StatusCode != http.StatusOK || err != nil || n != int64(len(big)) || !bytes.Equal(h.Sum(nil), wantSum[:]) {
		t.Fatalf("GET /files of 24 MiB: %d, %d bytes, %v (or not the file's bytes)", res.StatusCode, n, err)
	}

	// Guest ports: a server echoing its request's headers on 3000, and
	// an upgrade echo on 3001.
	setup := fmt.Sprintf("set -e\ncat > /tmp/headers.sh <<'EOF'\n%sEOF\ncat > /tmp/upgrade.sh <<'EOF'\n%sEOF\nchmod +x /tmp/headers.sh /tmp/upgrade.sh", headerEcho, upgradeEcho)
	for _, id := range []string{pub.SandboxID, priv.SandboxID, nat.ID} {
		sb := model.SandboxID(id)
		if r := execIn(ctx, t, native, sb, "sh", "-c", setup); r.exitCode != 0 {
			t.Fatalf("setup: %d %s %s", r.exitCode, r.stdout, r.stderr)
		}
		for _, args := range [][]string{
			{"busybox", "nc", "-ll", "-p", "3000", "-e", "/tmp/headers.sh"},
			{"busybox", "nc", "-ll", "-p", "3001", "-e", "/tmp/upgrade.sh"},
		} {
			if _, err := native.CreateCommand(ctx, sb, apiv1.CreateCommandRequest{Args: args, Background: true}); err != nil {
				t.Fatalf("start %v: %v", args, err)
			}
		}
	}
	hc := s.httpClient()
	guest := func(id, host string, hdr map[string]string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, "GET", s.url+"/some/path?q=1", nil)
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		if id != "" {
			req.Header.Set("E2b-Sandbox-Id", id)
			req.Header.Set("E2b-Sandbox-Port", "3000")
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	// The guest's server answers (retried while nc starts).
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, body := guest(pub.SandboxID, "", nil)
		if status == http.StatusOK && strings.Contains(body, "X-Forwarded-For") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the guest's header echo: %d %q", status, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	headers := func(body string) http.Header {
		t.Helper()
		_, lines, _ := strings.Cut(body, "\n") // the request line, then the header
		h, err := textproto.NewReader(bufio.NewReader(strings.NewReader(lines + "\r\n"))).ReadMIMEHeader()
		if err != nil {
			t.Fatalf("guest headers %q: %v", body, err)
		}
		return http.Header(h)
	}

	// What the guest sees of a caller (header routing, anonymous).
	status, body := guest(pub.SandboxID, "app.example.test:8443", map[string]string{
		"X-Forwarded-For": "192.0.2.66", "X-Forwarded-Host": "evil.example", "Authorization": "Basic dXNlcjpwYXNz",
		"X-Api-Key": s.key, "Airlock-Whatever": "x", "X-Custom": "kept",
	})
	if status != http.StatusOK {
		t.Fatalf("public port: %d %s", status, body)
	}
	saw := headers(body)
	want := map[string]string{
		"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Host": "app.example.test:8443", "X-Forwarded-Proto": "http", "X-Custom": "kept",
		"Authorization": "", "X-Api-Key": "", "X-Access-Token": "", "E2b-Sandbox-Id": "", "E2b-Sandbox-Port": "", "Airlock-Whatever": "",
	}
	for k, v := range want {
		if got := strings.Join(saw.Values(k), ","); got != v {
			t.Errorf("the guest saw %s %q, want %q (all: %v)", k, got, v, saw)
		}
	}
	// Host routing: the guest sees the Host the caller used.
	host := "3000-" + pub.SandboxID + ".sbx.test"
	if status, body := guest("", host, nil); status != http.StatusOK || headers(body).Get("X-Forwarded-Host") != host {
		t.Fatalf("by host: %d %s", status, body)
	}
	// Private ports take the traffic token; native ones the access token.
	if status, body := guest(priv.SandboxID, "", nil); status != http.StatusUnauthorized {
		t.Fatalf("private port without the token: %d %s", status, body)
	}
	if status, body := guest(priv.SandboxID, "", map[string]string{"E2B-Traffic-Access-Token": *priv.TrafficAccessToken}); status != http.StatusOK {
		t.Fatalf("private port with the traffic token: %d %s", status, body)
	}
	if status, body := guest(priv.SandboxID, "", map[string]string{"E2B-Traffic-Access-Token": pub.EnvdAccessToken}); status != http.StatusUnauthorized {
		t.Fatalf("private port with another sandbox's token: %d %s", status, body)
	}
	if status, body := guest(nat.ID, "", nil); status != http.StatusUnauthorized {
		t.Fatalf("native sandbox's port without a token: %d %s", status, body)
	}
	// An upgraded connection through the gateway, anonymous (public).
	e2bUpgrade(ctx, t, s, "3001-"+pub.SandboxID+".sbx.test")

	// Paused: anonymous traffic does not wake it (and gets the answer an
	// unknown sandbox gets); an authenticated request does.
	e.ok("POST", "/sandboxes/"+pub.SandboxID+"/pause", map[string]any{}, 204, nil)
	if status, body := guest(pub.SandboxID, "", nil); status != http.StatusUnauthorized {
		t.Fatalf("anonymous traffic to a paused sandbox: %d %s", status, body)
	}
	if sb, err := native.GetSandbox(ctx, pubID); err != nil || sb.State != string(model.StateSuspended) {
		t.Fatalf("after anonymous traffic: %+v, %v", sb, err)
	}
	if _, err := pc.List(ctx, connect.NewRequest(&processpb.ListRequest{})); err != nil {
		t.Fatalf("process List of a paused sandbox: %v", err)
	}
	if sb, err := native.GetSandbox(ctx, pubID); err != nil || sb.State != string(model.StateRunning) {
		t.Fatalf("after an authenticated request: %+v, %v", sb, err)
	}
}

// e2bUpgrade sends an Upgrade request for host through the gateway over a
// raw connection and checks the echo.
func e2bUpgrade(ctx context.Context, t *testing.T, s *server, host string) {
	t.Helper()
	u, err := url.Parse(s.url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", host)
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("upgrade: %d %s", res.StatusCode, b)
	}
	for _, msg := range []string{"ping\n", "through the E2B gateway\n"} {
		if _, err := io.WriteString(conn, msg); err != nil {
			t.Fatal(err)
		}
		got, err := br.ReadString('\n')
		if err != nil || got != msg {
			t.Fatalf("echo of %q: %q, %v", msg, got, err)
		}
	}
}
