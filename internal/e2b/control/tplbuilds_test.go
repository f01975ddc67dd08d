package control

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// memBuilds is BuildRecords in memory, with the store's semantics
// (storetest's E2BBuild cases hold the store to them).
type memBuilds struct {
	mu sync.Mutex
	m  map[model.E2BBuildID]model.E2BBuild
}

func newMemBuilds() *memBuilds { return &memBuilds{m: map[model.E2BBuildID]model.E2BBuild{}} }

func (s *memBuilds) CreateE2BBuild(_ context.Context, b model.E2BBuild) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b.UpdatedAt = b.CreatedAt
	s.m[b.ID] = b
	return nil
}

func (s *memBuilds) GetE2BBuild(_ context.Context, project model.ProjectID, id model.E2BBuildID) (model.E2BBuild, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.m[id]
	if !ok || b.ProjectID != project {
		return model.E2BBuild{}, fmt.Errorf("build %s: %w", id, ErrBuildNotFound)
	}
	return b, nil
}

func (s *memBuilds) set(project model.ProjectID, id model.E2BBuildID, from []model.E2BBuildStatus, fn func(*model.E2BBuild)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.m[id]
	if !ok || project != "" && b.ProjectID != project {
		return fmt.Errorf("build %s: %w", id, ErrBuildNotFound)
	}
	if !slices.Contains(from, b.Status) {
		return fmt.Errorf("build %s is %s: %w", id, b.Status, ErrBuildStateChanged)
	}
	fn(&b)
	s.m[id] = b
	return nil
}

func (s *memBuilds) StartE2BBuild(ctx context.Context, project model.ProjectID, id model.E2BBuildID, node model.NodeID, files []string, now time.Time) (model.E2BBuild, error) {
	err := s.set(project, id, []model.E2BBuildStatus{model.E2BBuildWaiting}, func(b *model.E2BBuild) {
		b.Status, b.Node, b.Files, b.UpdatedAt = model.E2BBuildStarting, node, files, now
	})
	if err != nil {
		return model.E2BBuild{}, err
	}
	return s.GetE2BBuild(ctx, project, id)
}

func (s *memBuilds) SetE2BBuildNative(_ context.Context, id model.E2BBuildID, native model.BuildID, now time.Time) error {
	return s.set("", id, []model.E2BBuildStatus{model.E2BBuildStarting}, func(b *model.E2BBuild) {
		b.Status, b.Native, b.UpdatedAt = model.E2BBuildBuilding, native, now
	})
}

func (s *memBuilds) ReplaceE2BBuildNative(_ context.Context, id model.E2BBuildID, from, to model.BuildID, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.m[id]
	if !ok || b.Status != model.E2BBuildBuilding || b.Native != from {
		return ErrBuildStateChanged
	}
	b.Native, b.UpdatedAt = to, now
	s.m[id] = b
	return nil
}

func (s *memBuilds) EndE2BBuild(_ context.Context, id model.E2BBuildID, status model.E2BBuildStatus, reason string, now time.Time) error {
	return s.set("", id, []model.E2BBuildStatus{model.E2BBuildWaiting, model.E2BBuildStarting, model.E2BBuildBuilding}, func(b *model.E2BBuild) {
		b.Status, b.Reason, b.UpdatedAt = status, reason, now
	})
}

func (s *memBuilds) FailStartingE2BBuilds(_ context.Context, node model.NodeID, before time.Time, reason string, now time.Time) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for id, b := range s.m {
		if b.Status == model.E2BBuildStarting && b.UpdatedAt.Before(before) && (node == "" || b.Node == node) {
			b.Status, b.Reason, b.UpdatedAt = model.E2BBuildError, reason, now
			s.m[id] = b
			n++
		}
	}
	return n, nil
}

func (s *memBuilds) PruneE2BBuilds(_ context.Context, before time.Time) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for id, b := range s.m {
		if b.UpdatedAt.Before(before) {
			delete(s.m, id)
			n++
		}
	}
	return n, nil
}

