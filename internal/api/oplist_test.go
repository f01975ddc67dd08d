package api

import (
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// listOps lists with key and query, following next_cursor to the end.
func (e *testEnv) listOps(t *testing.T, key, query string) []string {
	t.Helper()
	var ids []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatal("GET /v1/operations: too many pages")
		}
		path := "/v1/operations?" + query
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		var out apiv1.OperationList
		e.do("GET", path, key, "").want(t, http.StatusOK).decode(t, &out)
		for _, op := range out.Operations {
			ids = append(ids, op.ID)
		}
		if out.NextCursor == "" {
			return ids
		}
		cursor = out.NextCursor
	}
}

func TestListOperations(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Project A: the create of s1 (succeeded), the create of s2 (pending),
	// the delete of s1 (pending, newest). Project B: one create.
	s1 := e.createSandbox(e.keyA, `{}`)
	e.finishCreate(model.SandboxID(s1.Sandbox.ID))
	s2 := e.createSandbox(e.keyA, `{}`)
	var del apiv1.OperationResponse
	e.do("DELETE", "/v1/sandboxes/"+s1.Sandbox.ID, e.keyA, "").want(t, http.StatusAccepted).decode(t, &del)
	sb := e.createSandbox(e.keyB, `{}`)
	c1, c2, d1, cb := s1.Operation.ID, s2.Operation.ID, del.Operation.ID, sb.Operation.ID

	for _, tc := range []struct {
		name, key, query string
		want             []string
	}{
		{"all of A, newest first", e.keyA, "", []string{d1, c2, c1}},
		{"one per page", e.keyA, "limit=1", []string{d1, c2, c1}},
		{"two per page", e.keyA, "limit=2", []string{d1, c2, c1}},
		{"B sees only its own", e.keyB, "", []string{cb}},
		{"sandbox", e.keyA, "sandbox=" + s1.Sandbox.ID, []string{d1, c1}},
		{"another project's sandbox", e.keyB, "sandbox=" + s1.Sandbox.ID, nil},
		{"state", e.keyA, "state=succeeded", []string{c1}},
		{"states", e.keyA, "state=pending&state=running", []string{d1, c2}},
		{"kind", e.keyA, "kind=delete", []string{d1}},
		{"kind and state", e.keyA, "kind=create&state=pending", []string{c2}},
		{"all filters, paged", e.keyA, "sandbox=" + s1.Sandbox.ID + "&kind=create&state=succeeded&limit=1", []string{c1}},
		{"no match", e.keyA, "state=failed", nil},
		{"member names its own project", e.keyA, "project=" + e.projA.String(), []string{d1, c2, c1}},
		{"admin names a project", e.admin, "project=" + e.projA.String() + "&kind=create", []string{c2, c1}},
		{"admin's own project", e.admin, "", nil},
	} {
		if got := e.listOps(t, tc.key, tc.query); !slices.Equal(got, tc.want) {
			t.Errorf("%s: GET /v1/operations?%s = %v, want %v", tc.name, tc.query, got, tc.want)
		}
	}

	// The rows are the operations as GET /v1/operations/{id} shows them.
	var page apiv1.OperationList
	e.do("GET", "/v1/operations?sandbox="+s1.Sandbox.ID+"&kind=create", e.keyA, "").want(t, http.StatusOK).decode(t, &page)
	var one apiv1.Operation
	e.do("GET", "/v1/operations/"+c1, e.keyA, "").want(t, http.StatusOK).decode(t, &one)
	if len(page.Operations) != 1 || page.Operations[0].ID != one.ID || page.Operations[0].State != "succeeded" ||
		page.Operations[0].Kind != "create" || page.Operations[0].SandboxID != s1.Sandbox.ID || page.Operations[0].FinishedAt == nil {
		t.Fatalf("listed %+v, want %+v", page.Operations, one)
	}
	// A page that is full but last has no cursor; a cut page has one.
	e.do("GET", "/v1/operations?limit=3", e.keyA, "").want(t, http.StatusOK).decode(t, &page)
	if len(page.Operations) != 3 || page.NextCursor != "" {
		t.Fatalf("limit=3 of 3: %d operations, cursor %q", len(page.Operations), page.NextCursor)
	}
	e.do("GET", "/v1/operations?limit=2", e.keyA, "").want(t, http.StatusOK).decode(t, &page)
	if len(page.Operations) != 2 || page.NextCursor == "" {
		t.Fatalf("limit=2 of 3: %d operations, cursor %q", len(page.Operations), page.NextCursor)
	}
	// A cursor carries no authority: B following A's cursor sees only B's.
	var other apiv1.OperationList
	e.do("GET", "/v1/operations?cursor="+url.QueryEscape(page.NextCursor), e.keyB, "").want(t, http.StatusOK).decode(t, &other)
	for _, op := range other.Operations {
		if op.ID != cb {
			t.Fatalf("B listed %s with A's cursor", op.ID)
		}
	}
}

func TestListOperationsBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.createSandbox(e.keyA, `{}`)
	var sbPage apiv1.SandboxList
	e.createSandbox(e.keyA, `{}`)
	e.do("GET", "/v1/sandboxes?limit=1", e.keyA, "").want(t, http.StatusOK).decode(t, &sbPage)
	if sbPage.NextCursor == "" {
		t.Fatal("no sandbox cursor to misuse")
	}
	for _, tc := range []struct {
		name, key, query string
		status           int
		code             string
		invalid          bool // the OpenAPI document refuses it too
	}{
		{"unknown parameter", e.keyA, "sort=asc", 400, apiv1.CodeInvalidRequest, false},
		{"bad state", e.keyA, "state=done", 400, apiv1.CodeInvalidRequest, true},
		{"sandbox state is not an operation state", e.keyA, "state=running&state=paused", 400, apiv1.CodeInvalidRequest, true},
		{"bad kind", e.keyA, "kind=explode", 400, apiv1.CodeInvalidRequest, true},
		{"bad sandbox", e.keyA, "sandbox=nope", 400, apiv1.CodeInvalidRequest, true},
		{"operation ID as sandbox", e.keyA, "sandbox=" + s.Operation.ID, 400, apiv1.CodeInvalidRequest, true},
		{"sandbox twice", e.keyA, "sandbox=" + s.Sandbox.ID + "&sandbox=" + s.Sandbox.ID, 400, apiv1.CodeInvalidRequest, false},
		{"limit zero", e.keyA, "limit=0", 400, apiv1.CodeInvalidRequest, true},
		{"limit too big", e.keyA, "limit=1001", 400, apiv1.CodeInvalidRequest, true},
		{"limit not a number", e.keyA, "limit=ten", 400, apiv1.CodeInvalidRequest, true},
		{"limit twice", e.keyA, "limit=1&limit=2", 400, apiv1.CodeInvalidRequest, false},
		{"garbage cursor", e.keyA, "cursor=%21%21", 400, apiv1.CodeInvalidRequest, true},
		{"sandbox listing's cursor", e.keyA, "cursor=" + sbPage.NextCursor, 400, apiv1.CodeInvalidRequest, false},
		{"bad project", e.admin, "project=prj_nope", 400, apiv1.CodeInvalidRequest, true},
		{"member names another project", e.keyA, "project=" + e.projB.String(), 403, apiv1.CodePermissionDenied, false},
		{"admin names an unknown project", e.admin, "project=" + model.NewProjectID().String(), 404, apiv1.CodeNotFound, false},
		{"no key", "", "", 401, apiv1.CodeUnauthenticated, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.send(req{method: "GET", path: "/v1/operations?" + tc.query, key: tc.key, invalid: tc.invalid, t: t}).
				wantError(t, tc.status, tc.code)
		})
	}
}
