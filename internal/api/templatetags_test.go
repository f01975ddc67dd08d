package api

import (
	"fmt"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/template/gc"
)

func withTemplateGC(t *testing.T) envOption {
	return func(c *envConfig) {
		collector, err := gc.New(gc.Config{Store: c.Store, Trees: c.tpl})
		if err != nil {
			t.Fatal(err)
		}
		c.TemplateGC = collector
	}
}

func TestTemplateTagsDeleteGC(t *testing.T) {
	e := newEnv(t, withTemplateGC(t))
	// GET by tag, by name (tag latest) and by digest.
	var got apiv1.Template
	for _, ref := range []string{"default", "default:latest", e.digest.String()} {
		e.do("GET", "/v1/templates/"+ref, e.keyA, "").want(t, http.StatusOK).decode(t, &got)
		if got.Digest != e.digest.String() || !reflect.DeepEqual(got.Names, []string{"default:latest"}) ||
			got.InUse == nil || *got.InUse != 0 || got.Config == nil || got.Config.Env == nil {
			t.Fatalf("GET %s = %+v", ref, got)
		}
	}
	e.do("GET", "/v1/templates/nope:1", e.keyA, "").wantError(t, http.StatusNotFound, apiv1.CodeTemplateNotFound)
	e.do("GET", "/v1/templates/sha256:"+strings.Repeat("0", 64), e.keyA, "").wantError(t, http.StatusNotFound, apiv1.CodeTemplateNotFound)

	// A second template, tagged two ways; tags move.
	other := filepath.Join(t.TempDir(), "other")
	writeTree(t, other, map[string]string{"etc/other": "x\n"})
	var imp apiv1.Template
	imp = e.importTemplate(t, fmt.Sprintf(`{"source": %q, "name": "py:3.12"}`, other))
	if !reflect.DeepEqual(imp.Names, []string{"py:3.12"}) {
		t.Fatalf("import = %+v", imp)
	}
	e.do("PUT", "/v1/templates/tags/py", e.keyA, `{"template": "py:3.12"}`).wantError(t, http.StatusForbidden, apiv1.CodePermissionDenied)
	e.do("PUT", "/v1/templates/tags/py", e.admin, `{"template": "py:3.12"}`).want(t, http.StatusOK).decode(t, &got)
	if got.Digest != imp.Digest || !reflect.DeepEqual(got.Names, []string{"py:3.12", "py:latest"}) {
		t.Fatalf("tag = %+v", got)
	}
	e.do("PUT", "/v1/templates/tags/py:3.12", e.admin, fmt.Sprintf(`{"template": %q}`, e.digest)).want(t, http.StatusOK).decode(t, &got)
	if got.Digest != e.digest.String() || !reflect.DeepEqual(got.Names, []string{"default:latest", "py:3.12"}) {
		t.Fatalf("moved tag = %+v", got)
	}
	e.do("PUT", "/v1/templates/tags/py:3.13", e.admin, `{"template": "ghost"}`).wantError(t, http.StatusNotFound, apiv1.CodeTemplateNotFound)
	e.send(req{method: "PUT", path: "/v1/templates/tags/py:3.13", key: e.admin, body: `{}`, invalid: true}).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)

	// In use: delete by tag or digest is refused, naming the sandbox.
	var sb apiv1.SandboxWithOperation
	e.do("POST", "/v1/sandboxes", e.keyA, `{"template": "py"}`).want(t, http.StatusAccepted).decode(t, &sb)
	// in_use counts the caller's project's sandboxes (an admin's: all):
	// another project does not learn how many sandboxes A runs of it.
	for _, c := range []struct {
		who, key string
		want     int
	}{{"project A", e.keyA, 1}, {"project B", e.keyB, 0}, {"admin", e.admin, 1}} {
		got = apiv1.Template{}
		e.do("GET", "/v1/templates/py", c.key, "").want(t, http.StatusOK).decode(t, &got)
		if got.InUse == nil || *got.InUse != c.want {
			t.Fatalf("in_use for %s = %v, want %d", c.who, got.InUse, c.want)
		}
		var list apiv1.TemplateList
		e.do("GET", "/v1/templates", c.key, "").want(t, http.StatusOK).decode(t, &list)
		for _, lt := range list.Templates {
			if lt.Digest == got.Digest && (lt.InUse == nil || *lt.InUse != c.want) {
				t.Fatalf("listed in_use for %s = %v, want %d", c.who, lt.InUse, c.want)
			}
		}
	}
	r := e.do("DELETE", "/v1/templates/py", e.admin, "").wantError(t, http.StatusConflict, apiv1.CodeTemplateInUse)
	var apiErr apiv1.Error
	r.decode(t, &apiErr)
	if !strings.Contains(apiErr.Message, sb.Sandbox.ID) || !strings.Contains(apiErr.Message, "1 live sandbox") {
		t.Fatalf("in use message %q", apiErr.Message)
	}
	e.do("DELETE", "/v1/templates/"+imp.Digest, e.admin, "").wantError(t, http.StatusConflict, apiv1.CodeTemplateInUse)
	e.do("DELETE", "/v1/templates/"+imp.Digest, e.keyA, "").wantError(t, http.StatusForbidden, apiv1.CodePermissionDenied)

	// Once the sandbox is deleted, the delete goes through, tree and all.
	if err := e.st.TransitionSandbox(t.Context(), model.SandboxID(sb.Sandbox.ID), model.StatePending, model.StateDeleting, "", e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if err := e.st.TransitionSandbox(t.Context(), model.SandboxID(sb.Sandbox.ID), model.StateDeleting, model.StateDeleted, "", e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	var del apiv1.TemplateDeleted
	e.do("DELETE", "/v1/templates/py", e.admin, "").want(t, http.StatusOK).decode(t, &del)
	if del.Digest != imp.Digest || del.Deleted || !reflect.DeepEqual(del.RemovedTags, []string{"py:latest"}) {
		t.Fatalf("delete tag = %+v", del)
	}
	e.do("DELETE", "/v1/templates/py", e.admin, "").wantError(t, http.StatusNotFound, apiv1.CodeTemplateNotFound)
	e.do("DELETE", "/v1/templates/"+imp.Digest, e.admin, "").want(t, http.StatusOK).decode(t, &del)
	if del.Digest != imp.Digest || !del.Deleted || len(del.RemovedTags) != 0 {
		t.Fatalf("delete digest = %+v", del)
	}
	if e.tpl.Has(model.TemplateDigest(imp.Digest)) {
		t.Fatal("the deleted template's tree is still on disk")
	}
	e.do("GET", "/v1/templates/"+imp.Digest, e.keyA, "").wantError(t, http.StatusNotFound, apiv1.CodeTemplateNotFound)
	e.do("POST", "/v1/sandboxes", e.keyA, fmt.Sprintf(`{"template": %q}`, imp.Digest)).wantError(t, http.StatusNotFound, apiv1.CodeTemplateNotFound)

	// GC: untag py:3.12 (on the default digest, still tagged default) —
	// nothing to collect; import a third, untagged template: collected.
	e.do("DELETE", "/v1/templates/py:3.12", e.admin, "").want(t, http.StatusOK)
	third := filepath.Join(t.TempDir(), "third")
	writeTree(t, third, map[string]string{"etc/third": "3\n"})
	imp = e.importTemplate(t, fmt.Sprintf(`{"source": %q}`, third))
	var gc apiv1.TemplateGCResult
	e.do("POST", "/v1/admin/templates/gc", e.keyA, "").wantError(t, http.StatusForbidden, apiv1.CodePermissionDenied)
	e.do("POST", "/v1/admin/templates/gc", e.admin, "").want(t, http.StatusOK).decode(t, &gc)
	if !reflect.DeepEqual(gc.Collected, []string{imp.Digest}) || !reflect.DeepEqual(gc.TreesRemoved, []string{imp.Digest}) || gc.Busy {
		t.Fatalf("gc = %+v", gc)
	}
	if e.tpl.Has(model.TemplateDigest(imp.Digest)) || !e.tpl.Has(e.digest) {
		t.Fatal("gc removed the wrong trees")
	}
	var list apiv1.TemplateList
	e.do("GET", "/v1/templates", e.keyA, "").want(t, http.StatusOK).decode(t, &list)
	if len(list.Templates) != 1 || list.Templates[0].Digest != e.digest.String() || *list.Templates[0].InUse != 0 {
		t.Fatalf("list after gc = %+v", list)
	}
	// Importing the collected tree again brings it back.
	e.importTemplate(t, fmt.Sprintf(`{"source": %q, "name": "third"}`, third))
	e.do("POST", "/v1/sandboxes", e.keyA, `{"template": "third"}`).want(t, http.StatusAccepted)
	if !e.tpl.Has(model.TemplateDigest(imp.Digest)) {
		t.Fatal("re-import did not publish the tree again")
	}
}

func TestTemplateGCNotSupported(t *testing.T) {
	e := newEnv(t)
	e.do("POST", "/v1/admin/templates/gc", e.admin, "").wantError(t, http.StatusNotImplemented, apiv1.CodeNotSupported)
	e.send(req{method: "GET", path: "/v1/templates/sha256:abc", key: e.keyA, invalid: true}).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	// "sha256:…" reads as a digest, so no tag may be named sha256.
	e.do("PUT", "/v1/templates/tags/sha256", e.admin, `{"template": "default"}`).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
}
