package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/e2b/control"
	"github.com/airlockdev/airlock/internal/e2b/target"
	"github.com/airlockdev/airlock/internal/model"
)

type fakeSandboxes map[model.SandboxID]model.Sandbox

func (f fakeSandboxes) GetSandboxByID(_ context.Context, id model.SandboxID) (model.Sandbox, error) {
	sb, ok := f[id]
	if !ok {
		return model.Sandbox{}, errors.New("not found")
	}
	return sb, nil
}

// tag answers with its name, and the target it saw, so a test can tell
// where a request went.
func tag(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, ok := target.From(r.Context())
		w.Header().Set("X-Went", name)
		if ok {
			w.Header().Set("X-Target", t.Sandbox.String()+"/"+t.User)
		}
		w.WriteHeader(http.StatusTeapot)
	})
}

// rtFunc is an http.RoundTripper of a function.
type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// serverAPI stands in for Airlock's API in-process: it sends each request
// to a test server instead, marked (X-Test-As) with the project and
// sandbox it acts as.
type serverAPI struct{ base *url.URL }

func (a *serverAPI) AsSandbox(p model.ProjectID, sb model.SandboxID) http.RoundTripper {
	return rtFunc(func(req *http.Request) (*http.Response, error) {
		out := req.Clone(req.Context())
		out.URL.Scheme, out.URL.Host = a.base.Scheme, a.base.Host
		out.Header.Set("X-Test-As", p.String()+"/"+sb.String())
		return http.DefaultTransport.RoundTrip(out)
	})
}

// apiSaw is what the stand-in API's port route answers: what it got.
type apiSaw struct {
	As, Method, Path, Host string
	Header                 http.Header
}

// newAPIServer is the stand-in API's server: its ports route answers 418
// with what it saw; anything else is h's (nil: 404).
func newAPIServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.URL.Path, "/ports/") {
			if h == nil {
				http.NotFound(w, r)
				return
			}
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("X-Went", "api")
		w.Header().Set("X-Target", r.Header.Get("X-Test-As"))
		w.WriteHeader(http.StatusTeapot)
		_ = json.NewEncoder(w).Encode(apiSaw{As: r.Header.Get("X-Test-As"), Method: r.Method, Path: r.URL.Path, Host: r.Host, Header: r.Header})
	}))
	t.Cleanup(srv.Close)
	return srv
}

func newTestGateway(t *testing.T, sandboxes fakeSandboxes) *Gateway {
	t.Helper()
	return newTestGatewayAPI(t, sandboxes, newAPIServer(t, nil))
}

