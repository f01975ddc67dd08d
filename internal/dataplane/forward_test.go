package dataplane

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/noderoute"
	"github.com/airlockdev/airlock/internal/store"
)

// nodeDir maps node IDs to advertise URLs.
type nodeDir struct {
	mu   sync.Mutex
	urls map[model.NodeID]string
}

func (d *nodeDir) set(id model.NodeID, u string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.urls[id] = u
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

type noAgents struct{}

func (noAgents) Agent(model.SandboxID) (*agentclient.Client, error) {
	return nil, errors.New("this replica hosts no sandboxes")
}

// replica is a data plane of another process (node R, no sandboxes) over
// the fixture's store, which routes to the fixture's node; the fixture's
// keys are published, the replica learns them from the store.
type replica struct {
	id  model.NodeID
	dir *nodeDir
	srv *httptest.Server
}

func newReplica(t *testing.T, f *fixture) *replica {
	t.Helper()
	if err := f.ring.SetPublisher(noderoute.KeyPublisher(f.st, f.node)); err != nil {
		t.Fatal(err)
	}
	ring, err := auth.OpenKeyring(filepath.Join(t.TempDir(), "r"), auth.KeyringOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v, err := noderoute.ClusterVerifier(ring.Verifier(), f.st)
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{id: model.NewNodeID(), dir: &nodeDir{urls: map[model.NodeID]string{f.node: f.srv.URL}}}
	dp, err := New(Config{Store: f.st, Agents: noAgents{}, Logger: slog.New(slog.DiscardHandler), Now: f.clock,
		Verifier: v, FileTokens: v, NodeID: r.id, Nodes: r.dir})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	dp.Register(mux)
	r.srv = httptest.NewServer(mux)
	t.Cleanup(r.srv.Close)
	return r
}

func (r *replica) do(t *testing.T, method, path, tok string, body io.Reader, hdr http.Header) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, r.srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	for k, v := range hdr {
		req.Header[k] = v
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

// TestForwardAttachSSEAndStdin: attach and stdin sent to a replica that
// does not host the sandbox are proxied to its node, streaming.
func TestForwardAttachSSEAndStdin(t *testing.T) {
	f := newFixture(t)
	r := newReplica(t, f)

	pid, tok := f.session(f.sandbox, "sh", "-c", "echo one; echo two; exit 7")
	res := r.do(t, "GET", apiv1.AttachPath(pid.String()), tok, nil, nil)
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	if out, exit := output(t, readEvents(t, res.Body, nil)); out != "one\ntwo\n" || exit.ExitCode != 7 {
		t.Fatalf("stdout %q, exit %+v", out, exit)
	}

	// 4 MiB of stdin streamed through the replica, checked by the process.
	pid, tok = f.sessionSpec(model.ProcessSpec{Args: []string{"sha256sum"}, Stdin: true})
	data := []byte(strings.Repeat("airlock ", 512<<10))
	if res := r.do(t, "POST", apiv1.ProcessDataPath(pid.String(), "stdin")+"?close=1", tok, strings.NewReader(string(data)),
		http.Header{"Content-Type": {"application/octet-stream"}}); res.StatusCode != http.StatusNoContent {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("stdin via replica: %d %s", res.StatusCode, b)
	}
	sum := sha256.Sum256(data)
	out, _ := output(t, readEvents(t, r.do(t, "GET", apiv1.AttachPath(pid.String()), tok, nil, nil).Body, nil))
	if !strings.HasPrefix(out, hex.EncodeToString(sum[:])) {
		t.Fatalf("sha256sum said %q", out)
	}
}

// TestForwardWebSocket: the WebSocket upgrade passes through the replica.
func TestForwardWebSocket(t *testing.T) {
	f := newFixture(t)
	r := newReplica(t, f)
	pid, tok := f.session(f.sandbox, "sh", "-c", "echo via websocket")
	ctx := testCtx(t)
	conn, res, err := websocket.Dial(ctx, r.srv.URL+apiv1.ProcessDataPath(pid.String(), "ws"),
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}}})
	if err != nil {
		status := 0
		if res != nil {
			status = res.StatusCode
		}
		t.Fatalf("dial via replica: %v (status %d)", err, status)
	}
	t.Cleanup(func() { conn.CloseNow() })
	c := &wsClient{t: t, ctx: ctx, conn: conn}
	if out, exit := c.untilExit(); out != "via websocket\n" || exit.ExitCode != 0 {
		t.Fatalf("output %q, exit %+v", out, exit)
	}
}

// TestForwardRefusals: forged tokens are refused at the replica, a
// forwarded request is never forwarded again, an unreachable node is 503
// node_unreachable, and a node that does not route refuses a token for
// another node instead of serving it.
func TestForwardRefusals(t *testing.T) {
	f := newFixture(t)
	r := newReplica(t, f)
	pid, tok := f.session(f.sandbox, "sh", "-c", "echo x")
	path := apiv1.AttachPath(pid.String())

	// Signed by a key nobody published: refused at the replica.
	rogue, err := auth.OpenKeyring(filepath.Join(t.TempDir(), "rogue"), auth.KeyringOptions{Now: f.clock})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := f.st.GetCommandSessionByProcess(context.Background(), pid)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := rogue.Issuer().Issue(auth.AttachClaims{Session: cs.ID, Sandbox: cs.SandboxID, Process: pid, Node: f.node,
		Actions: auth.AllActions(), IssuedAt: f.clock()})
	if err != nil {
		t.Fatal(err)
	}
	if code := errorCode(t, r.do(t, "GET", path, forged, nil, nil)); code != apiv1.CodeUnauthenticated {
		t.Fatalf("unpublished key: %s", code)
	}
	// Expired.
	old := f.token(cs, auth.AllActions(), f.clock().Add(-10*auth.AttachTokenTTL), f.clock().Add(-9*auth.AttachTokenTTL))
	if code := errorCode(t, r.do(t, "GET", path, old, nil, nil)); code != apiv1.CodeTokenExpired {
		t.Fatalf("expired: %s", code)
	}
	// The hop guard.
	res := r.do(t, "GET", path, tok, nil, http.Header{noderoute.HeaderForwardedBy: {string(model.NewNodeID())}})
	if res.StatusCode != http.StatusServiceUnavailable || errorCode(t, res) != apiv1.CodeUnavailable {
		t.Fatalf("hop guard: %d", res.StatusCode)
	}
	// The node without routing (the fixture's own data plane) refuses a
	// token for a sandbox on another node.
	other := f.tokenFor(cs, model.NewNodeID())
	if res := f.get(f.attachURL(pid.String()), "Bearer "+other, nil); res.StatusCode != http.StatusForbidden {
		t.Fatalf("token for another node at a non-routing node: %d", res.StatusCode)
	}
	// Down.
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	r.dir.set(f.node, down.URL)
	res = r.do(t, "GET", path, tok, nil, nil)
	if res.StatusCode != http.StatusServiceUnavailable || errorCode(t, res) != apiv1.CodeNodeUnreachable {
		t.Fatalf("node down: %d", res.StatusCode)
	}
}

// tokenFor issues a token for cs naming node.
func (f *fixture) tokenFor(cs model.CommandSession, node model.NodeID) string {
	f.t.Helper()
	tok, err := f.ring.Issuer().Issue(auth.AttachClaims{Session: cs.ID, Sandbox: cs.SandboxID, Process: cs.ProcessID, Node: node,
		Actions: auth.AllActions(), IssuedAt: f.clock()})
	if err != nil {
		f.t.Fatal(err)
	}
	return tok
}
