package api

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/template/build"
)

func TestBuildRoutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.importWait(t, fmt.Sprintf(`{"source": %q, "name": "copy"}`, e.tplDir), model.BuildSucceeded)
	if b.Digest != e.digest.String() || b.Attempts != 1 {
		t.Fatalf("build %+v", b)
	}
	// The log, dumped: lines, then done with the build.
	r := e.do("GET", "/v1/builds/"+b.ID+"/log?follow=false", e.admin, "").want(t, http.StatusOK)
	body := string(r.body)
	if !strings.Contains(body, "event: log\n") || !strings.Contains(body, "succeeded: "+b.Digest) ||
		!strings.HasSuffix(body, "\n\n") || !strings.Contains(body, "event: done\ndata: {\"id\":\""+b.ID) {
		t.Fatalf("log stream:\n%s", body)
	}
	// Followed, a finished build's log ends the same way.
	r = e.do("GET", "/v1/builds/"+b.ID+"/log", e.admin, "").want(t, http.StatusOK)
	if !strings.Contains(string(r.body), "event: done\n") {
		t.Fatalf("followed log:\n%s", r.body)
	}
	// Listing: newest first, filters, pages.
	var bl apiv1.BuildList
	e.do("GET", "/v1/builds?limit=1", e.admin, "").want(t, http.StatusOK).decode(t, &bl)
	if len(bl.Builds) != 1 || bl.Builds[0].ID != b.ID || bl.NextCursor == "" {
		t.Fatalf("first page %+v", bl)
	}
	cursor := bl.NextCursor
	bl = apiv1.BuildList{}
	e.do("GET", "/v1/builds?limit=1&cursor="+cursor, e.admin, "").want(t, http.StatusOK).decode(t, &bl)
	if len(bl.Builds) != 1 || bl.Builds[0].Name != "default:latest" || bl.NextCursor != "" {
		t.Fatalf("second page %+v", bl)
	}
	e.do("GET", "/v1/builds?name=copy&state=active", e.admin, "").want(t, http.StatusOK).decode(t, &bl)
	if len(bl.Builds) != 0 {
		t.Fatalf("active builds of copy: %+v", bl)
	}
	e.send(req{method: "GET", path: "/v1/builds?state=done", key: e.keyB, invalid: true, t: t}).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	e.do("GET", "/v1/builds/"+model.NewBuildID().String(), e.keyB, "").wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
	// Bodies: exactly one of source and recipe; context only with recipe.
	e.send(req{method: "POST", path: "/v1/templates", key: e.admin, body: fmt.Sprintf(`{"source": %q, "recipe": "x"}`, e.tplDir), invalid: true, t: t}).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	e.do("POST", "/v1/templates", e.admin, fmt.Sprintf(`{"source": %q, "context": "/"}`, e.tplDir)).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	// A malformed recipe is refused at once.
	e.do("POST", "/v1/templates", e.admin, `{"recipe": "from: [", "name": "rec"}`).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	e.do("POST", "/v1/templates", e.admin, `{"recipe": "bogus: 1\n", "name": "rec"}`).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	// A recipe build on a runner without a recipe builder fails, visibly.
	rb := e.importWait(t, `{"recipe": "from: {debian: {suite: bookworm}}\n", "context": "/", "name": "rec"}`, model.BuildFailed)
	if rb.Kind != "recipe" || rb.Error == nil || rb.Error.Code != apiv1.CodeNotSupported {
		t.Fatalf("recipe build %+v", rb)
	}
}