func newTestGatewayAPI(t *testing.T, sandboxes fakeSandboxes, api *httptest.Server) *Gateway {
	t.Helper()
	base, err := url.Parse(api.URL)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Config{
		Native:      tag("native"),
		Control:     tag("control"),
		OwnsControl: func(p string) bool { return strings.HasPrefix(p, "/sandboxes") || strings.HasPrefix(p, "/v2/") },
		Process:     Service{Path: "/process.Process/", Handler: tag("process")},
		Filesystem:  Service{Path: "/filesystem.Filesystem/", Handler: tag("filesystem")},
		Files:       tag("files"),
		Sandboxes:   sandboxes,
		API:         &serverAPI{base: base},
		Verify: func(tok string) (model.SandboxID, model.ProjectID, error) {
			id, ok := strings.CutPrefix(tok, "tok-")
			if !ok {
				return "", "", errors.New("forged")
			}
			id, project, named := strings.Cut(id, "@") // tok-<sandbox>@<project>: a token naming another project
			sb, err := model.ParseSandboxID(id)
			if !named {
				project = sandboxes[sb].ProjectID.String()
			}
			return sb, model.ProjectID(project), err
		},
		Tokens: func(sb model.SandboxID, p model.ProjectID) ([]string, error) {
			return []string{"tok-" + sb.String()}, nil
		},
		SelfURL: "http://127.0.0.1:1",
		Logger:  slog.New(slog.DiscardHandler),
		Now:     func() time.Time { return time.Unix(1_800_000_000, 0) },
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestGatewayRouting(t *testing.T) {
	running := model.Sandbox{ID: model.NewSandboxID(), ProjectID: model.NewProjectID(), State: model.StateRunning}
	other := model.Sandbox{ID: model.NewSandboxID(), ProjectID: model.NewProjectID(), State: model.StateRunning}
	suspended := model.Sandbox{ID: model.NewSandboxID(), ProjectID: model.NewProjectID(), State: model.StateSuspended}
	pooled := model.Sandbox{ID: model.NewSandboxID(), ProjectID: model.SystemProject, State: model.StateRunning}
	public := model.Sandbox{ID: model.NewSandboxID(), ProjectID: model.NewProjectID(), State: model.StateRunning, PublicPorts: true}
	publicAsleep := model.Sandbox{ID: model.NewSandboxID(), ProjectID: model.NewProjectID(), State: model.StateSuspended, PublicPorts: true}
	// The old rule's metadata key no longer makes ports public.
	e2bMetadata := model.Sandbox{ID: model.NewSandboxID(), ProjectID: model.NewProjectID(), State: model.StateRunning, Metadata: model.Metadata{"e2b.airlock/template-id": "base"}}
	deleted := model.Sandbox{ID: model.NewSandboxID(), ProjectID: model.NewProjectID(), State: model.StateDeleted, PublicPorts: true}
	g := newTestGateway(t, fakeSandboxes{running.ID: running, other.ID: other, suspended.ID: suspended, pooled.ID: pooled, public.ID: public,
		publicAsleep.ID: publicAsleep, e2bMetadata.ID: e2bMetadata, deleted.ID: deleted})
	as := func(sb model.Sandbox) string { return sb.ProjectID.String() + "/" + sb.ID.String() }
	port := func(sb model.Sandbox, p string) map[string]string {
		return map[string]string{headerSandboxID: sb.ID.String(), headerSandboxPort: p}
	}
	envd := func(sb model.Sandbox) map[string]string {
		return map[string]string{headerSandboxID: sb.ID.String(), headerSandboxPort: "49983"}
	}
	withTok := func(h map[string]string, tok string) map[string]string {
		h["X-Access-Token"] = tok
		return h
	}
	signed := "/files?path=%2Fhome%2Fuser%2Fa.txt&signature=" + url.QueryEscape(fileSignature("/home/user/a.txt", opRead, "", "tok-"+running.ID.String(), ""))
	tests := []struct {
		name, method, path string
		host               string
		headers            map[string]string
		basicUser          string
		status             int
		went, target       string
	}{
		{"native api", "GET", "/v1/sandboxes", "127.0.0.1:8080", nil, "", 418, "native", ""},
		{"control v2", "POST", "/v2/sandboxes", "127.0.0.1:8080", nil, "", 418, "control", ""},
		{"control v1", "DELETE", "/sandboxes/x", "127.0.0.1:8080", nil, "", 418, "control", ""},
		{"health running", "GET", "/health", "h", withTok(envd(running), "tok-"+running.ID.String()), "", 204, "", ""},
		{"health suspended does not wake", "GET", "/health", "h", withTok(envd(suspended), "tok-"+suspended.ID.String()), "", 502, "", ""},
		{"health of a deleted sandbox with its token", "GET", "/health", "h", withTok(envd(deleted), "tok-"+deleted.ID.String()), "", 502, "", ""},
		{"health without a token", "GET", "/health", "h", envd(running), "", 401, "", ""},
		{"unknown sandbox", "GET", "/health", "h", map[string]string{headerSandboxID: model.NewSandboxID().String(), headerSandboxPort: "49983"}, "", 401, "", ""},
		{"pool sandbox is unknown", "POST", "/process.Process/List", "h", withTok(envd(pooled), "tok-"+pooled.ID.String()), "", 502, "", ""},
		{"malformed sandbox header", "GET", "/health", "h", map[string]string{headerSandboxID: "x", headerSandboxPort: "49983"}, "", 400, "", ""},
		{"rpc without token", "POST", "/process.Process/List", "h", envd(running), "", 401, "", ""},
		{"rpc forged token", "POST", "/process.Process/List", "h", withTok(envd(running), "forged"), "", 401, "", ""},
		{"rpc other sandbox's token", "POST", "/process.Process/List", "h", withTok(envd(running), "tok-"+other.ID.String()), "", 401, "", ""},
		{"rpc token naming another project", "POST", "/process.Process/List", "h", withTok(envd(running), "tok-"+running.ID.String()+"@"+other.ProjectID.String()), "", 401, "", ""},
		{"guest port with a token naming another project", "GET", "/", "h", withTok(port(running, "3000"), "tok-"+running.ID.String()+"@"+other.ProjectID.String()), "", 401, "", ""},
		{"rpc process", "POST", "/process.Process/List", "h", withTok(envd(running), "tok-"+running.ID.String()), "", 418, "process", running.ID.String() + "/"},
		{"rpc user by basic auth", "POST", "/filesystem.Filesystem/Stat", "h", withTok(envd(running), "tok-"+running.ID.String()), "root", 418, "filesystem", running.ID.String() + "/root"},
		{"files by token", "GET", "/files?path=/a&username=user", "h", withTok(envd(running), "tok-"+running.ID.String()), "", 418, "files", running.ID.String() + "/user"},
		{"files signed", "GET", signed, "h", envd(running), "", 418, "files", running.ID.String() + "/"},
		{"files signature for reading used to write", "POST", signed, "h", envd(running), "", 401, "", ""},
		{"files unsigned", "GET", "/files?path=/a", "h", envd(running), "", 401, "", ""},
		{"envd unknown path", "GET", "/nope", "h", withTok(envd(running), "tok-"+running.ID.String()), "", 404, "", ""},
		{"execute without token", "POST", "/execute", "h", map[string]string{headerSandboxID: running.ID.String(), headerSandboxPort: "49999"}, "", 401, "", ""},
		{"execute with another sandbox's token", "POST", "/execute", "h", map[string]string{headerSandboxID: running.ID.String(), headerSandboxPort: "49999", "X-Access-Token": "tok-" + other.ID.String()}, "", 401, "", ""},
		{"guest port of a native sandbox needs a token", "GET", "/", "h", port(running, "3000"), "", 401, "", ""},
		{"guest port of a native sandbox with another's token", "GET", "/", "h", withTok(port(running, "3000"), "tok-"+other.ID.String()), "", 401, "", ""},
		{"guest port with the token", "GET", "/", "h", withTok(port(running, "3000"), "tok-"+running.ID.String()), "", 418, "api", as(running)},
		{"guest port with the traffic token", "GET", "/", "h", map[string]string{headerSandboxID: running.ID.String(), headerSandboxPort: "3000", "E2B-Traffic-Access-Token": "tok-" + running.ID.String()}, "", 418, "api", as(running)},
		{"guest port of a sandbox with public ports", "GET", "/", "h", port(public, "3000"), "", 418, "api", as(public)},
		{"the old metadata key makes no port public", "GET", "/", "h", port(e2bMetadata, "3000"), "", 401, "", ""},
		{"deleted sandbox", "GET", "/", "h", port(deleted, "3000"), "", 401, "", ""},
		{"deleted sandbox with its token", "GET", "/", "h", withTok(port(deleted, "3000"), "tok-"+deleted.ID.String()), "", 502, "", ""},
		{"anonymous traffic does not wake", "GET", "/", "h", port(publicAsleep, "3000"), "", 401, "", ""},
		{"code interpreter of a public sandbox is not public", "POST", "/contexts", "h", port(public, "49999"), "", 401, "", ""},
		{"code interpreter trailing slash", "POST", "/execute/", "h", port(public, "49999"), "", 401, "", ""},
		{"code interpreter health is public", "GET", "/health", "h", port(public, "49999"), "", 418, "api", as(public)},
		{"host routing to envd", "POST", "/process.Process/List", "49983-" + running.ID.String() + ".sbx.test", map[string]string{"X-Access-Token": "tok-" + running.ID.String()}, "", 418, "process", running.ID.String() + "/"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.path, strings.NewReader(""))
			r.Host = tc.host
			for k, v := range tc.headers {
				r.Header.Set(k, v)
			}
			if tc.basicUser != "" {
				r.SetBasicAuth(tc.basicUser, "")
			}
			w := httptest.NewRecorder()
			g.ServeHTTP(w, r)
			body, _ := io.ReadAll(w.Body)
			if w.Code != tc.status || w.Header().Get("X-Went") != tc.went || w.Header().Get("X-Target") != tc.target {
				t.Fatalf("%s %s → %d went=%q target=%q (%s); want %d went=%q target=%q",
					tc.method, tc.path, w.Code, w.Header().Get("X-Went"), w.Header().Get("X-Target"), body, tc.status, tc.went, tc.target)
			}
			if w.Code >= 400 && tc.went == "" {
				var e struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				}
				if err := json.Unmarshal(body, &e); err != nil || e.Code != w.Code || e.Message == "" {
					t.Fatalf("error body %q: want {code:%d,message}", body, w.Code)
				}
			}
		})
	}
}

