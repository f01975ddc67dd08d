package api

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agent"
	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/dataplane"
	"github.com/airlockdev/airlock/internal/guestops/agentguest"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/noderoute"
	"github.com/airlockdev/airlock/internal/store"
)

// nodeDir is a directory of nodes' advertise URLs (the store's nodes
// table in a server).
type nodeDir struct {
	mu   sync.Mutex
	urls map[model.NodeID]string
}

func (d *nodeDir) set(id model.NodeID, url string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.urls[id] = url
}

func (d *nodeDir) GetNodeRecord(_ context.Context, id model.NodeID) (model.Node, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	u, ok := d.urls[id]
	if !ok {
		return model.Node{}, store.ErrNotFound
	}
	return model.Node{ID: id, AdvertiseURL: u, State: model.NodeActive}, nil
}

// noAgents is the agent set of a replica that hosts no sandboxes.
type noAgents struct{}

func (noAgents) Agent(id model.SandboxID) (*agentclient.Client, error) {
	return nil, errors.New("no sandboxes are hosted here")
}

// clusterNode is one `airlock server` process in a test: its own keyring
// (published in the shared store), API and data plane on one listener.
type clusterNode struct {
	id   model.NodeID
	ring *auth.Keyring
	api  *API
	srv  *httptest.Server
}

// cluster is two processes over one store: replica A (the testEnv's
// store, projects and keys; an API replica without sandboxes) and node B,
// which hosts a sandbox through an in-process guest agent whose files root
// is root. bOpts change node B's Config.
type cluster struct {
	*testEnv
	dir     *nodeDir
	a, b    *clusterNode
	root    string
	sandbox string
}

func newCluster(t *testing.T, bOpts ...func(*Config)) *cluster {
	t.Helper()
	c := &cluster{testEnv: newEnv(t), dir: &nodeDir{urls: map[model.NodeID]string{}}, root: t.TempDir()}
	log := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ag, err := agent.New(agent.Options{FilesRoot: c.root, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	agentCtx, stopAgent := context.WithCancel(context.Background())
	t.Cleanup(func() { stopAgent(); ag.Close() })
	client := agentclient.New(func(context.Context) (net.Conn, error) {
		host, guest := net.Pipe()
		go ag.ServeConn(agentCtx, guest)
		return host, nil
	}, nil)
	t.Cleanup(func() { client.Close() })

	c.a = c.node(t, log, "a", noAgents{})
	c.b = c.node(t, log, "b", agentsFunc(func(model.SandboxID) (*agentclient.Client, error) { return client, nil }), bOpts...)

	// A running sandbox of project A, hosted on B.
	c.sandbox = c.createSandbox(c.keyA, `{}`).Sandbox.ID
	c.place(c.sandbox, c.b.id)
	return c
}

type agentsFunc func(model.SandboxID) (*agentclient.Client, error)

func (f agentsFunc) Agent(id model.SandboxID) (*agentclient.Client, error) { return f(id) }

// node starts one process over the shared store; opts change its Config.
func (c *cluster) node(t *testing.T, log *slog.Logger, name string, agents dataplane.Agents, opts ...func(*Config)) *clusterNode {
	t.Helper()
	n := &clusterNode{id: model.NewNodeID()}
	var err error
	if n.ring, err = auth.OpenKeyring(filepath.Join(t.TempDir(), name), auth.KeyringOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := n.ring.SetPublisher(noderoute.KeyPublisher(c.st, n.id)); err != nil {
		t.Fatal(err)
	}
	verifier, err := noderoute.ClusterVerifier(n.ring.Verifier(), c.st)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Store: c.st, Logger: log, Attach: n.ring.Issuer(), FileTokens: n.ring.Issuer(), Builds: c.api.cfg.Builds,
		Self: n.id, Nodes: c.dir, PeerVerifier: verifier, SandboxTokens: verifier,
	}
	if _, none := agents.(noAgents); !none {
		cfg.Guests = agentguest.New(agents)
	}
	for _, o := range opts {
		o(&cfg)
	}
	if n.api, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	dp, err := dataplane.New(dataplane.Config{
		Store: c.st, Agents: agents, Logger: log, Verifier: verifier, FileTokens: verifier, NodeID: n.id, Nodes: c.dir,
	})
	if err != nil {
		t.Fatal(err)
	}
	dataMux := http.NewServeMux()
	dp.Register(dataMux)
	mux := http.NewServeMux()
	mux.Handle("/data/", n.api.Wrap(dataMux))
	mux.Handle("/", n.api.Handler())
	n.srv = httptest.NewServer(mux)
	t.Cleanup(n.srv.Close)
	c.dir.set(n.id, n.srv.URL)
	return n
}

// place makes a sandbox running on node (as the worker would).
func (c *cluster) place(sb string, node model.NodeID) {
	c.t.Helper()
	if _, err := c.st.DB().Exec(`UPDATE sandboxes SET state = 'running', node_id = ? WHERE id = ?`, string(node), sb); err != nil {
		c.t.Fatal(err)
	}
}

// call sends a request to a node's listener.
func (c *cluster) call(n *clusterNode, method, path, token, body string, hdr http.Header) (*http.Response, []byte) {
	c.t.Helper()
	res := c.open(n, method, path, token, body, hdr)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return res, b
}

func (c *cluster) open(n *clusterNode, method, path, token, body string, hdr http.Header) *http.Response {
	c.t.Helper()
	u := path
	if !strings.HasPrefix(u, "http") {
		u = n.srv.URL + path
	}
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	return res
}

func wantCode(t *testing.T, res *http.Response, b []byte, status int, code string) apiv1.Error {
	t.Helper()
	var e apiv1.Error
	if res.StatusCode != status || json.Unmarshal(b, &e) != nil || e.Code != code || e.Message == "" {
		t.Fatalf("status %d %s, want %d %s", res.StatusCode, b, status, code)
	}
	return e
}

// attachOutput reads an attach stream to its exit and returns its stdout.
func attachOutput(t *testing.T, res *http.Response) string {
	t.Helper()
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("attach: %d %s", res.StatusCode, b)
	}
	var out strings.Builder
	sc := bufio.NewScanner(res.Body)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && event == apiv1.EventStdout:
			var d apiv1.OutputEventData
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d); err != nil {
				t.Fatal(err)
			}
			out.Write(d.Data)
		case strings.HasPrefix(line, "data: ") && event == apiv1.EventError:
			t.Fatalf("error event: %s", line)
		case strings.HasPrefix(line, "data: ") && event == apiv1.EventExit:
			return out.String()
		}
	}
	t.Fatalf("stream ended without exit (err %v); stdout %q", sc.Err(), out.String())
	return ""
}

