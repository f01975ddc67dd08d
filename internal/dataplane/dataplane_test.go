package dataplane

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agent"
	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/store/sqlite"
)

// fixture is a data plane over a real SQLite store and a real guest agent
// served in-process (its processes are real /bin/sh processes).
type fixture struct {
	t       *testing.T
	st      store.Store
	now     time.Time
	nowMu   sync.Mutex
	srv     *httptest.Server
	project model.ProjectID
	sandbox model.SandboxID
	client  *agentclient.Client
	dp      *DataPlane
	ring    *auth.Keyring // the API's signing keys; the data plane gets only ring.Verifier()
	ringDir string
	node    model.NodeID
}

func (f *fixture) Agent(model.SandboxID) (*agentclient.Client, error) { return f.client, nil }

func (f *fixture) clock() time.Time {
	f.nowMu.Lock()
	defer f.nowMu.Unlock()
	return f.now
}

func (f *fixture) advance(d time.Duration) {
	f.nowMu.Lock()
	defer f.nowMu.Unlock()
	f.now = f.now.Add(d)
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "airlock.db"), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f := &fixture{t: t, st: st, now: time.Now().UTC().Truncate(time.Microsecond)}

	ag, err := agent.New(agent.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	agentCtx, stopAgent := context.WithCancel(ctx)
	t.Cleanup(func() {
		stopAgent()
		ag.Close()
	})
	f.client = agentclient.New(func(ctx context.Context) (net.Conn, error) {
		host, guest := net.Pipe()
		go ag.ServeConn(agentCtx, guest)
		return host, nil
	}, log)
	t.Cleanup(func() { f.client.Close() })

	// A project, a template and a running sandbox, made through the store.
	f.project = model.NewProjectID()
	must(t, st.CreateProject(ctx, model.Project{ID: f.project, Name: "p", CreatedAt: f.now}))
	digest := model.DigestFromSHA256([32]byte{1})
	must(t, st.PutTemplate(ctx, model.Template{Digest: digest, Manifest: []byte("{}"), CreatedAt: f.now}))
	f.sandbox = f.addSandbox(digest)

	f.node = model.NewNodeID()
	f.ringDir = filepath.Join(t.TempDir(), "attach")
	f.ring, err = auth.OpenKeyring(f.ringDir, auth.KeyringOptions{Now: f.clock})
	if err != nil {
		t.Fatal(err)
	}
	dp, err := New(Config{Store: st, Agents: f, Logger: log, Now: f.clock, Verifier: f.ring.Verifier(), NodeID: f.node})
	if err != nil {
		t.Fatal(err)
	}
	f.dp = dp
	mux := http.NewServeMux()
	dp.Register(mux)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

// addSandbox inserts a sandbox and drives it to running through the store.
func (f *fixture) addSandbox(digest model.TemplateDigest) model.SandboxID {
	ctx := context.Background()
	id := model.NewSandboxID()
	sb := model.Sandbox{ID: id, ProjectID: f.project, Template: digest, Resources: model.DefaultResources(),
		Env: model.Env{}, Metadata: model.Metadata{}, State: model.StatePending, CreatedAt: f.now, UpdatedAt: f.now}
	op := model.Operation{ID: model.NewOperationID(), ProjectID: f.project, SandboxID: id, Kind: model.OpCreate,
		State: model.OpPending, CreatedAt: f.now, UpdatedAt: f.now}
	must(f.t, f.st.CreateSandbox(ctx, sb, policy.Spec{}, op, nil))
	must(f.t, f.st.TransitionSandbox(ctx, id, model.StatePending, model.StateCreating, "", f.now))
	must(f.t, f.st.TransitionSandbox(ctx, id, model.StateCreating, model.StateRunning, "", f.now))
	return id
}

// session creates a command session for args and returns its process ID
// and a token for it with every action, as the API would.
func (f *fixture) session(sandbox model.SandboxID, args ...string) (model.ProcessID, string) {
	f.t.Helper()
	cs := f.commandSession(sandbox, args...)
	return cs.ProcessID, f.token(cs, auth.AllActions(), f.clock(), time.Time{})
}

// commandSession stores a command session for args.
func (f *fixture) commandSession(sandbox model.SandboxID, args ...string) model.CommandSession {
	f.t.Helper()
	cs := model.CommandSession{
		ID: model.NewCommandSessionID(), ProjectID: f.project, SandboxID: sandbox, ProcessID: model.NewProcessID(),
		Spec: model.ProcessSpec{Args: args, Env: model.Env{}}, TokenHash: make([]byte, 32),
		CreatedAt: f.clock(), ExpiresAt: f.clock().Add(120 * time.Second),
	}
	must(f.t, f.st.CreateCommandSession(context.Background(), cs, nil))
	return cs
}

// token issues a token for cs with the ring's active key; a zero exp means
// the default lifetime.
func (f *fixture) token(cs model.CommandSession, actions []auth.Action, iat, exp time.Time) string {
	f.t.Helper()
	tok, err := f.ring.Issuer().Issue(auth.AttachClaims{
		Session: cs.ID, Sandbox: cs.SandboxID, Process: cs.ProcessID, Node: f.node,
		Actions: actions, IssuedAt: iat, ExpiresAt: exp,
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return tok
}

func (f *fixture) attachURL(pid string) string {
	return f.srv.URL + "/data/v1/processes/" + pid + "/attach"
}

// get performs an attach request with the given Authorization header value
// (empty: none) and extra headers.
func (f *fixture) get(url, authz string, hdr map[string]string) *http.Response {
	f.t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

type sseEvent struct {
	id, name, data string
}

// readEvents reads SSE events until the stream ends or stop returns true.
func readEvents(t *testing.T, r io.Reader, stop func(sseEvent) bool) []sseEvent {
	t.Helper()
	var events []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.name != "" {
				events = append(events, cur)
				if stop != nil && stop(cur) {
					return events
				}
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		}
	}
	return events
}

// output joins the stdout data of events and returns the exit event's data.
func output(t *testing.T, events []sseEvent) (stdout string, exit apiv1.ExitEventData) {
	t.Helper()
	var b strings.Builder
	for _, ev := range events {
		switch ev.name {
		case apiv1.EventStdout:
			var d apiv1.OutputEventData
			if err := json.Unmarshal([]byte(ev.data), &d); err != nil {
				t.Fatal(err)
			}
			b.Write(d.Data)
		case apiv1.EventExit:
			if err := json.Unmarshal([]byte(ev.data), &exit); err != nil {
				t.Fatal(err)
			}
		}
	}
	return b.String(), exit
}

func TestAttachStreamsOutputAndExit(t *testing.T) {
	f := newFixture(t)
	pid, tok := f.session(f.sandbox, "sh", "-c", "echo one; echo two; exit 7")
	resp := f.get(f.attachURL(pid.String()), "Bearer "+tok, nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events := readEvents(t, resp.Body, nil)
	stdout, exit := output(t, events)
	if stdout != "one\ntwo\n" || exit.ExitCode != 7 {
		t.Fatalf("stdout %q, exit %+v (events %+v)", stdout, exit, events)
	}
	last := uint64(0)
	for _, ev := range events {
		n, err := strconv.ParseUint(ev.id, 10, 64)
		if err != nil || n <= last {
			t.Fatalf("event ids must be increasing integers: %+v", events)
		}
		last = n
	}
	// The process started once: it is not in the store's output, and the
	// token may attach again (a reconnect) without running it twice.
	again := readEvents(t, f.get(f.attachURL(pid.String()), "Bearer "+tok, nil).Body, nil)
	if out, _ := output(t, again); out != "one\ntwo\n" {
		t.Fatalf("reattach replays the buffer, got %q", out)
	}
}

func TestAttachResumesFromLastEventID(t *testing.T) {
	f := newFixture(t)
	// Each line waits for a file the test creates, so the stream is cut at a
	// known point.
	dir := t.TempDir()
	script := fmt.Sprintf("echo a; while [ ! -e %[1]s/go ]; do sleep 0.05; done; echo b; echo c", dir)
	pid, tok := f.session(f.sandbox, "sh", "-c", script)
	resp := f.get(f.attachURL(pid.String()), "Bearer "+tok, nil)
	first := readEvents(t, resp.Body, func(ev sseEvent) bool { return ev.name == apiv1.EventStdout })
	resp.Body.Close() // the client goes away; the process keeps running
	must(t, touch(filepath.Join(dir, "go")))

	rest := readEvents(t, f.get(f.attachURL(pid.String()), "Bearer "+tok, map[string]string{"Last-Event-ID": first[len(first)-1].id}).Body, nil)
	got, exit := output(t, append(first, rest...))
	if got != "a\nb\nc\n" || exit.ExitCode != 0 {
		t.Fatalf("resumed output %q exit %+v; want each line exactly once", got, exit)
	}
}

func TestAttachRefusesBadCredentials(t *testing.T) {
	f := newFixture(t)
	pid, tok := f.session(f.sandbox, "true")
	otherPid, otherTok := f.session(f.sandbox, "true")
	_ = otherPid
	apiKey, _, _ := auth.GenerateAPIKey()
	cases := []struct {
		name   string
		url    string
		authz  string
		status int
		code   string
	}{
		{"no token", f.attachURL(pid.String()), "", 401, apiv1.CodeUnauthenticated},
		{"API key", f.attachURL(pid.String()), "Bearer " + apiKey, 401, apiv1.CodeWrongTokenKind},
		{"API key in query", f.attachURL(pid.String()) + "?token=" + apiKey, "", 401, apiv1.CodeWrongTokenKind},
		{"malformed", f.attachURL(pid.String()), "Bearer alt_not-base32!", 401, apiv1.CodeUnauthenticated},
		{"basic auth", f.attachURL(pid.String()), "Basic " + tok, 401, apiv1.CodeUnauthenticated},
		{"forged", f.attachURL(pid.String()), "Bearer alt_" + strings.Repeat("a", 52), 401, apiv1.CodeUnauthenticated},
		{"another session's token", f.attachURL(pid.String()), "Bearer " + otherTok, 403, apiv1.CodePermissionDenied},
		{"unknown process", f.attachURL(model.NewProcessID().String()), "Bearer " + tok, 403, apiv1.CodePermissionDenied},
		{"bad process ID", f.attachURL("../../v1/sandboxes"), "Bearer " + tok, 404, ""},
		{"malformed process ID", f.attachURL("proc_x"), "Bearer " + tok, 400, apiv1.CodeInvalidRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := f.get(tc.url, tc.authz, nil)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if tc.code == "" {
				return
			}
			var e apiv1.Error
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatal(err)
			}
			if e.Code != tc.code || e.Message == "" {
				t.Fatalf("error %+v, want code %s", e, tc.code)
			}
		})
	}
	// None of the refused attempts started the process.
	if _, err := f.client.Status(context.Background(), pid.String()); err == nil {
		t.Fatal("a refused attach started the process")
	}
}

func TestAttachRefusesExpiredToken(t *testing.T) {
	f := newFixture(t)
	pid, tok := f.session(f.sandbox, "true")
	f.advance(auth.AttachTokenTTL + auth.ClockSkew + time.Second)
	resp := f.get(f.attachURL(pid.String()), "Bearer "+tok, nil)
	var e apiv1.Error
	_ = json.NewDecoder(resp.Body).Decode(&e)
	if resp.StatusCode != 401 || e.Code != apiv1.CodeTokenExpired {
		t.Fatalf("status %d, error %+v", resp.StatusCode, e)
	}
	if _, err := f.client.Status(context.Background(), pid.String()); err == nil {
		t.Fatal("an expired token started the process")
	}
}

func TestAttachNeedsRunningSandbox(t *testing.T) {
	f := newFixture(t)
	pid, tok := f.session(f.sandbox, "true")
	ctx := context.Background()
	must(t, f.st.TransitionSandbox(ctx, f.sandbox, model.StateRunning, model.StateFailed, "test", f.now))
	resp := f.get(f.attachURL(pid.String()), "Bearer "+tok, nil)
	var e apiv1.Error
	_ = json.NewDecoder(resp.Body).Decode(&e)
	if resp.StatusCode != 409 || e.Code != apiv1.CodeSandboxNotRunning {
		t.Fatalf("status %d, error %+v", resp.StatusCode, e)
	}
}

func TestAttachReportsExecFailure(t *testing.T) {
	f := newFixture(t)
	pid, tok := f.session(f.sandbox, "no-such-program-anywhere")
	events := readEvents(t, f.get(f.attachURL(pid.String())+"?token="+tok, "", nil).Body, nil)
	if len(events) != 1 || events[0].name != apiv1.EventError {
		t.Fatalf("events %+v", events)
	}
	var e apiv1.Error
	if err := json.Unmarshal([]byte(events[0].data), &e); err != nil {
		t.Fatal(err)
	}
	if e.Code != apiv1.CodeExecFailed || !strings.Contains(e.Message, "no-such-program-anywhere") {
		t.Fatalf("error event %+v", e)
	}
}

func touch(path string) error {
	f, err := createFile(path)
	if err != nil {
		return err
	}
	return f.Close()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func createFile(path string) (io.WriteCloser, error) { return os.Create(path) }

// TestAttachRefusesPausedSandbox: a paused (or pausing) sandbox's
// processes get no new attachment, with sandbox_paused saying how to
// resume; nothing is started.
func TestAttachRefusesPausedSandbox(t *testing.T) {
	f := newFixture(t)
	pid, tok := f.session(f.sandbox, "true")
	ctx := context.Background()
	must(t, f.st.TransitionSandbox(ctx, f.sandbox, model.StateRunning, model.StatePausing, "", f.now))
	for _, state := range []model.SandboxState{model.StatePausing, model.StatePaused} {
		if state == model.StatePaused {
			must(t, f.st.TransitionSandbox(ctx, f.sandbox, model.StatePausing, model.StatePaused, "", f.now))
		}
		resp := f.get(f.attachURL(pid.String()), "Bearer "+tok, nil)
		var e apiv1.Error
		_ = json.NewDecoder(resp.Body).Decode(&e)
		if resp.StatusCode != 409 || e.Code != apiv1.CodeSandboxPaused || !strings.Contains(e.Message, "resume") {
			t.Fatalf("%s: status %d, error %+v", state, resp.StatusCode, e)
		}
	}
	if _, err := f.client.Status(ctx, pid.String()); err == nil {
		t.Fatal("an attach to a paused sandbox started the process")
	}
}