// TestGatewayAnonymousAnswerUniform: a request without a credential for
// the sandbox it names learns nothing of it. Envd's /health (E2B's
// isRunning), an RPC, a /files URL signed with another sandbox's token
// and a guest port get one answer, the same status and the same body but
// for the ID named, for an unknown ID, a deleted sandbox, a pool's, a
// paused one, a running one (private, or public but not on envd's port)
// and one of another project, with no token or with a token of another
// sandbox. Before, /health answered 204 for running, 502 "not found" for
// unknown and 502 "is suspended" for paused sandboxes to anyone.
func TestGatewayAnonymousAnswerUniform(t *testing.T) {
	mk := func(state model.SandboxState, public bool, project model.ProjectID) model.Sandbox {
		return model.Sandbox{ID: model.NewSandboxID(), ProjectID: project, State: state, PublicPorts: public}
	}
	mine := model.NewProjectID()
	attacker := mk(model.StateRunning, false, model.NewProjectID()) // the prober's own sandbox: its token is valid, for it
	targets := map[string]model.Sandbox{
		"running":        mk(model.StateRunning, false, mine),
		"public running": mk(model.StateRunning, true, mine),
		"suspended":      mk(model.StateSuspended, false, mine),
		"paused public":  mk(model.StateSuspended, true, mine),
		"deleted":        mk(model.StateDeleted, false, mine),
		"pool":           mk(model.StateRunning, false, model.SystemProject),
	}
	sbs := fakeSandboxes{attacker.ID: attacker}
	for _, sb := range targets {
		sbs[sb.ID] = sb
	}
	targets["unknown"] = model.Sandbox{ID: model.NewSandboxID()}
	g := newTestGateway(t, sbs)
	signedByAttacker := func(id model.SandboxID) string {
		return "/files?path=%2Fetc%2Fpasswd&signature=" + url.QueryEscape(fileSignature("/etc/passwd", opRead, "", "tok-"+attacker.ID.String(), ""))
	}
	probes := []struct {
		name, method string
		port         string
		path         func(model.SandboxID) string
		token        string
	}{
		{"health", "GET", "49983", func(model.SandboxID) string { return "/health" }, ""},
		{"health, another sandbox's token", "GET", "49983", func(model.SandboxID) string { return "/health" }, "tok-" + attacker.ID.String()},
		{"health, forged token", "GET", "49983", func(model.SandboxID) string { return "/health" }, "forged"},
		{"rpc", "POST", "49983", func(model.SandboxID) string { return "/process.Process/List" }, ""},
		{"rpc, another sandbox's token", "POST", "49983", func(model.SandboxID) string { return "/process.Process/List" }, "tok-" + attacker.ID.String()},
		{"files signed by another sandbox", "GET", "49983", signedByAttacker, ""},
		{"files unsigned", "GET", "49983", func(model.SandboxID) string { return "/files?path=/etc/passwd" }, ""},
		{"code interpreter", "POST", "49999", func(model.SandboxID) string { return "/execute" }, ""},
		{"guest port, another sandbox's token", "GET", "3000", func(model.SandboxID) string { return "/" }, "tok-" + attacker.ID.String()},
	}
	for _, p := range probes {
		t.Run(p.name, func(t *testing.T) {
			var first string
			for what, sb := range targets {
				if p.port == "3000" && what == "public running" {
					continue // served: its ports are public
				}
				r := httptest.NewRequest(p.method, p.path(sb.ID), nil)
				r.Header.Set(headerSandboxID, sb.ID.String())
				r.Header.Set(headerSandboxPort, p.port)
				if p.token != "" {
					r.Header.Set("X-Access-Token", p.token)
				}
				w := httptest.NewRecorder()
				g.ServeHTTP(w, r)
				got := fmt.Sprintf("%d %s %s", w.Code, w.Header().Get("Content-Type"), strings.ReplaceAll(w.Body.String(), sb.ID.String(), "ID"))
				if w.Code != http.StatusUnauthorized {
					t.Errorf("%s sandbox: %s", what, got)
				}
				if first == "" {
					first = got
				} else if got != first {
					t.Errorf("%s sandbox answers %q, another %q", what, got, first)
				}
			}
		})
	}
	// The token's own holder still learns the state (isRunning).
	for what, want := range map[string]int{"running": 204, "suspended": 502} {
		sb := targets[what]
		r := httptest.NewRequest("GET", "/health", nil)
		r.Header.Set(headerSandboxID, sb.ID.String())
		r.Header.Set(headerSandboxPort, "49983")
		r.Header.Set("X-Access-Token", "tok-"+sb.ID.String())
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("health of the %s sandbox with its token: %d, want %d", what, w.Code, want)
		}
	}
}