// TestForwardCommandToHostingNode: a command sent to replica A for a
// sandbox on node B is run by B; its attach URL names A, and the stream
// read through A (which proxies the data plane to B) carries the output.
func TestForwardCommandToHostingNode(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	res, b := c.call(c.a, "POST", "/v1/sandboxes/"+c.sandbox+"/commands", c.keyA,
		`{"args": ["sh", "-c", "echo hello from $(cat /proc/self/comm 2>/dev/null || echo sh)"]}`, http.Header{"Idempotency-Key": {"k1"}})
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create command via A: %d %s", res.StatusCode, b)
	}
	var cs apiv1.CommandSession
	if err := json.Unmarshal(b, &cs); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cs.AttachURL, c.a.srv.URL+"/data/") || !strings.HasPrefix(cs.WebSocketURL, "ws://"+strings.TrimPrefix(c.a.srv.URL, "http://")+"/data/") {
		t.Fatalf("URLs %q, %q do not name replica A %s", cs.AttachURL, cs.WebSocketURL, c.a.srv.URL)
	}
	// B signed the token (the command ran there): A verifies it with B's
	// published key before it proxies.
	claims, err := c.b.ring.Verifier().Verify(cs.AttachmentToken, time.Now())
	if err != nil || claims.Node != c.b.id {
		t.Fatalf("token: %+v, %v; want one of B's for node B", claims, err)
	}
	out := attachOutput(t, c.open(c.a, "GET", cs.AttachURL, cs.AttachmentToken, "", nil))
	if !strings.HasPrefix(out, "hello from ") {
		t.Fatalf("stdout %q", out)
	}
	// A replay of the same Idempotency-Key through A is answered by B's
	// record.
	res, b2 := c.call(c.a, "POST", "/v1/sandboxes/"+c.sandbox+"/commands", c.keyA,
		`{"args": ["sh", "-c", "echo hello from $(cat /proc/self/comm 2>/dev/null || echo sh)"]}`, http.Header{"Idempotency-Key": {"k1"}})
	var again apiv1.CommandSession
	if res.StatusCode != http.StatusCreated || json.Unmarshal(b2, &again) != nil || again.ID != cs.ID {
		t.Fatalf("replay: %d %s", res.StatusCode, b2)
	}

	// Process routes are forwarded too.
	res, b = c.call(c.a, "GET", "/v1/sandboxes/"+c.sandbox+"/processes/"+cs.ProcessID, c.keyA, "", nil)
	var p apiv1.Process
	if res.StatusCode != http.StatusOK || json.Unmarshal(b, &p) != nil || p.Running {
		t.Fatalf("process via A: %d %s", res.StatusCode, b)
	}
	if got := res.Header.Values("X-Request-Id"); len(got) != 1 {
		t.Fatalf("X-Request-Id %q, want one", got)
	}

	// A token A signed itself (an attachment for the same process) works
	// on B directly: B learns A's key from the store.
	res, b = c.call(c.a, "POST", "/v1/sandboxes/"+c.sandbox+"/processes/"+cs.ProcessID+"/attachments", c.keyA, `{"actions": ["read"]}`, nil)
	var att apiv1.CommandSession
	if res.StatusCode != http.StatusCreated || json.Unmarshal(b, &att) != nil {
		t.Fatalf("attachment via A: %d %s", res.StatusCode, b)
	}
	if _, err := c.a.ring.Verifier().Verify(att.AttachmentToken, time.Now()); err != nil {
		t.Fatalf("the attachment is not A's: %v", err)
	}
	direct := c.b.srv.URL + strings.TrimPrefix(att.AttachURL, c.a.srv.URL)
	if out2 := attachOutput(t, c.open(c.b, "GET", direct, att.AttachmentToken, "", nil)); out2 != out {
		t.Fatalf("replayed output %q, want %q", out2, out)
	}
}

