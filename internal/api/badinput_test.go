package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/model"
)

// TestBadInput sends every kind of bad request the API must refuse and
// checks the status, the error code, that the store did not change, and
// (through the validating client) that the OpenAPI document also refuses
// the requests marked invalid and documents every error response.
func TestBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	running := e.createSandbox(e.keyA, `{}`).Sandbox.ID
	e.finishCreate(model.SandboxID(running))
	pending := e.createSandbox(e.keyA, `{}`).Sandbox.ID
	pendingOp := ""
	{
		var page apiv1.SandboxList
		e.do("GET", "/v1/sandboxes?state=pending", e.keyA, "").want(t, http.StatusOK).decode(t, &page)
		if len(page.Sandboxes) != 1 {
			t.Fatalf("want one pending sandbox, got %+v", page.Sandboxes)
		}
	}
	_ = pendingOp

	// Credentials that must not work.
	_, revoked := e.newProject("revoked-keys", "member")
	revokedID, _, err := auth.ParseAPIKey(revoked)
	if err != nil {
		t.Fatal(err)
	}
	e.do("DELETE", "/v1/admin/keys/"+revokedID.String(), e.admin, "").want(t, http.StatusOK)
	unknownKey, _, _ := auth.GenerateAPIKey()
	keyID, _, _ := auth.ParseAPIKey(e.keyA)
	otherSecret, _, _ := auth.GenerateAPIKey()
	wrongSecret := "alk_" + strings.TrimPrefix(keyID.String(), "key_") + otherSecret[30:]
	var session apiv1.CommandSession
	e.do("POST", "/v1/sandboxes/"+running+"/commands", e.keyA, `{"args": ["true"]}`).want(t, http.StatusCreated).decode(t, &session)
	attachment := session.AttachmentToken

	unknownSandbox := model.NewSandboxID().String()
	big := `{"metadata": {"k": "` + strings.Repeat("x", DefaultMaxBodyBytes) + `"}}`
	sbx := "/v1/sandboxes"
	cmd := "/v1/sandboxes/" + running + "/commands"
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return h
	}
	const (
		A   = "keyA"
		ADM = "admin"
	)
	type tc struct {
		name    string
		method  string
		path    string
		key     string // "keyA", "admin" or a literal token; "" for none
		body    string
		header  http.Header
		invalid bool // the OpenAPI document must refuse the request too
		status  int
		code    string
	}
	cases := []tc{
		// Bodies.
		{"malformed JSON", "POST", sbx, A, `{"cpus":`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"empty body", "POST", sbx, A, ``, hdr("Content-Type", "application/json"), true, 400, apiv1.CodeInvalidRequest},
		{"array body", "POST", sbx, A, `[]`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"null body", "POST", sbx, A, `null`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"string body", "POST", sbx, A, `"x"`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"unknown field", "POST", sbx, A, `{"cpu": 1}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"field in the wrong case", "POST", sbx, A, `{"CPUS": 2}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"wrong type", "POST", sbx, A, `{"cpus": "2"}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"fraction", "POST", sbx, A, `{"cpus": 1.5}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"null field", "POST", sbx, A, `{"env": null}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"env not an object", "POST", sbx, A, `{"env": ["A=b"]}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"env value not a string", "POST", sbx, A, `{"env": {"A": 1}}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"duplicate field", "POST", sbx, A, `{"cpus": 1, "cpus": 2}`, nil, false, 400, apiv1.CodeInvalidRequest},
		{"trailing garbage", "POST", sbx, A, `{} x`, nil, false, 400, apiv1.CodeInvalidRequest},
		{"two objects", "POST", sbx, A, `{}{}`, nil, false, 400, apiv1.CodeInvalidRequest},
		{"oversize body", "POST", sbx, A, big, nil, true, 413, apiv1.CodePayloadTooLarge},
		{"wrong content type", "POST", sbx, A, `{}`, hdr("Content-Type", "text/plain"), true, 415, apiv1.CodeUnsupportedMedia},
		{"form content type", "POST", sbx, A, `a=b`, hdr("Content-Type", "application/x-www-form-urlencoded"), true, 415, apiv1.CodeUnsupportedMedia},
		{"no content type", "POST", sbx, A, `{}`, hdr("Content-Type", ""), true, 415, apiv1.CodeUnsupportedMedia},
		{"latin-1 charset", "POST", sbx, A, `{}`, hdr("Content-Type", "application/json; charset=latin1"), false, 415, apiv1.CodeUnsupportedMedia},
		// Values.
		{"bad snapshot name", "POST", "/v1/sandboxes/" + running + "/snapshots", A, `{"name": "-x"}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"snapshot name like an ID", "POST", "/v1/sandboxes/" + running + "/snapshots", A, `{"name": "snp_x"}`, nil, false, 400, apiv1.CodeInvalidRequest},
		{"unknown snapshot field", "POST", "/v1/sandboxes/" + running + "/snapshots", A, `{"names": ["x"]}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"bad snapshot list name", "GET", "/v1/snapshots?name=a/b", A, ``, nil, true, 400, apiv1.CodeInvalidRequest},
		{"bad template name", "POST", sbx, A, `{"template": "Bad_Name"}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"empty template", "POST", sbx, A, `{"template": ""}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"short digest", "POST", sbx, A, `{"template": "sha256:abc"}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"upper-case digest", "POST", sbx, A, `{"template": "sha256:` + strings.Repeat("A", 64) + `"}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"unknown template", "POST", sbx, A, `{"template": "nope"}`, nil, false, 404, apiv1.CodeTemplateNotFound},
		{"unknown digest", "POST", sbx, A, `{"template": "sha256:` + strings.Repeat("0", 64) + `"}`, nil, false, 404, apiv1.CodeTemplateNotFound},
		{"zero cpus", "POST", sbx, A, `{"cpus": 0}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"too many cpus", "POST", sbx, A, `{"cpus": 65}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"negative cpus", "POST", sbx, A, `{"cpus": -1}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"too little memory", "POST", sbx, A, `{"memory_mib": 31}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"too much memory", "POST", sbx, A, `{"memory_mib": 262145}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"huge number", "POST", sbx, A, `{"memory_mib": 1e40}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"env name with digit first", "POST", sbx, A, `{"env": {"1X": "a"}}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"env name with dash", "POST", sbx, A, `{"env": {"A-B": "a"}}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"env name empty", "POST", sbx, A, `{"env": {"": "a"}}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"env value with NUL", "POST", sbx, A, `{"env": {"A": "x\u0000y"}}`, nil, false, 400, apiv1.CodeInvalidRequest},
		{"metadata key with space", "POST", sbx, A, `{"metadata": {"a b": "x"}}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"metadata value too long", "POST", sbx, A, `{"metadata": {"a": "` + strings.Repeat("x", 257) + `"}}`, nil, true, 400, apiv1.CodeInvalidRequest},
		// Credentials.
		{"no key", "POST", sbx, "", `{}`, nil, true, 401, apiv1.CodeUnauthenticated},
		{"basic auth", "POST", sbx, "", `{}`, hdr("Authorization", "Basic dTpw"), true, 401, apiv1.CodeUnauthenticated},
		{"malformed key", "POST", sbx, "nope", `{}`, nil, false, 401, apiv1.CodeUnauthenticated},
		{"truncated key", "POST", sbx, "", `{}`, hdr("Authorization", "Bearer "+unknownKey[:40]), false, 401, apiv1.CodeUnauthenticated},
		{"unknown key", "POST", sbx, unknownKey, `{}`, nil, false, 401, apiv1.CodeUnauthenticated},
		{"wrong secret", "POST", sbx, wrongSecret, `{}`, nil, false, 401, apiv1.CodeUnauthenticated},
		{"revoked key", "POST", sbx, revoked, `{}`, nil, false, 401, apiv1.CodeUnauthenticated},
		{"revoked key reads", "GET", sbx, revoked, ``, nil, false, 401, apiv1.CodeUnauthenticated},
		{"attachment token", "POST", sbx, attachment, `{}`, nil, false, 401, apiv1.CodeWrongTokenKind},
		{"attachment token reads", "GET", "/v1/sandboxes/" + running, attachment, ``, nil, false, 401, apiv1.CodeWrongTokenKind},
		{"bad idempotency key", "POST", sbx, A, `{}`, hdr("Idempotency-Key", "has space"), true, 400, apiv1.CodeInvalidRequest},
		{"long idempotency key", "POST", sbx, A, `{}`, hdr("Idempotency-Key", strings.Repeat("k", 256)), true, 400, apiv1.CodeInvalidRequest},
		// IDs in paths and queries.
		{"short sandbox ID", "GET", "/v1/sandboxes/sbx_123", A, ``, nil, true, 400, apiv1.CodeInvalidRequest},
		{"not a sandbox ID", "GET", "/v1/sandboxes/nope", A, ``, nil, true, 400, apiv1.CodeInvalidRequest},
		{"operation ID as sandbox ID", "DELETE", "/v1/sandboxes/" + model.NewOperationID().String(), A, ``, nil, true, 400, apiv1.CodeInvalidRequest},
		{"upper-case sandbox ID", "GET", "/v1/sandboxes/" + strings.ToUpper(running), A, ``, nil, true, 400, apiv1.CodeInvalidRequest},
		{"unknown sandbox", "GET", "/v1/sandboxes/" + unknownSandbox, A, ``, nil, false, 404, apiv1.CodeNotFound},
		{"delete unknown sandbox", "DELETE", "/v1/sandboxes/" + unknownSandbox, A, ``, nil, false, 404, apiv1.CodeNotFound},
		{"delete with a body", "DELETE", "/v1/sandboxes/" + pending, A, `{}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"bad operation ID", "GET", "/v1/operations/op_x", A, ``, nil, true, 400, apiv1.CodeInvalidRequest},
		{"unknown operation", "GET", "/v1/operations/" + model.NewOperationID().String(), A, ``, nil, false, 404, apiv1.CodeNotFound},
		{"bad wait", "GET", "/v1/operations/" + model.NewOperationID().String() + "?wait=soon", A, ``, nil, true, 400, apiv1.CodeInvalidRequest},
		{"negative wait", "GET", "/v1/operations/" + model.NewOperationID().String() + "?wait=-1s", A, ``, nil, true, 400, apiv1.CodeInvalidRequest},
		{"wait over the maximum", "GET", "/v1/operations/" + model.NewOperationID().String() + "?wait=61s", A, ``, nil, false, 400, apiv1.CodeInvalidRequest},
		{"bad state filter", "GET", sbx + "?state=sleeping", A, ``, nil, true, 400, apiv1.CodeInvalidRequest},
		{"bad metadata filter", "GET", sbx + "?metadata=novalue", A, ``, nil, true, 400, apiv1.CodeInvalidRequest},
		{"zero limit", "GET", sbx + "?limit=0", A, ``, nil, true, 400, apiv1.CodeInvalidRequest},
		{"huge limit", "GET", sbx + "?limit=1001", A, ``, nil, true, 400, apiv1.CodeInvalidRequest},
		{"word limit", "GET", sbx + "?limit=ten", A, ``, nil, true, 400, apiv1.CodeInvalidRequest},
		{"cursor not base64", "GET", sbx + "?cursor=!!", A, ``, nil, true, 400, apiv1.CodeInvalidRequest},
		{"made-up cursor", "GET", sbx + "?cursor=AAAAAAAAAAAAAAAA", A, ``, nil, false, 400, apiv1.CodeInvalidRequest},
		{"unknown query parameter", "GET", sbx + "?color=red", A, ``, nil, false, 400, apiv1.CodeInvalidRequest},
		// Commands.
		{"command without args, template without a default command", "POST", cmd, A, `{}`, nil, false, 400, apiv1.CodeInvalidRequest},
		{"command with empty args, template without a default command", "POST", cmd, A, `{"args": []}`, nil, false, 400, apiv1.CodeInvalidRequest},
		{"command with empty program", "POST", cmd, A, `{"args": [""]}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"command with NUL", "POST", cmd, A, `{"args": ["echo", "a\u0000b"]}`, nil, false, 400, apiv1.CodeInvalidRequest},
		{"relative cwd", "POST", cmd, A, `{"args": ["pwd"], "cwd": "tmp"}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"unclean cwd", "POST", cmd, A, `{"args": ["pwd"], "cwd": "/a/../b"}`, nil, false, 400, apiv1.CodeInvalidRequest},
		{"command env name", "POST", cmd, A, `{"args": ["env"], "env": {"A=B": "c"}}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"command on pending sandbox", "POST", "/v1/sandboxes/" + pending + "/commands", A, `{"args": ["true"]}`, nil, false, 409, apiv1.CodeSandboxNotRunning},
		{"command on unknown sandbox", "POST", "/v1/sandboxes/" + unknownSandbox + "/commands", A, `{"args": ["true"]}`, nil, false, 404, apiv1.CodeNotFound},
		// Roles and admin input.
		{"member creates project", "POST", "/v1/admin/projects", A, `{"name": "x"}`, nil, false, 403, apiv1.CodePermissionDenied},
		{"member lists projects", "GET", "/v1/admin/projects", A, ``, nil, false, 403, apiv1.CodePermissionDenied},
		{"member creates key", "POST", "/v1/admin/keys", A, fmt.Sprintf(`{"project_id": %q, "role": "admin"}`, e.projA), nil, false, 403, apiv1.CodePermissionDenied},
		{"member lists keys", "GET", "/v1/admin/keys", A, ``, nil, false, 403, apiv1.CodePermissionDenied},
		{"member revokes key", "DELETE", "/v1/admin/keys/" + keyID.String(), A, ``, nil, false, 403, apiv1.CodePermissionDenied},
		{"member imports template", "POST", "/v1/templates", A, fmt.Sprintf(`{"source": %q}`, e.tplDir), nil, false, 403, apiv1.CodePermissionDenied},
		{"duplicate project", "POST", "/v1/admin/projects", ADM, `{"name": "tenant-a"}`, nil, false, 409, apiv1.CodeAlreadyExists},
		{"bad project name", "POST", "/v1/admin/projects", ADM, `{"name": "-x"}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"key for unknown project", "POST", "/v1/admin/keys", ADM, fmt.Sprintf(`{"project_id": %q, "role": "member"}`, model.NewProjectID()), nil, false, 404, apiv1.CodeNotFound},
		{"key with bad role", "POST", "/v1/admin/keys", ADM, fmt.Sprintf(`{"project_id": %q, "role": "root"}`, e.projA), nil, true, 400, apiv1.CodeInvalidRequest},
		{"key without role", "POST", "/v1/admin/keys", ADM, fmt.Sprintf(`{"project_id": %q}`, e.projA), nil, true, 400, apiv1.CodeInvalidRequest},
		{"key with control character", "POST", "/v1/admin/keys", ADM, fmt.Sprintf(`{"project_id": %q, "role": "member", "name": "a\nb"}`, e.projA), nil, false, 400, apiv1.CodeInvalidRequest},
		{"revoke unknown key", "DELETE", "/v1/admin/keys/" + model.NewAPIKeyID().String(), ADM, ``, nil, false, 404, apiv1.CodeNotFound},
		{"revoke bad key ID", "DELETE", "/v1/admin/keys/key_", ADM, ``, nil, true, 400, apiv1.CodeInvalidRequest},
		{"list keys of bad project", "GET", "/v1/admin/keys?project_id=prj_", ADM, ``, nil, true, 400, apiv1.CodeInvalidRequest},
		{"relative template source", "POST", "/v1/templates", ADM, `{"source": "rootfs"}`, nil, true, 400, apiv1.CodeInvalidRequest},
		{"missing template source", "POST", "/v1/templates", ADM, `{"source": "/nonexistent/rootfs"}`, nil, false, 400, apiv1.CodeInvalidRequest},
		{"bad template alias", "POST", "/v1/templates", ADM, fmt.Sprintf(`{"source": %q, "name": "UP"}`, e.tplDir), nil, true, 400, apiv1.CodeInvalidRequest},
		// Routing.
		{"unknown route", "GET", "/v1/nope", A, ``, nil, true, 404, apiv1.CodeNotFound},
		{"unknown route without key", "GET", "/nope", "", ``, nil, true, 404, apiv1.CodeNotFound},
		{"trailing slash", "GET", "/v1/sandboxes/", A, ``, nil, true, 404, apiv1.CodeNotFound},
		{"wrong method", "PUT", sbx, A, `{}`, nil, true, 405, apiv1.CodeMethodNotAllowed},
		{"wrong method on an item", "PATCH", "/v1/sandboxes/" + running, A, `{}`, nil, true, 405, apiv1.CodeMethodNotAllowed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := c.key
			switch key {
			case A:
				key = e.keyA
			case ADM:
				key = e.admin
			}
			before := e.dump()
			r := e.send(req{method: c.method, path: c.path, key: key, body: c.body, header: c.header, invalid: c.invalid, ctx: ctx, t: t})
			r.wantError(t, c.status, c.code)
			if c.status == 401 && r.header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			if c.status == 405 && r.header.Get("Allow") == "" {
				t.Error("405 without Allow")
			}
			if after := e.dump(); after != before {
				t.Fatalf("a refused request changed the store:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}
