package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agent"
	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/api"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/dataplane"
	"github.com/airlockdev/airlock/internal/e2b/envdfs"
	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/guestops/agentguest"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/store/sqlite"
)

// e2bEnv is the E2B gateway as the server wires it, over a real API on a
// real SQLite store, with one running sandbox whose agent is embedded (its
// files under root), behind a real HTTP server.
type e2bEnv struct {
	tb    testing.TB
	st    *sqlite.Store
	keys  *auth.Keyring
	api   *api.API
	srv   *httptest.Server
	sb    model.Sandbox
	token string // the sandbox's access token
	root  string
	agent *agentclient.Client
}

// e2bTestMetadata is what the E2B API's create gives a sandbox.
var e2bTestMetadata = model.Metadata{"e2b.airlock/template-id": "base"}

const e2bTestNode model.NodeID = "node_e2be2be2be2be2be2be2be2be2"

func (e *e2bEnv) Agent(model.SandboxID) (*agentclient.Client, error) { return e.agent, nil }

func newE2BEnv(tb testing.TB) *e2bEnv {
	tb.Helper()
	ctx := context.Background()
	dir := tb.TempDir()
	log := slog.New(slog.DiscardHandler)
	dd, err := openDataDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { dd.close() })
	e := &e2bEnv{tb: tb, root: filepath.Join(dir, "guest")}
	if e.keys, err = openAttachKeys(dd, DefaultAttachKeyMaxAge, log); err != nil {
		tb.Fatal(err)
	}
	if e.st, err = sqlite.Open(ctx, filepath.Join(dir, "airlock.db"), log); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.st.Close() })

	// The guest: a files root with an /etc/passwd, served by an embedded
	// agent over in-memory pipes.
	if err := os.MkdirAll(filepath.Join(e.root, "etc"), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.root, "etc", "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.root, "hello.txt"), []byte("hello\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	ag, err := agent.New(agent.Options{FilesRoot: e.root, Logger: log})
	if err != nil {
		tb.Fatal(err)
	}
	agentCtx, stopAgent := context.WithCancel(ctx)
	e.agent = agentclient.New(func(context.Context) (net.Conn, error) {
		host, guest := net.Pipe()
		go ag.ServeConn(agentCtx, guest)
		return host, nil
	}, nil)
	tb.Cleanup(func() {
		e.agent.Close()
		stopAgent()
		ag.Close()
	})

	// One project, template and running sandbox on this node.
	if _, err := e.st.RegisterNode(ctx, model.Node{ID: e2bTestNode, Incarnation: "inc_e2be2be2be2be2be2be2be2be2", Role: model.RoleAll,
		AdvertiseURL: "http://127.0.0.1:1"}); err != nil {
		tb.Fatal(err)
	}
	project := model.Project{ID: model.NewProjectID(), Name: "e2b", CreatedAt: time.Now()}
	if err := e.st.CreateProject(ctx, project); err != nil {
		tb.Fatal(err)
	}
	manifest := []byte(`{"rootfs":"e2b-test"}`)
	tpl := model.Template{Digest: model.DigestFromSHA256(sha256.Sum256(manifest)), SizeBytes: 1, Manifest: manifest, CreatedAt: time.Now()}
	if err := e.st.PutTemplate(ctx, tpl); err != nil {
		tb.Fatal(err)
	}
	now := time.Now()
	e.sb = model.Sandbox{
		ID: model.NewSandboxID(), ProjectID: project.ID, Template: tpl.Digest,
		Resources: model.DefaultResources(), State: model.StatePending, NodeID: e2bTestNode,
		Metadata: e2bTestMetadata, LastActivity: now, CreatedAt: now, UpdatedAt: now,
	}
	op := model.Operation{ID: model.NewOperationID(), ProjectID: project.ID, SandboxID: e.sb.ID, Kind: model.OpCreate,
		State: model.OpPending, CreatedAt: now, UpdatedAt: now}
	if err := e.st.CreateSandbox(ctx, e.sb, policy.Spec{}, op, nil); err != nil {
		tb.Fatal(err)
	}
	e.setRunning()

	e.api, err = api.New(api.Config{Store: e.st, Attach: e.keys.Issuer(), FileTokens: e.keys.Issuer(), SandboxTokens: e.keys.Verifier(),
		Guests: agentguest.New(e), Self: e2bTestNode, Logger: log, MutationRate: -1})
	if err != nil {
		tb.Fatal(err)
	}
	dp, err := dataplane.New(dataplane.Config{Store: e.st, Agents: e, FileTokens: e.keys.Verifier(), Verifier: e.keys.Verifier(),
		NodeID: e2bTestNode, Logger: log})
	if err != nil {
		tb.Fatal(err)
	}
	dataMux := http.NewServeMux()
	dp.Register(dataMux)
	mux := http.NewServeMux()
	mux.Handle("/data/", e.api.Wrap(dataMux))
	mux.Handle("/", e.api.Handler())
	e.srv = httptest.NewUnstartedServer(nil)
	gw, watchers := e.gateway(mux)
	tb.Cleanup(watchers.Close)
	e.srv.Config.Handler = gw
	e.srv.Start()
	tb.Cleanup(e.srv.Close)
	if e.token, err = e.keys.Issuer().IssueSandbox(auth.SandboxClaims{Sandbox: e.sb.ID, Project: e.sb.ProjectID}); err != nil {
		tb.Fatal(err)
	}
	return e
}