// TestForwardSandboxToken: a sandbox access token one replica signed
// works through another (the forwarded request carries it; the hosting
// node verifies it with the published key and limits it again), and only
// on its own sandbox.
func TestForwardSandboxToken(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	sb := model.SandboxID(c.sandbox)
	tokA, err := c.a.ring.Issuer().IssueSandbox(auth.SandboxClaims{Sandbox: sb, Project: c.projA})
	if err != nil {
		t.Fatal(err)
	}
	path := "/v1/sandboxes/" + c.sandbox + "/commands"
	for _, n := range []*clusterNode{c.a, c.b} {
		res, b := c.call(n, "POST", path, tokA, `{"args": ["true"]}`, nil)
		var cs apiv1.CommandSession
		if res.StatusCode != http.StatusCreated || json.Unmarshal(b, &cs) != nil {
			t.Fatalf("command via %s with a sandbox token: %d %s", n.id, res.StatusCode, b)
		}
		res, b = c.call(n, "GET", "/v1/sandboxes/"+c.sandbox+"/processes", tokA, "", nil)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("process via %s: %d %s", n.id, res.StatusCode, b)
		}
	}
	// Another sandbox on B, same project: refused at A, never forwarded.
	other := c.createSandbox(c.keyA, `{}`).Sandbox.ID
	c.place(other, c.b.id)
	res, b := c.call(c.a, "POST", "/v1/sandboxes/"+other+"/commands", tokA, `{"args": ["true"]}`, nil)
	wantCode(t, res, b, http.StatusForbidden, apiv1.CodeTokenScope)
	// A genuine forward token for that request does not widen the sandbox
	// token at B.
	fwd := forwardToken(t, c.a.ring, auth.ForwardClaims{From: c.a.id, To: c.b.id, Request: "POST /v1/sandboxes/" + other + "/commands", Base: "http://a.example"})
	res, b = c.call(c.b, "POST", "/v1/sandboxes/"+other+"/commands", tokA, `{"args": ["true"]}`,
		http.Header{noderoute.HeaderForwardedBy: {string(c.a.id)}, noderoute.HeaderForwardToken: {fwd}})
	wantCode(t, res, b, http.StatusForbidden, apiv1.CodeTokenScope)
	// An unpublished key's token is refused by both.
	forged, err := unpublishedRing(t).Issuer().IssueSandbox(auth.SandboxClaims{Sandbox: sb, Project: c.projA})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []*clusterNode{c.a, c.b} {
		res, b := c.call(n, "GET", "/v1/sandboxes/"+c.sandbox, forged, "", nil)
		wantCode(t, res, b, http.StatusUnauthorized, apiv1.CodeUnauthenticated)
	}
	// The data plane refuses it.
	res, b = c.call(c.a, "GET", c.a.srv.URL+apiv1.AttachPath(model.NewProcessID().String()), tokA, "", nil)
	wantCode(t, res, b, http.StatusUnauthorized, apiv1.CodeWrongTokenKind)
}