// TestBuildsScopedToProject: a member lists and reads only the builds its
// own project queued; another project's, and the server's own (the
// default template's), are not_found as an unknown build is, log
// included. An admin sees them all.
func TestBuildsScopedToProject(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := newEnv(t, func(c *envConfig) { c.Builds = logBuilds{dir: dir} })
	ctx := context.Background()
	mk := func(p model.ProjectID, source string) model.TemplateBuild {
		b := model.TemplateBuild{ID: model.NewBuildID(), Kind: model.BuildImport, Source: source, Project: p, CreatedAt: time.Now()}
		if err := e.st.CreateBuild(ctx, b, nil); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(build.LogPath(dir, b.ID), []byte("pulling "+source+": dial tcp 10.9.8.7:5000: connection refused\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return b
	}
	server := mk("", "registry.internal.example:5000/secret/base:1")
	ofA := mk(e.projA, "/srv/project-a/tree")
	ofB := mk(e.projB, "registry.b.example/b-only:2")
	ids := func(key string) []string {
		t.Helper()
		var bl apiv1.BuildList
		e.do("GET", "/v1/builds", key, "").want(t, http.StatusOK).decode(t, &bl)
		var out []string
		for _, b := range bl.Builds {
			out = append(out, b.ID)
		}
		return out
	}
	for _, c := range []struct {
		who, key     string
		sees, hidden []model.TemplateBuild
	}{
		{"member of A", e.keyA, []model.TemplateBuild{ofA}, []model.TemplateBuild{server, ofB}},
		{"member of B", e.keyB, []model.TemplateBuild{ofB}, []model.TemplateBuild{server, ofA}},
		{"admin", e.admin, []model.TemplateBuild{server, ofA, ofB}, nil},
	} {
		listed := ids(c.key)
		for _, b := range c.sees {
			if !slices.Contains(listed, b.ID.String()) {
				t.Fatalf("%s: GET /v1/builds %v lacks %s", c.who, listed, b.ID)
			}
			e.do("GET", "/v1/builds/"+b.ID.String(), c.key, "").want(t, http.StatusOK)
			if body := e.do("GET", "/v1/builds/"+b.ID.String()+"/log?follow=false", c.key, "").want(t, http.StatusOK).body; !strings.Contains(string(body), "dial tcp") {
				t.Fatalf("%s: log of %s: %s", c.who, b.ID, body)
			}
		}
		for _, b := range c.hidden {
			if slices.Contains(listed, b.ID.String()) {
				t.Fatalf("%s: GET /v1/builds lists %s (%s)", c.who, b.ID, b.Source)
			}
			for _, path := range []string{"/v1/builds/" + b.ID.String(), "/v1/builds/" + b.ID.String() + "/log?follow=false", "/v1/builds/" + b.ID.String() + "/log"} {
				r := e.do("GET", path, c.key, "").wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
				if strings.Contains(string(r.body), b.Source) || strings.Contains(string(r.body), "dial tcp") {
					t.Fatalf("%s: %s leaks: %s", c.who, path, r.body)
				}
			}
			// Filters do not reach past the scope either.
			var bl apiv1.BuildList
			e.do("GET", "/v1/builds?state=pending&limit=100", c.key, "").want(t, http.StatusOK).decode(t, &bl)
			for _, got := range bl.Builds {
				if got.ID == b.ID.String() {
					t.Fatalf("%s: filtered listing shows %s", c.who, b.ID)
				}
			}
		}
	}
	// An import an admin queues is its own project's (the admin key's).
	var queued apiv1.Build
	e.do("POST", "/v1/templates", e.admin, fmt.Sprintf(`{"source": %q}`, e.tplDir)).want(t, http.StatusAccepted).decode(t, &queued)
	got, err := e.st.GetBuild(ctx, model.BuildID(queued.ID))
	if err != nil || got.Project != e.adminPj {
		t.Fatalf("queued build's project = %q, %v; want the admin's %s", got.Project, err, e.adminPj)
	}
	e.do("GET", "/v1/builds/"+queued.ID, e.keyA, "").wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
}

// noBuilds is a build runner that runs nothing: builds stay pending until
// the test finishes them.
type noBuilds struct{}

func (noBuilds) LogDir() string                                { return "" }
func (noBuilds) SetRegistryAuth(model.BuildID, string, string) {}
func (noBuilds) Progress(model.BuildID) (build.Progress, bool) {
	return build.Progress{}, false
}

// TestCreateWaitsForBuild: a create naming a template whose build runs
// waits for it, and one whose build failed is refused naming the build.
func TestCreateWaitsForBuild(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *envConfig) { c.Builds = noBuilds{} })
	ctx := context.Background()
	for _, c := range []struct {
		name  model.TaggedName
		state model.BuildState
	}{{model.TaggedName{Name: "slow", Tag: "latest"}, model.BuildSucceeded}, {model.TaggedName{Name: "broken", Tag: "latest"}, model.BuildFailed}} {
		b := model.TemplateBuild{ID: model.NewBuildID(), Kind: model.BuildImport, Source: e.tplDir, Name: c.name, CreatedAt: time.Now()}
		if err := e.st.CreateBuild(ctx, b, nil); err != nil {
			t.Fatal(err)
		}
		type result struct {
			status int
			body   []byte
		}
		done := make(chan result, 1)
		go func() {
			r := e.send(req{method: "POST", path: "/v1/sandboxes", key: e.keyA, body: fmt.Sprintf(`{"template": %q}`, c.name.String())})
			done <- result{r.status, r.body}
		}()
		select {
		case r := <-done:
			t.Fatalf("create of %s answered %d before its build finished: %s", c.name, r.status, r.body)
		case <-time.After(300 * time.Millisecond):
		}
		if _, err := e.st.ClaimBuild(ctx, store.Claim{Owner: "t", Lease: time.Minute, Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		f := store.BuildFinish{ID: b.ID, Owner: "t", State: c.state, Digest: e.digest, Now: time.Now()}
		if c.state == model.BuildFailed {
			f.Digest, f.Error = "", &model.BuildError{Code: "build_failed", Message: "step 3 exited 1"}
		}
		if err := e.st.FinishBuild(ctx, f); err != nil {
			t.Fatal(err)
		}
		r := <-done
		switch c.state {
		case model.BuildSucceeded:
			if r.status != http.StatusAccepted || !strings.Contains(string(r.body), e.digest.String()) {
				t.Fatalf("create after the build: %d %s", r.status, r.body)
			}
		default:
			// The build is the server's, not project A's: A learns that
			// it failed and its code, not why (a build's error names
			// registry hosts, paths and dial errors).
			if r.status != http.StatusFailedDependency || !strings.Contains(string(r.body), b.ID.String()) ||
				!strings.Contains(string(r.body), "build_failed") || strings.Contains(string(r.body), "step 3 exited 1") ||
				!strings.Contains(string(r.body), "minimal") {
				t.Fatalf("create after the failed build: %d %s", r.status, r.body)
			}
		}
	}
}

// authBuilds records the registry credentials builds are given.
type authBuilds struct {
	noBuilds
	mu   sync.Mutex
	auth map[model.BuildID][2]string
}

func (a *authBuilds) SetRegistryAuth(id model.BuildID, u, p string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if u == "" {
		delete(a.auth, id)
		return
	}
	a.auth[id] = [2]string{u, p}
}

// TestImportRegistryAuth: registry_auth goes to the runner of that build
// only, never into the build's record or answer; it is refused with any
// source but a registry's, or incomplete.
func TestImportRegistryAuth(t *testing.T) {
	t.Parallel()
	ab := &authBuilds{auth: map[model.BuildID][2]string{}}
	e := newEnv(t, func(c *envConfig) { c.Builds = ab })
	ctx := context.Background()
	for _, c := range []struct {
		body    string
		invalid bool // by the OpenAPI document too
	}{
		{fmt.Sprintf(`{"source": %q, "registry_auth": {"username": "u", "password": "p"}}`, e.tplDir), false},
		{`{"source": "docker://registry.example/a:1", "registry_auth": {"username": "u"}}`, true},
		{`{"source": "docker://registry.example/a:1", "registry_auth": {"username": "u:x", "password": "p"}}`, false},
		{`{"recipe": "from: {template: default}\n", "registry_auth": {"username": "u", "password": "p"}}`, false},
	} {
		e.send(req{method: "POST", path: "/v1/templates", key: e.admin, body: c.body, invalid: c.invalid}).
			wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	}
	var b apiv1.Build
	raw := e.do("POST", "/v1/templates", e.admin, `{"source": "docker://registry.example/a:1", "registry_auth": {"username": "alice", "password": "pw-6f1c"}}`).
		want(t, http.StatusAccepted)
	raw.decode(t, &b)
	if strings.Contains(string(raw.body), "pw-6f1c") {
		t.Errorf("the answer shows the password: %s", raw.body)
	}
	ab.mu.Lock()
	got := ab.auth[model.BuildID(b.ID)]
	n := len(ab.auth)
	ab.mu.Unlock()
	if got != [2]string{"alice", "pw-6f1c"} || n != 1 {
		t.Errorf("runner got %v (%d builds), want alice's for %s", got, n, b.ID)
	}
	stored, err := e.st.GetBuild(ctx, model.BuildID(b.ID))
	if err != nil || strings.Contains(fmt.Sprintf("%+v", stored), "pw-6f1c") || stored.Source != "index.docker.io/library/a:1" && !strings.Contains(stored.Source, "registry.example/a:1") {
		t.Errorf("stored build %+v, %v: no password, the source", stored, err)
	}
}