// gateway wires the E2B gateway in front of mux as Run does.
func (e *e2bEnv) gateway(mux http.Handler) (http.Handler, *envdfs.Watchers) {
	e.tb.Helper()
	gw, watchers, err := e2bGateway(context.Background(), mux, e.api.Wrap, e.api.InProcess(mux), e.st, e.keys, e.keys.Verifier(),
		"http://"+e.srv.Listener.Addr().String(), "", e2bTemplateBuilds{}, slog.New(slog.DiscardHandler))
	if err != nil {
		e.tb.Fatal(err)
	}
	return gw, watchers
}

// setRunning finishes the sandbox's pending create: it runs.
func (e *e2bEnv) setRunning() {
	e.tb.Helper()
	ctx := context.Background()
	now := time.Now()
	op, err := e.st.ClaimOperation(ctx, store.Claim{Owner: e2bTestNode, Incarnation: "inc_e2be2be2be2be2be2be2be2be2", Lease: time.Minute, Now: now})
	if err != nil {
		e.tb.Fatalf("claim the create: %v", err)
	}
	if err := e.st.TransitionSandbox(ctx, e.sb.ID, model.StatePending, model.StateCreating, "", now); err != nil {
		e.tb.Fatal(err)
	}
	if err := e.st.FinishOperation(ctx, store.Finish{OperationID: op.ID, Owner: e2bTestNode, Incarnation: "inc_e2be2be2be2be2be2be2be2be2",
		State: model.OpSucceeded, SandboxFrom: model.StateCreating, SandboxTo: model.StateRunning, Now: now}); err != nil {
		e.tb.Fatalf("finish the create: %v", err)
	}
}

// envd sends a Connect unary call (JSON codec) to envd's port of the
// sandbox through the gateway and returns the answer.
func (e *e2bEnv) envd(procedure, body string, header map[string]string) (int, string) {
	e.tb.Helper()
	req, err := http.NewRequest("POST", e.srv.URL+procedure, strings.NewReader(body))
	if err != nil {
		e.tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("E2b-Sandbox-Id", e.sb.ID.String())
	req.Header.Set("E2b-Sandbox-Port", "49983")
	req.Header.Set("X-Access-Token", e.token)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		e.tb.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.tb.Fatal(err)
	}
	return res.StatusCode, string(b)
}

// TestE2BGatewayInProcess: the gateway as the server wires it answers
// envd's calls through the API in-process: an RPC, a /files download (the
// data plane's transfer, streamed back), a signed /files URL; a request
// without the sandbox's token is refused before anything is called.
func TestE2BGatewayInProcess(t *testing.T) {
	e := newE2BEnv(t)
	if status, body := e.envd("/filesystem.Filesystem/Stat", `{"path":"/hello.txt"}`, nil); status != http.StatusOK || !strings.Contains(body, `"name":"hello.txt"`) {
		t.Fatalf("Stat: %d %s", status, body)
	}
	if status, body := e.envd("/process.Process/List", `{}`, nil); status != http.StatusOK {
		t.Fatalf("List: %d %s", status, body)
	}
	if status, body := e.envd("/process.Process/List", `{}`, map[string]string{"X-Access-Token": "als_forged"}); status != http.StatusUnauthorized {
		t.Fatalf("List with a forged token: %d %s", status, body)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	if err := os.WriteFile(filepath.Join(e.root, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	get := func(u string, token bool) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest("GET", e.srv.URL+u, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("E2b-Sandbox-Id", e.sb.ID.String())
		req.Header.Set("E2b-Sandbox-Port", "49983")
		if token {
			req.Header.Set("X-Access-Token", e.token)
		}
		res, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res.StatusCode, b
	}
	if status, body := get("/files?path=/big.bin", true); status != http.StatusOK || !bytes.Equal(body, big) {
		t.Fatalf("GET /files: %d, %d bytes", status, len(body))
	}
	if status, _ := get("/files?path=/big.bin", false); status != http.StatusUnauthorized {
		t.Fatalf("GET /files without the token: %d", status)
	}
	sum := sha256.Sum256([]byte("/hello.txt:read::" + e.token))
	sig := "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
	if status, body := get("/files?path=/hello.txt&signature="+url.QueryEscape(sig), false); status != http.StatusOK || string(body) != "hello\n" {
		t.Fatalf("signed GET /files: %d %q", status, body)
	}
}

// BenchmarkE2BEnvd measures envd calls through the gateway: each crosses
// the gateway (token check, sandbox read) and Airlock's API (and the agent).
func BenchmarkE2BEnvd(b *testing.B) {
	for _, c := range []struct{ name, procedure, body, want string }{
		{"FilesystemStat", "/filesystem.Filesystem/Stat", `{"path":"/hello.txt"}`, `"name":"hello.txt"`},
		{"ProcessList", "/process.Process/List", `{}`, `{`},
	} {
		b.Run(c.name, func(b *testing.B) {
			e := newE2BEnv(b)
			if status, body := e.envd(c.procedure, c.body, nil); status != http.StatusOK || !strings.Contains(body, c.want) {
				b.Fatalf("%s: %d %s", c.procedure, status, body)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if status, body := e.envd(c.procedure, c.body, nil); status != http.StatusOK {
					b.Fatalf("%s: %d %s", c.procedure, status, body)
				}
			}
		})
	}
}