// backdate moves a build's last change back by d.
func (s *memBuilds) backdate(id model.E2BBuildID, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.m[id]
	b.UpdatedAt = b.UpdatedAt.Add(-d)
	s.m[id] = b
}

// testCallers: k and member are keys of project A (admin, member),
// other-key an admin key of project B.
func testCallers(_ context.Context, key string) (Caller, bool, error) {
	switch key {
	case "k":
		return Caller{Project: "prj_aaaaaaaaaaaaaaaaaaaaaaaaaa", Admin: true}, true, nil
	case "member":
		return Caller{Project: "prj_aaaaaaaaaaaaaaaaaaaaaaaaaa"}, true, nil
	case "other-key":
		return Caller{Project: "prj_bbbbbbbbbbbbbbbbbbbbbbbbbb", Admin: true}, true, nil
	}
	return Caller{}, false, nil
}

// fakeBuildNative is a native API for template builds: one import, its
// log (two lines) and state, and tag calls counted.
type fakeBuildNative struct {
	imports, tags atomic.Int32
	state         atomic.Value // the native build's state
}

func (f *fakeBuildNative) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	const id = "bld_aaaaaaaaaaaaaaaaaaaaaaaaaa"
	switch {
	case r.Method == "GET" && r.URL.Path == "/v1/templates/default":
		writeJSON(w, 200, apiv1.Template{Digest: "sha256:" + strings.Repeat("a", 64), Names: []string{"default:latest"}})
	case r.Method == "POST" && r.URL.Path == "/v1/templates":
		f.imports.Add(1)
		writeJSON(w, 202, apiv1.Build{ID: id, State: "pending"})
	case r.Method == "PUT" && strings.HasPrefix(r.URL.Path, "/v1/templates/tags/"):
		f.tags.Add(1)
		writeJSON(w, 200, apiv1.Template{Digest: "sha256:" + strings.Repeat("b", 64)})
	case r.Method == "GET" && r.URL.Path == "/v1/builds/"+id+"/log":
		w.Header().Set("Content-Type", "text/event-stream")
		logText := "step 1\nstep 2\n"
		data, _ := json.Marshal(apiv1.BuildLogEventData{Text: logText, Offset: int64(len(logText))})
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", apiv1.EventBuildLog, data)
		b := apiv1.Build{ID: id, State: f.state.Load().(string)}
		if b.State == "failed" {
			b.Error = &apiv1.Error{Code: apiv1.CodeBuildFailed, Message: "step 2 exited 1"}
		}
		data, _ = json.Marshal(b)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", apiv1.EventBuildDone, data)
	default:
		writeJSON(w, 404, apiv1.Error{Code: apiv1.CodeTemplateNotFound, Message: "template not found"})
	}
}