// TestGatewayPortRequest: what Airlock's ports route gets for a guest
// port: the sandbox's own path, acting as the sandbox (no credential of
// the caller's, none of E2B's headers), the caller's Host, and
// X-Forwarded-* naming the caller (its own X-Forwarded-* dropped).
func TestGatewayPortRequest(t *testing.T) {
	sb := model.Sandbox{ID: model.NewSandboxID(), ProjectID: model.NewProjectID(), State: model.StateRunning, PublicPorts: true}
	g := newTestGateway(t, fakeSandboxes{sb.ID: sb})
	host := "3000-" + sb.ID.String() + ".sbx.test:8080"
	r := httptest.NewRequest("POST", "/a/b%2Fc?x=1", strings.NewReader("body"))
	r.Host = host
	r.RemoteAddr = "198.51.100.7:4242"
	for k, v := range map[string]string{
		"Authorization": "Basic dXNlcjpwYXNz", "X-Access-Token": "tok-" + sb.ID.String(), "X-API-Key": "e2b_00",
		"E2B-Traffic-Access-Token": "tok-" + sb.ID.String(), "X-Forwarded-For": "192.0.2.66", "X-Forwarded-Host": "evil.example",
		"X-Custom": "kept",
	} {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	g.ServeHTTP(w, r)
	var saw apiSaw
	if w.Code != http.StatusTeapot || json.Unmarshal(w.Body.Bytes(), &saw) != nil {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	want := map[string]string{
		"X-Forwarded-For": "198.51.100.7", "X-Forwarded-Host": host, "X-Forwarded-Proto": "http", "X-Custom": "kept",
		"Authorization": "", "X-Access-Token": "", "X-Api-Key": "", "E2b-Traffic-Access-Token": "", "E2b-Sandbox-Id": "", "E2b-Sandbox-Port": "",
	}
	for k, v := range want {
		if got := strings.Join(saw.Header.Values(k), ","); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	if saw.As != sb.ProjectID.String()+"/"+sb.ID.String() || saw.Host != host || saw.Path != portPath(sb.ID, 3000)+"/a/b/c" || saw.Method != "POST" {
		t.Errorf("the ports route saw %+v", saw)
	}
}

// TestGatewayMaskRequestHost: a sandbox created with E2B's
// maskRequestHost has the gateway ask the ports route for that Host
// (${PORT} the guest port); a client's own Airlock-Guest-Host never
// reaches the ports route, for which the in-process gateway is trusted.
func TestGatewayMaskRequestHost(t *testing.T) {
	masked := model.Sandbox{ID: model.NewSandboxID(), ProjectID: model.NewProjectID(), State: model.StateRunning, PublicPorts: true,
		Metadata: model.Metadata{control.MaskKey: "custom-host.example.com:${PORT}"}}
	plain := model.Sandbox{ID: model.NewSandboxID(), ProjectID: model.NewProjectID(), State: model.StateRunning, PublicPorts: true}
	g := newTestGateway(t, fakeSandboxes{masked.ID: masked, plain.ID: plain})
	for _, tt := range []struct {
		sb   model.Sandbox
		want string
	}{
		{masked, "custom-host.example.com:8080"},
		{plain, ""}, // the forged header is dropped, none is set
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Host = "8080-" + tt.sb.ID.String() + ".sbx.test:8080"
		r.Header.Set(apiv1.HeaderGuestHost, "forged.example")
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		var saw apiSaw
		if w.Code != http.StatusTeapot || json.Unmarshal(w.Body.Bytes(), &saw) != nil {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
		if got := strings.Join(saw.Header.Values(apiv1.HeaderGuestHost), ","); got != tt.want {
			t.Errorf("%s: %s %q, want %q", tt.sb.ID, apiv1.HeaderGuestHost, got, tt.want)
		}
	}
}

// wakeAPI is a stand-in API for one sandbox: GET answers its states in
// turn (the last repeats); wake and resume are recorded and, unless
// failing, make it run.
type wakeAPI struct {
	mu     sync.Mutex
	sb     model.Sandbox
	states []model.SandboxState
	fail   bool
	calls  []string
}

func (f *wakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("X-Test-As") != f.sb.ProjectID.String()+"/"+f.sb.ID.String() || r.Header.Get("Authorization") != "" {
		http.Error(w, "not as the sandbox", http.StatusUnauthorized)
		return
	}
	base := "/v1/sandboxes/" + f.sb.ID.String()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == "GET" && r.URL.Path == base:
		st := f.states[0]
		if len(f.states) > 1 {
			f.states = f.states[1:]
		}
		_ = json.NewEncoder(w).Encode(apiv1.Sandbox{ID: f.sb.ID.String(), State: string(st), StateReason: "the snapshot is gone", UpdatedAt: time.Unix(300, 0)})
	case r.Method == "POST" && (r.URL.Path == base+"/wake" || r.URL.Path == base+"/resume"):
		kind := strings.TrimPrefix(r.URL.Path, base+"/")
		f.calls = append(f.calls, kind)
		if f.fail {
			f.states = []model.SandboxState{model.StateWaking, model.StateSuspended}
		} else {
			f.states = []model.SandboxState{model.StateWaking, model.StateRunning}
		}
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(apiv1.SandboxWithOperation{Operation: apiv1.Operation{ID: model.NewOperationID().String(), Kind: kind, State: "pending"}})
	case strings.HasPrefix(r.URL.Path, "/v1/operations/"):
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(apiv1.Error{Code: apiv1.CodeTokenScope, Message: "not the sandbox's"})
	default:
		http.NotFound(w, r)
	}
}

// TestGatewayWakes: an authenticated envd request to a suspended (paused)
// sandbox wakes (resumes) it through the API, acting as the sandbox, and
// goes on once it runs; a wake that fails is a 502 that says why.
func TestGatewayWakes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		state  model.SandboxState
		fail   bool
		status int
		calls  string
	}{
		{"suspended", model.StateSuspended, false, http.StatusTeapot, "wake"},
		{"paused", model.StatePaused, false, http.StatusTeapot, "resume"},
		{"waking", model.StateWaking, false, http.StatusTeapot, ""},
		{"failed wake", model.StateSuspended, true, http.StatusBadGateway, "wake"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := model.Sandbox{ID: model.NewSandboxID(), ProjectID: model.NewProjectID(), State: tc.state}
			f := &wakeAPI{sb: sb, states: []model.SandboxState{tc.state}, fail: tc.fail}
			if tc.state == model.StateWaking {
				f.states = []model.SandboxState{model.StateWaking, model.StateWaking, model.StateRunning}
			}
			g := newTestGatewayAPI(t, fakeSandboxes{sb.ID: sb}, newAPIServer(t, f))
			r := httptest.NewRequest("POST", "/process.Process/List", strings.NewReader(""))
			r.Header.Set(headerSandboxID, sb.ID.String())
			r.Header.Set(headerSandboxPort, "49983")
			r.Header.Set("X-Access-Token", "tok-"+sb.ID.String())
			w := httptest.NewRecorder()
			g.ServeHTTP(w, r)
			f.mu.Lock()
			defer f.mu.Unlock()
			if w.Code != tc.status || strings.Join(f.calls, ",") != tc.calls {
				t.Fatalf("%d %s, calls %v; want %d, %s", w.Code, w.Body, f.calls, tc.status, tc.calls)
			}
			if tc.fail && !strings.Contains(w.Body.String(), "the snapshot is gone") {
				t.Fatalf("a failed wake does not say why: %s", w.Body)
			}
		})
	}
}