// TestForwardFilesToHostingNode: file routes and transfers through A reach
// B's agent; the transfer URL names A.
func TestForwardFilesToHostingNode(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	if err := os.WriteFile(filepath.Join(c.root, "greeting"), []byte("hi from B"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, b := c.call(c.a, "GET", "/v1/sandboxes/"+c.sandbox+"/files/stat?path=/greeting", c.keyA, "", nil)
	if res.StatusCode != http.StatusOK || !strings.Contains(string(b), `"size":9`) {
		t.Fatalf("stat via A: %d %s", res.StatusCode, b)
	}
	res, b = c.call(c.a, "POST", "/v1/sandboxes/"+c.sandbox+"/files/transfers", c.keyA, `{"path": "/greeting", "direction": "download"}`, nil)
	var tr apiv1.Transfer
	if res.StatusCode != http.StatusCreated || json.Unmarshal(b, &tr) != nil {
		t.Fatalf("transfer via A: %d %s", res.StatusCode, b)
	}
	if !strings.HasPrefix(tr.URL, c.a.srv.URL+"/data/") {
		t.Fatalf("transfer URL %q does not name A", tr.URL)
	}
	res, b = c.call(c.a, "GET", tr.URL, tr.Token, "", nil)
	if res.StatusCode != http.StatusOK || string(b) != "hi from B" {
		t.Fatalf("download via A: %d %q", res.StatusCode, b)
	}
	// An upload streams through A to B.
	res, b = c.call(c.a, "POST", "/v1/sandboxes/"+c.sandbox+"/files/transfers", c.keyA, `{"path": "/up", "direction": "upload"}`, nil)
	if res.StatusCode != http.StatusCreated || json.Unmarshal(b, &tr) != nil {
		t.Fatalf("transfer via A: %d %s", res.StatusCode, b)
	}
	res, b = c.call(c.a, tr.Method, tr.URL, tr.Token, strings.Repeat("x", 1<<20), http.Header{"Content-Type": {"application/octet-stream"}})
	if res.StatusCode/100 != 2 {
		t.Fatalf("upload via A: %d %s", res.StatusCode, b)
	}
	if got, err := os.ReadFile(filepath.Join(c.root, "up")); err != nil || len(got) != 1<<20 {
		t.Fatalf("uploaded %d bytes, %v", len(got), err)
	}
}

// TestForwardHopGuardAndNodeDown: a forwarded request is never forwarded
// again; an unreachable node is 503 node_unreachable naming it.
func TestForwardHopGuardAndNodeDown(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	var cs apiv1.CommandSession
	res, b := c.call(c.a, "POST", "/v1/sandboxes/"+c.sandbox+"/commands", c.keyA, `{"args": ["sleep", "30"]}`, nil)
	if res.StatusCode != http.StatusCreated || json.Unmarshal(b, &cs) != nil {
		t.Fatalf("create command: %d %s", res.StatusCode, b)
	}

	// A's view: the sandbox is on B; B's view: on C. B answers A's
	// (genuinely) forwarded request with 503 instead of forwarding it on.
	nodeC := model.NewNodeID()
	c.dir.set(nodeC, c.a.srv.URL) // a loop, were it followed
	c.place(c.sandbox, nodeC)
	path := "/v1/sandboxes/" + c.sandbox + "/processes"
	tok, err := c.a.ring.Issuer().IssueForward(auth.ForwardClaims{From: c.a.id, To: c.b.id, Request: "GET " + path, Base: c.a.srv.URL, IssuedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	res, b = c.call(c.b, "GET", path, c.keyA, "", http.Header{noderoute.HeaderForwardedBy: {string(c.a.id)}, noderoute.HeaderForwardToken: {tok}})
	if e := wantCode(t, res, b, http.StatusServiceUnavailable, apiv1.CodeUnavailable); !strings.Contains(e.Message, string(nodeC)) {
		t.Fatalf("message %q does not name node C", e.Message)
	}
	// The data plane likewise: a forwarded attach for a sandbox elsewhere.
	res, b = c.call(c.a, "GET", cs.AttachURL, cs.AttachmentToken, "", http.Header{noderoute.HeaderForwardedBy: {string(nodeC)}})
	wantCode(t, res, b, http.StatusServiceUnavailable, apiv1.CodeUnavailable)

	// B is down: A answers 503 node_unreachable naming B, on both planes.
	c.place(c.sandbox, c.b.id)
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	c.dir.set(c.b.id, down.URL)
	res, b = c.call(c.a, "GET", path, c.keyA, "", nil)
	if e := wantCode(t, res, b, http.StatusServiceUnavailable, apiv1.CodeNodeUnreachable); !strings.Contains(e.Message, string(c.b.id)) {
		t.Fatalf("message %q does not name node B", e.Message)
	}
	res, b = c.call(c.a, "GET", cs.AttachURL, cs.AttachmentToken, "", nil)
	wantCode(t, res, b, http.StatusServiceUnavailable, apiv1.CodeNodeUnreachable)
	// A node nobody registered.
	c.place(c.sandbox, model.NewNodeID())
	res, b = c.call(c.a, "GET", path, c.keyA, "", nil)
	wantCode(t, res, b, http.StatusServiceUnavailable, apiv1.CodeNodeUnreachable)
	// Not placed: the usual errors, nothing forwarded.
	if _, err := c.st.DB().Exec(`UPDATE sandboxes SET state = 'pending', node_id = '' WHERE id = ?`, c.sandbox); err != nil {
		t.Fatal(err)
	}
	res, b = c.call(c.a, "GET", path, c.keyA, "", nil)
	wantCode(t, res, b, http.StatusConflict, apiv1.CodeSandboxNotRunning)
}

// TestForwardAttacks: what a client can send straight to a node.
func TestForwardAttacks(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cmd := `{"args": ["true"]}`
	path := "/v1/sandboxes/" + c.sandbox + "/commands"

	// Spoofed forwarding headers from a plain client: X-Forwarded-* alone
	// are ignored (the URLs name B, where the client really is).
	res, b := c.call(c.b, "POST", path, c.keyA, cmd, http.Header{"X-Forwarded-Host": {"evil.example"}, "X-Forwarded-Proto": {"https"}})
	var cs apiv1.CommandSession
	if res.StatusCode != http.StatusCreated || json.Unmarshal(b, &cs) != nil || !strings.HasPrefix(cs.AttachURL, c.b.srv.URL+"/") {
		t.Fatalf("spoofed X-Forwarded-Host: %d %s", res.StatusCode, b)
	}
	// Posing as a replica needs a valid forward token.
	for name, hdr := range map[string]http.Header{
		"no token":     {noderoute.HeaderForwardedBy: {string(c.a.id)}, "X-Forwarded-Host": {"evil.example"}},
		"garbage":      {noderoute.HeaderForwardedBy: {string(c.a.id)}, noderoute.HeaderForwardToken: {"alp_x.y.z"}},
		"attach token": {noderoute.HeaderForwardedBy: {string(c.a.id)}, noderoute.HeaderForwardToken: {cs.AttachmentToken}},
		"other request": {noderoute.HeaderForwardedBy: {string(c.a.id)}, noderoute.HeaderForwardToken: {
			forwardToken(t, c.a.ring, auth.ForwardClaims{From: c.a.id, To: c.b.id, Request: "GET /v1/sandboxes", Base: "http://evil.example"})}},
		"other node": {noderoute.HeaderForwardedBy: {string(c.a.id)}, noderoute.HeaderForwardToken: {
			forwardToken(t, c.a.ring, auth.ForwardClaims{From: c.a.id, To: c.a.id, Request: "POST " + path, Base: "http://evil.example"})}},
		"other sender": {noderoute.HeaderForwardedBy: {string(c.b.id)}, noderoute.HeaderForwardToken: {
			forwardToken(t, c.a.ring, auth.ForwardClaims{From: c.a.id, To: c.b.id, Request: "POST " + path, Base: "http://evil.example"})}},
		"unpublished key": {noderoute.HeaderForwardedBy: {string(c.a.id)}, noderoute.HeaderForwardToken: {
			forwardToken(t, unpublishedRing(t), auth.ForwardClaims{From: c.a.id, To: c.b.id, Request: "POST " + path, Base: "http://evil.example"})}},
	} {
		res, b := c.call(c.b, "POST", path, c.keyA, cmd, hdr)
		if res.StatusCode != http.StatusUnauthorized || strings.Contains(string(b), "evil") {
			t.Fatalf("%s: %d %s, want 401", name, res.StatusCode, b)
		}
	}
	// A genuine forward token still needs the API key: the node
	// authenticates it itself.
	tok := forwardToken(t, c.a.ring, auth.ForwardClaims{From: c.a.id, To: c.b.id, Request: "POST " + path, Base: "http://a.example"})
	res, b = c.call(c.b, "POST", path, "", cmd, http.Header{noderoute.HeaderForwardedBy: {string(c.a.id)}, noderoute.HeaderForwardToken: {tok}})
	wantCode(t, res, b, http.StatusUnauthorized, apiv1.CodeUnauthenticated)
	res, b = c.call(c.b, "POST", path, c.keyA, cmd, http.Header{noderoute.HeaderForwardedBy: {string(c.a.id)}, noderoute.HeaderForwardToken: {tok}})
	if res.StatusCode != http.StatusCreated || json.Unmarshal(b, &cs) != nil || !strings.HasPrefix(cs.AttachURL, "http://a.example/data/") {
		t.Fatalf("genuine forward: %d %s", res.StatusCode, b)
	}

	// Data-plane tokens at replica A: one signed by an unpublished key, a
	// forged kid and an expired one are refused at A (never proxied).
	cs.AttachURL = c.a.srv.URL + strings.TrimPrefix(cs.AttachURL, "http://a.example")
	claims, err := c.b.ring.Verifier().Verify(cs.AttachmentToken, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	claims.IssuedAt, claims.NotBefore, claims.ExpiresAt = time.Now(), time.Time{}, time.Time{}
	forged, err := unpublishedRing(t).Issuer().Issue(claims)
	if err != nil {
		t.Fatal(err)
	}
	res, b = c.call(c.a, "GET", cs.AttachURL, forged, "", nil)
	wantCode(t, res, b, http.StatusUnauthorized, apiv1.CodeUnauthenticated)
	hdr, _ := json.Marshal(map[string]string{"alg": "EdDSA", "typ": "JWT", "kid": "zzzzzzzzzzzzzzzz"})
	res, b = c.call(c.a, "GET", cs.AttachURL, "alt_"+base64.RawURLEncoding.EncodeToString(hdr)+"."+strings.SplitN(forged, ".", 2)[1], "", nil)
	wantCode(t, res, b, http.StatusUnauthorized, apiv1.CodeUnauthenticated)
	claims.IssuedAt, claims.NotBefore, claims.ExpiresAt = time.Now().Add(-10*time.Minute), time.Time{}, time.Now().Add(-9*time.Minute)
	expired, err := c.b.ring.Issuer().Issue(claims)
	if err != nil {
		t.Fatal(err)
	}
	res, b = c.call(c.a, "GET", cs.AttachURL, expired, "", nil)
	wantCode(t, res, b, http.StatusUnauthorized, apiv1.CodeTokenExpired)
}

func forwardToken(t *testing.T, ring *auth.Keyring, c auth.ForwardClaims) string {
	t.Helper()
	c.IssuedAt = time.Now()
	tok, err := ring.Issuer().IssueForward(c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func unpublishedRing(t *testing.T) *auth.Keyring {
	t.Helper()
	ring, err := auth.OpenKeyring(filepath.Join(t.TempDir(), "rogue"), auth.KeyringOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ring
}
