package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
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
	r := e.do("GET", "/v1/builds/"+b.ID+"/log?follow=false", e.keyA, "").want(t, http.StatusOK)
	body := string(r.body)
	if !strings.Contains(body, "event: log\n") || !strings.Contains(body, "succeeded: "+b.Digest) ||
		!strings.HasSuffix(body, "\n\n") || !strings.Contains(body, "event: done\ndata: {\"id\":\""+b.ID) {
		t.Fatalf("log stream:\n%s", body)
	}
	// Followed, a finished build's log ends the same way.
	r = e.do("GET", "/v1/builds/"+b.ID+"/log", e.keyA, "").want(t, http.StatusOK)
	if !strings.Contains(string(r.body), "event: done\n") {
		t.Fatalf("followed log:\n%s", r.body)
	}
	// Listing: newest first, filters, pages.
	var bl apiv1.BuildList
	e.do("GET", "/v1/builds?limit=1", e.keyB, "").want(t, http.StatusOK).decode(t, &bl)
	if len(bl.Builds) != 1 || bl.Builds[0].ID != b.ID || bl.NextCursor == "" {
		t.Fatalf("first page %+v", bl)
	}
	cursor := bl.NextCursor
	bl = apiv1.BuildList{}
	e.do("GET", "/v1/builds?limit=1&cursor="+cursor, e.keyB, "").want(t, http.StatusOK).decode(t, &bl)
	if len(bl.Builds) != 1 || bl.Builds[0].Name != "default:latest" || bl.NextCursor != "" {
		t.Fatalf("second page %+v", bl)
	}
	e.do("GET", "/v1/builds?name=copy&state=active", e.keyB, "").want(t, http.StatusOK).decode(t, &bl)
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

// noBuilds is a build runner that runs nothing: builds stay pending until
// the test finishes them.
type noBuilds struct{}

func (noBuilds) LogDir() string { return "" }
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
			if r.status != http.StatusFailedDependency || !strings.Contains(string(r.body), b.ID.String()) ||
				!strings.Contains(string(r.body), "step 3 exited 1") || !strings.Contains(string(r.body), "minimal") {
				t.Fatalf("create after the failed build: %d %s", r.status, r.body)
			}
		}
	}
}