// TestSignedFilesURLMode: a signed /files URL that names no sandbox (what
// uploadUrl/downloadUrl build with E2B_SANDBOX_URL) is answered for the
// sandbox whose token signed it, and for no other.
func TestSignedFilesURLMode(t *testing.T) {
	a := model.Sandbox{ID: model.NewSandboxID(), ProjectID: model.NewProjectID(), State: model.StateRunning}
	b := model.Sandbox{ID: model.NewSandboxID(), ProjectID: model.NewProjectID(), State: model.StateRunning}
	gone := model.Sandbox{ID: model.NewSandboxID(), ProjectID: model.NewProjectID(), State: model.StateDeleted}
	pooled := model.Sandbox{ID: model.NewSandboxID(), ProjectID: model.SystemProject, State: model.StateRunning}
	sbs := fakeSandboxes{a.ID: a, b.ID: b, gone.ID: gone, pooled.ID: pooled}
	g := newTestGateway(t, sbs)
	lists := 0
	live := []model.Sandbox{a, gone, pooled}
	g.cfg.LiveSandboxes = func(context.Context) ([]model.Sandbox, error) {
		lists++
		return live, nil
	}
	now := g.cfg.Now().Unix()
	future, past := fmt.Sprint(now+60), fmt.Sprint(now-10)
	signed := func(sb model.Sandbox, op, path, user, exp string) string {
		q := url.Values{"path": {path}, "signature": {fileSignature(path, op, user, "tok-"+sb.ID.String(), exp)}}
		if user != "" {
			q.Set("username", user)
		}
		if exp != "" {
			q.Set("signature_expiration", exp)
		}
		return "/files?" + q.Encode()
	}
	do := func(method, target string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, target, nil)
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, req)
		return rec
	}
	for _, tc := range []struct {
		name, method, url string
		status            int
		target, msg       string
	}{
		{"download", "GET", signed(a, opRead, "/home/user/a.txt", "", ""), http.StatusTeapot, a.ID.String() + "/", ""},
		{"upload as root, expiring", "POST", signed(a, opWrite, "hello.txt", "root", future), http.StatusTeapot, a.ID.String() + "/root", ""},
		{"expired", "GET", signed(a, opRead, "/a", "", past), http.StatusUnauthorized, "", expiredMessage},
		{"read signature used to write", "POST", signed(a, opRead, "/a", "", ""), http.StatusUnauthorized, "", ""},
		{"forged", "GET", "/files?path=%2Fa&signature=v1_" + strings.Repeat("A", 43), http.StatusUnauthorized, "", ""},
		{"malformed", "GET", "/files?path=%2Fa&signature=x", http.StatusUnauthorized, "", ""},
		{"deleted sandbox", "GET", signed(gone, opRead, "/a", "", ""), http.StatusUnauthorized, "", ""},
		{"pool sandbox", "GET", signed(pooled, opRead, "/a", "", ""), http.StatusUnauthorized, "", ""},
		{"unsigned", "GET", "/files?path=%2Fa", http.StatusTeapot, "", ""}, // not a signed URL: Airlock's own API (native)
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := do(tc.method, tc.url)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			if tc.status == http.StatusTeapot && tc.target != "" && (rec.Header().Get("X-Went") != "files" || rec.Header().Get("X-Target") != tc.target) {
				t.Fatalf("went to %q for %q, want files for %q", rec.Header().Get("X-Went"), rec.Header().Get("X-Target"), tc.target)
			}
			if tc.msg != "" {
				var body struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				}
				if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Code != 401 || body.Message != tc.msg {
					t.Fatalf("body %s, want {code: 401, message: %q}", rec.Body, tc.msg)
				}
			}
		})
	}
	// A sandbox created since the index was built is found: the miss lists
	// the live sandboxes again (once).
	live = append(live, b)
	before := lists
	g.cfg.Now = func() time.Time { return time.Unix(now+5, 0) }
	if rec := do("GET", signed(b, opRead, "/a", "", "")); rec.Code != http.StatusTeapot || rec.Header().Get("X-Target") != b.ID.String()+"/" {
		t.Fatalf("new sandbox: %d %s", rec.Code, rec.Body)
	}
	if lists != before+1 {
		t.Fatalf("%d listings for one miss, want 1", lists-before)
	}
	// A hit lists nothing; a miss after a listing that began when it
	// arrived (or later) lists nothing either.
	do("GET", signed(a, opRead, "/a", "", ""))
	do("GET", "/files?path=%2Fa&signature=v1_"+strings.Repeat("B", 43))
	if lists != before+1 {
		t.Fatalf("%d listings after a hit and a covered miss, want 1", lists-before)
	}
	// Sandbox tokens are minted once per signedTokenTTL, not per listing.
	g.cfg.Now = func() time.Time { return time.Unix(now+6, 0) }
	mints := 0
	tokens := g.cfg.Tokens
	g.cfg.Tokens = func(sb model.SandboxID, p model.ProjectID) ([]string, error) {
		mints++
		return tokens(sb, p)
	}
	do("GET", "/files?path=%2Fa&signature=v1_"+strings.Repeat("C", 43))
	if lists != before+2 || mints != 0 {
		t.Fatalf("a later miss: %d listings, %d mints; want 2 and 0", lists-before, mints)
	}
}