// buildsHandler is a Handler of native with template builds kept in
// builds and files in dir: a second one on the same builds and dir is the
// same server after a restart (or another server of its cluster).
func buildsHandler(t *testing.T, native http.Handler, builds BuildRecords, dir string) func(method, path, key, body string) (int, string) {
	t.Helper()
	srv := httptest.NewServer(native)
	t.Cleanup(srv.Close)
	h, err := New(Config{
		Native: func(key string) (*client.Client, error) {
			return client.New(srv.URL, key, client.WithHTTPClient(srv.Client()), client.WithRetries(0, 0))
		},
		AccessToken:   func(context.Context, apiv1.Sandbox) (string, error) { return "test-only-token", nil },
		TemplateFiles: dir,
		Builds:        builds,
		Caller:        testCallers,
		Node:          "node_aaaaaaaaaaaaaaaaaaaaaaaaaa",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.ReconcileBuilds(context.Background()); err != nil {
		t.Fatal(err)
	}
	return func(method, path, key, body string) (int, string) {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("X-API-Key", key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
}

// requestTestBuild requests a build of my-tpl:v1 (tags x, y) as key.
func requestTestBuild(t *testing.T, do func(method, path, key, body string) (int, string), key string) string {
	t.Helper()
	code, body := do("POST", "/v3/templates", key, `{"name":"my-tpl:v1","tags":["x","y"]}`)
	var rb struct{ BuildID string }
	if err := json.Unmarshal([]byte(body), &rb); code != 202 || err != nil || rb.BuildID == "" {
		t.Fatalf("request build: %d %s", code, body)
	}
	return rb.BuildID
}

// The status of a build answers from another Handler on the same records
// (a restart, another server), ends once with its tags pointed, and stays
// within its project.
func TestTemplateBuildStatusKept(t *testing.T) {
	native := &fakeBuildNative{}
	native.state.Store("running")
	builds, dir := newMemBuilds(), t.TempDir()
	do := buildsHandler(t, native, builds, dir)
	id := requestTestBuild(t, do, "k")
	status := "/templates/my-tpl/builds/" + id + "/status"
	if code, _ := do("POST", "/v2/templates/my-tpl/builds/"+id, "k", `{"fromTemplate":"base","steps":[{"type":"RUN","args":["true"]}]}`); code != 202 {
		t.Fatalf("start: %d", code)
	}
	again := buildsHandler(t, native, builds, dir) // a restart
	if code, body := again("GET", status, "k", ""); code != 200 || !strings.Contains(body, `"status":"building"`) || !strings.Contains(body, `"step 2"`) {
		t.Fatalf("status after a restart: %d %s", code, body)
	}
	if code, body := again("GET", status+"?logsOffset=1", "member", ""); code != 200 || strings.Contains(body, `"step 1"`) || !strings.Contains(body, `"step 2"`) {
		t.Errorf("a member of the project, from entry 1: %d %s", code, body)
	}
	if code, _ := again("GET", status, "other-key", ""); code != 404 {
		t.Errorf("another project's status: %d, want 404", code)
	}
	if code, _ := again("GET", "/templates/other/builds/"+id+"/status", "k", ""); code != 404 {
		t.Errorf("the build under another template: %d, want 404", code)
	}
	native.state.Store("succeeded")
	for range 2 {
		if code, body := do("GET", status, "k", ""); code != 200 || !strings.Contains(body, `"status":"ready"`) {
			t.Fatalf("status once built: %d %s", code, body)
		}
	}
	if native.tags.Load() != 2 {
		t.Errorf("tag calls: %d, want 2 (x and y, once)", native.tags.Load())
	}
	if b, _ := builds.GetE2BBuild(context.Background(), "prj_aaaaaaaaaaaaaaaaaaaaaaaaaa", model.E2BBuildID(id)); b.Status != model.E2BBuildReady {
		t.Errorf("recorded: %+v", b)
	}

	// A native failure is recorded with its message.
	native.state.Store("failed")
	id2 := requestTestBuild(t, do, "k")
	if code, _ := do("POST", "/v2/templates/my-tpl/builds/"+id2, "k", `{"steps":[{"type":"RUN","args":["false"]}]}`); code != 202 {
		t.Fatalf("start: %d", code)
	}
	if code, body := again("GET", "/templates/my-tpl/builds/"+id2+"/status", "k", ""); code != 200 || !strings.Contains(body, `"status":"error"`) || !strings.Contains(body, "step 2 exited 1") {
		t.Errorf("a failed build: %d %s", code, body)
	}
}

// A build left starting (its server stopped between the start and the
// native build's record) ends in error: at its server's restart, or after
// the grace on a status call.
func TestTemplateBuildLeftStarting(t *testing.T) {
	native := &fakeBuildNative{}
	native.state.Store("running")
	builds, dir := newMemBuilds(), t.TempDir()
	do := buildsHandler(t, native, builds, dir)
	ctx := context.Background()
	const prj = "prj_aaaaaaaaaaaaaaaaaaaaaaaaaa"
	mine := requestTestBuild(t, do, "k")
	if _, err := builds.StartE2BBuild(ctx, prj, model.E2BBuildID(mine), "node_aaaaaaaaaaaaaaaaaaaaaaaaaa", nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	theirs := requestTestBuild(t, do, "k")
	if _, err := builds.StartE2BBuild(ctx, prj, model.E2BBuildID(theirs), "node_bbbbbbbbbbbbbbbbbbbbbbbbbb", nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	do = buildsHandler(t, native, builds, dir) // this server restarts
	if code, body := do("GET", "/templates/my-tpl/builds/"+mine+"/status", "k", ""); code != 200 || !strings.Contains(body, `"status":"error"`) || !strings.Contains(body, "stopped while starting") {
		t.Errorf("this server's build left starting: %d %s", code, body)
	}
	theirStatus := "/templates/my-tpl/builds/" + theirs + "/status"
	if code, body := do("GET", theirStatus, "k", ""); code != 200 || !strings.Contains(body, `"status":"waiting"`) {
		t.Errorf("another server's start within the grace: %d %s", code, body)
	}
	builds.backdate(model.E2BBuildID(theirs), startGrace+time.Second)
	if code, body := do("GET", theirStatus, "k", ""); code != 200 || !strings.Contains(body, `"status":"error"`) || !strings.Contains(body, "stopped answering") {
		t.Errorf("another server's start after the grace: %d %s", code, body)
	}
	if code, _ := do("POST", "/v2/templates/my-tpl/builds/"+mine, "k", `{"steps":[]}`); code != 409 {
		t.Errorf("starting an ended build: %d, want 409", code)
	}
	if native.imports.Load() != 0 {
		t.Errorf("%d native builds queued", native.imports.Load())
	}
}

// Attacker side: a project's key that is not an admin's makes, tags and
// deletes no template (403 naming why, nothing stored or queued); another
// project's key cannot read or start a build.
func TestTemplateBuildsNeedAdmin(t *testing.T) {
	native := &fakeBuildNative{}
	native.state.Store("running")
	builds := newMemBuilds()
	do := buildsHandler(t, native, builds, t.TempDir())
	hash := strings.Repeat("c", 64)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v3/templates", `{"name":"mine:v1"}`},
		{"GET", "/templates/mine/files/" + hash, ""},
		{"POST", "/templates/tags", `{"target":"base:latest","tags":["evil"]}`},
		{"DELETE", "/templates/tags", `{"name":"base","tags":["latest"]}`},
	} {
		code, body := do(c.method, c.path, "member", c.body)
		var e errorBody
		if err := json.Unmarshal([]byte(body), &e); code != 403 || err != nil || e.Code != 403 || !strings.Contains(e.Message, "admin API key") {
			t.Errorf("%s %s as a member: %d %s", c.method, c.path, code, body)
		}
	}
	if code, _ := do("POST", "/v3/templates", "nobody", `{"name":"mine:v1"}`); code != 401 {
		t.Errorf("an unknown key: %d, want 401", code)
	}
	if len(builds.m) != 0 || native.tags.Load() != 0 {
		t.Fatalf("refused calls stored %d builds, tagged %d", len(builds.m), native.tags.Load())
	}
	id := requestTestBuild(t, do, "k")
	start := "/v2/templates/my-tpl/builds/" + id
	if code, body := do("POST", start, "member", `{"steps":[]}`); code != 403 {
		t.Errorf("a member starts the project's build: %d %s", code, body)
	}
	if code, _ := do("POST", start, "other-key", `{"steps":[]}`); code != 404 {
		t.Errorf("another project starts the build: %d, want 404", code)
	}
	if code, _ := do("GET", "/templates/my-tpl/builds/not-a-uuid/status", "k", ""); code != 404 {
		t.Errorf("a malformed build ID: %d, want 404", code)
	}
	if native.imports.Load() != 0 {
		t.Errorf("%d native builds queued", native.imports.Load())
	}
	if code, _ := do("POST", start, "k", `{"steps":[]}`); code != 202 || native.imports.Load() != 1 {
		t.Errorf("the owner's start: %d", code)
	}
}
