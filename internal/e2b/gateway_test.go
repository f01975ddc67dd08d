package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

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

func newTestGateway(t *testing.T, sandboxes fakeSandboxes) *Gateway {
	t.Helper()
	g, err := New(Config{
		Native:      tag("native"),
		Control:     tag("control"),
		OwnsControl: func(p string) bool { return strings.HasPrefix(p, "/sandboxes") || strings.HasPrefix(p, "/v2/") },
		Process:     Service{Path: "/process.Process/", Handler: tag("process")},
		Filesystem:  Service{Path: "/filesystem.Filesystem/", Handler: tag("filesystem")},
		Files:       tag("files"),
		Sandboxes:   sandboxes,
		Mint:        func(sb model.SandboxID, p model.ProjectID) (string, error) { return "tok-" + sb.String(), nil },
		Verify: func(tok string) (model.SandboxID, error) {
			id, ok := strings.CutPrefix(tok, "tok-")
			if !ok {
				return "", errors.New("forged")
			}
			return model.ParseSandboxID(id)
		},
		Public:  func(sb model.Sandbox) bool { return sb.Metadata["public"] == "yes" },
		SelfURL: "http://127.0.0.1:1",
		HTTP:    &http.Client{},
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
	public := model.Sandbox{ID: model.NewSandboxID(), ProjectID: model.NewProjectID(), State: model.StateRunning, Metadata: model.Metadata{"public": "yes"}}
	publicAsleep := model.Sandbox{ID: model.NewSandboxID(), ProjectID: model.NewProjectID(), State: model.StateSuspended, Metadata: model.Metadata{"public": "yes"}}
	g := newTestGateway(t, fakeSandboxes{running.ID: running, other.ID: other, suspended.ID: suspended, pooled.ID: pooled, public.ID: public, publicAsleep.ID: publicAsleep})
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
		{"health running", "GET", "/health", "h", envd(running), "", 204, "", ""},
		{"health suspended does not wake", "GET", "/health", "h", envd(suspended), "", 502, "", ""},
		{"unknown sandbox", "GET", "/health", "h", map[string]string{headerSandboxID: model.NewSandboxID().String(), headerSandboxPort: "49983"}, "", 502, "", ""},
		{"pool sandbox is unknown", "POST", "/process.Process/List", "h", withTok(envd(pooled), "tok-"+pooled.ID.String()), "", 502, "", ""},
		{"malformed sandbox header", "GET", "/health", "h", map[string]string{headerSandboxID: "x", headerSandboxPort: "49983"}, "", 400, "", ""},
		{"rpc without token", "POST", "/process.Process/List", "h", envd(running), "", 401, "", ""},
		{"rpc forged token", "POST", "/process.Process/List", "h", withTok(envd(running), "forged"), "", 401, "", ""},
		{"rpc other sandbox's token", "POST", "/process.Process/List", "h", withTok(envd(running), "tok-"+other.ID.String()), "", 401, "", ""},
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
		{"guest port of an E2B sandbox is public", "GET", "/", "h", port(public, "3000"), "", 502, "", ""}, // proxied: nothing listens at the test's self URL
		{"anonymous traffic does not wake", "GET", "/", "h", port(publicAsleep, "3000"), "", 502, "", ""},
		{"code interpreter of an E2B sandbox is not public", "POST", "/contexts", "h", port(public, "49999"), "", 401, "", ""},
		{"code interpreter trailing slash", "POST", "/execute/", "h", port(public, "49999"), "", 401, "", ""},
		{"code interpreter health is public", "GET", "/health", "h", port(public, "49999"), "", 502, "", ""},
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