// TestGoneSandboxAnswer: a sandbox that was killed answers its token's
// holder 502 with E2B's client proxy's body, naming the sandbox.
func TestGoneSandboxAnswer(t *testing.T) {
	deleting := model.Sandbox{ID: model.NewSandboxID(), ProjectID: model.NewProjectID(), State: model.StateDeleting}
	deleted := model.Sandbox{ID: model.NewSandboxID(), ProjectID: model.NewProjectID(), State: model.StateDeleted}
	paused := model.Sandbox{ID: model.NewSandboxID(), ProjectID: model.NewProjectID(), State: model.StatePaused}
	unknown := model.NewSandboxID()
	g := newTestGateway(t, fakeSandboxes{deleting.ID: deleting, deleted.ID: deleted, paused.ID: paused})
	for _, tc := range []struct {
		name, path string
		id         model.SandboxID
		msg        string
	}{
		{"health of a deleting sandbox", "/health", deleting.ID, notFoundMessage},
		{"command to a deleting sandbox", "/process.Process/Start", deleting.ID, notFoundMessage},
		{"deleted", "/files?path=%2Fa", deleted.ID, notFoundMessage},
		{"unknown", "/health", unknown, notFoundMessage},
		{"health of a paused sandbox", "/health", paused.ID, "sandbox " + paused.ID.String() + " is paused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest("POST", tc.path, nil)
			if strings.HasPrefix(tc.path, "/health") || strings.HasPrefix(tc.path, "/files") {
				req.Method = "GET"
			}
			req.Header.Set(headerSandboxID, tc.id.String())
			req.Header.Set(headerSandboxPort, "49983")
			req.Header.Set("X-Access-Token", "tok-"+tc.id.String())
			rec := httptest.NewRecorder()
			g.ServeHTTP(rec, req)
			var body struct {
				Code      int    `json:"code"`
				Message   string `json:"message"`
				SandboxID string `json:"sandboxId"`
			}
			if rec.Code != http.StatusBadGateway || json.Unmarshal(rec.Body.Bytes(), &body) != nil ||
				body.Code != 502 || body.Message != tc.msg || body.SandboxID != tc.id.String() {
				t.Fatalf("%d %s, want 502 {code: 502, message: %q, sandboxId: %s}", rec.Code, rec.Body, tc.msg, tc.id)
			}
		})
	}
	// Without the token: the anonymous answer, which names nothing.
	req := httptest.NewRequest("GET", "/health", nil)
	req.Header.Set(headerSandboxID, deleting.ID.String())
	req.Header.Set(headerSandboxPort, "49983")
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized || strings.Contains(rec.Body.String(), "sandboxId") {
		t.Fatalf("anonymous: %d %s", rec.Code, rec.Body)
	}
}

// TestSignedIndexCache: with the store's changes watched, unknown
// signatures are refused from the cached index without listing the store;
// a change makes the next miss list it again (a new sandbox is found); a
// deleted sandbox's URL is refused at once and leaves the index; and the
// index is listed again signedTokenTTL after its last listing.
func TestSignedIndexCache(t *testing.T) {
	a := model.Sandbox{ID: model.NewSandboxID(), ProjectID: model.NewProjectID(), State: model.StateRunning}
	b := model.Sandbox{ID: model.NewSandboxID(), ProjectID: model.NewProjectID(), State: model.StateRunning}
	sbs := fakeSandboxes{a.ID: a}
	g := newTestGateway(t, sbs)
	var lists atomic.Int32
	var mu sync.Mutex
	live := []model.Sandbox{a}
	g.cfg.LiveSandboxes = func(context.Context) ([]model.Sandbox, error) {
		lists.Add(1)
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(live), nil
	}
	changes := make(chan struct{})
	g.cfg.Changes = func(context.Context) <-chan struct{} { return changes }
	clock := time.Unix(1_800_000_000, 0)
	g.cfg.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.RunSignedIndex(ctx) }()
	defer func() { cancel(); <-done }()
	waitWatched := func() {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			g.signed.mu.Lock()
			ok := g.signed.watched && g.signed.stale
			g.signed.mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the index was not marked stale")
			}
		}
	}
	waitWatched()
	signed := func(sb model.Sandbox) string {
		return "/files?" + url.Values{"path": {"/a"}, "signature": {fileSignature("/a", opRead, "", "tok-"+sb.ID.String(), "")}}.Encode()
	}
	do := func(target string) int {
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, httptest.NewRequest("GET", target, nil))
		return rec.Code
	}

	if code := do(signed(a)); code != http.StatusTeapot || lists.Load() != 1 {
		t.Fatalf("first URL: %d after %d listings, want 418 after 1", code, lists.Load())
	}
	for i := range 20 {
		advance(time.Second)
		if code := do("/files?path=%2Fa&signature=v1_" + strings.Repeat(string(rune('A'+i)), 43)); code != http.StatusUnauthorized {
			t.Fatalf("unknown signature: %d", code)
		}
	}
	if n := lists.Load(); n != 1 {
		t.Fatalf("20 unknown signatures listed the store %d times; want none (nothing changed)", n-1)
	}

	// A sandbox created (a change): the next miss lists once and finds it.
	mu.Lock()
	live = append(live, b)
	mu.Unlock()
	sbs[b.ID] = b
	changes <- struct{}{}
	waitWatched()
	advance(time.Second)
	if code := do(signed(b)); code != http.StatusTeapot || lists.Load() != 2 {
		t.Fatalf("new sandbox: %d after %d listings, want 418 after 2", code, lists.Load())
	}

	// Deleted (the notification not seen yet): its URL is refused and it
	// leaves the index, without a listing.
	gone := a
	gone.State = model.StateDeleted
	sbs[a.ID] = gone
	if code := do(signed(a)); code != http.StatusUnauthorized {
		t.Fatalf("deleted sandbox's URL: %d, want 401", code)
	}
	for _, e := range g.signedEntries(ctx, time.Time{}) {
		if e.sb.ID == a.ID {
			t.Fatal("the deleted sandbox is still in the index")
		}
	}
	if code := do(signed(b)); code != http.StatusTeapot || lists.Load() != 2 {
		t.Fatalf("the other sandbox after the delete: %d after %d listings, want 418 after 2", code, lists.Load())
	}

	// signedTokenTTL after the last listing (a lost notification, a key
	// rotation), a miss lists again.
	advance(signedTokenTTL)
	do("/files?path=%2Fa&signature=v1_" + strings.Repeat("Z", 43))
	if n := lists.Load(); n != 3 {
		t.Fatalf("%d listings after signedTokenTTL, want 3", n)
	}
}
