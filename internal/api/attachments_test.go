package api

import (
	"net/http"
	"slices"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/model"
)

// newSession creates a running sandbox of the key's project and a command
// session in it.
func (e *testEnv) newSession(key string) apiv1.CommandSession {
	e.t.Helper()
	sb := e.createSandbox(key, `{}`).Sandbox.ID
	e.finishCreate(model.SandboxID(sb))
	var cs apiv1.CommandSession
	e.do("POST", "/v1/sandboxes/"+sb+"/commands", key, `{"args": ["true"]}`).want(e.t, http.StatusCreated).decode(e.t, &cs)
	return cs
}

func attachmentsPath(sb, pid string) string {
	return "/v1/sandboxes/" + sb + "/processes/" + pid + "/attachments"
}

func TestCreateAttachment(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cs := e.newSession(e.keyA)
	verify := func(tok string) auth.AttachClaims {
		t.Helper()
		c, err := e.ring.Verifier().Verify(tok, e.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	// Without a body: every action, same session and process, a new token.
	var re apiv1.CommandSession
	e.send(req{method: "POST", path: attachmentsPath(cs.SandboxID, cs.ProcessID), key: e.keyA}).
		want(t, http.StatusCreated).decode(t, &re)
	if re.ID != cs.ID || re.ProcessID != cs.ProcessID || re.SandboxID != cs.SandboxID || re.AttachURL != cs.AttachURL {
		t.Fatalf("re-issued %+v for %+v", re, cs)
	}
	if re.AttachmentToken == cs.AttachmentToken {
		t.Fatal("the same token came back")
	}
	if c := verify(re.AttachmentToken); !slices.Equal(c.Actions, auth.AllActions()) || c.Process.String() != cs.ProcessID ||
		c.Session.String() != cs.ID || !c.ExpiresAt.Equal(re.ExpiresAt) {
		t.Fatalf("claims %+v", c)
	}

	// Narrowed to read only.
	e.do("POST", attachmentsPath(cs.SandboxID, cs.ProcessID), e.keyA, `{"actions": ["read"]}`).
		want(t, http.StatusCreated).decode(t, &re)
	if c := verify(re.AttachmentToken); !slices.Equal(c.Actions, []auth.Action{auth.ActionRead}) || c.Allows(auth.ActionStdin) {
		t.Fatalf("narrowed claims %+v", c)
	}

	// With an Idempotency-Key a repeat replays the same token.
	h := http.Header{"Idempotency-Key": {"re-1"}}
	r1 := e.send(req{method: "POST", path: attachmentsPath(cs.SandboxID, cs.ProcessID), key: e.keyA, header: h, body: `{"actions": ["read", "signal"]}`}).want(t, http.StatusCreated)
	r2 := e.send(req{method: "POST", path: attachmentsPath(cs.SandboxID, cs.ProcessID), key: e.keyA, header: h, body: `{"actions": ["read", "signal"]}`}).want(t, http.StatusCreated)
	if string(r1.body) != string(r2.body) || r2.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("not replayed: %s vs %s", r1.body, r2.body)
	}
}

// TestCreateAttachmentRefuses: refused requests answer the right error and
// change nothing.
func TestCreateAttachmentRefuses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cs := e.newSession(e.keyA)
	other := e.newSession(e.keyA) // another sandbox of the same project
	csB := e.newSession(e.keyB)   // another project
	pending := e.createSandbox(e.keyA, `{}`).Sandbox.ID
	path := attachmentsPath(cs.SandboxID, cs.ProcessID)
	cases := []struct {
		name, path, key, body string
		invalid               bool
		status                int
		code                  string
	}{
		{"unknown action", path, e.keyA, `{"actions": ["exec"]}`, true, 400, apiv1.CodeInvalidRequest},
		{"no actions", path, e.keyA, `{"actions": []}`, true, 400, apiv1.CodeInvalidRequest},
		{"duplicate action", path, e.keyA, `{"actions": ["read", "read"]}`, true, 400, apiv1.CodeInvalidRequest},
		{"unknown field", path, e.keyA, `{"action": ["read"]}`, true, 400, apiv1.CodeInvalidRequest},
		{"bad process id", attachmentsPath(cs.SandboxID, "proc_x"), e.keyA, ``, true, 400, apiv1.CodeInvalidRequest},
		{"unknown process", attachmentsPath(cs.SandboxID, model.NewProcessID().String()), e.keyA, ``, false, 404, apiv1.CodeNotFound},
		{"process of another sandbox", attachmentsPath(cs.SandboxID, other.ProcessID), e.keyA, ``, false, 404, apiv1.CodeNotFound},
		{"process of another project", attachmentsPath(cs.SandboxID, csB.ProcessID), e.keyA, ``, false, 404, apiv1.CodeNotFound},
		{"sandbox of another project", attachmentsPath(csB.SandboxID, csB.ProcessID), e.keyA, ``, false, 404, apiv1.CodeNotFound},
		{"unknown sandbox", attachmentsPath(model.NewSandboxID().String(), cs.ProcessID), e.keyA, ``, false, 404, apiv1.CodeNotFound},
		{"process not in the pending sandbox", attachmentsPath(pending, cs.ProcessID), e.keyA, ``, false, 404, apiv1.CodeNotFound},
		{"no key", path, "", ``, true, 401, apiv1.CodeUnauthenticated},
		{"the session's own token", path, cs.AttachmentToken, ``, false, 401, apiv1.CodeWrongTokenKind},
	}
	before := e.dump()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.send(req{method: "POST", path: tc.path, key: tc.key, body: tc.body, invalid: tc.invalid, t: t}).
				wantError(t, tc.status, tc.code)
		})
	}
	if after := e.dump(); after != before {
		t.Fatalf("refused requests changed the store:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// A sandbox that is no longer running gets no new tokens.
	e.do("DELETE", "/v1/sandboxes/"+cs.SandboxID, e.keyA, "").want(t, http.StatusAccepted)
	e.send(req{method: "POST", path: path, key: e.keyA}).wantError(t, http.StatusConflict, apiv1.CodeSandboxNotRunning)
}

// TestAttachmentTokenRefusedOnEveryRoute: a valid attachment token opens no
// management route, and trying changes nothing.
func TestAttachmentTokenRefusedOnEveryRoute(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cs := e.newSession(e.keyA)
	keysBefore := len(e.ring.Keys())
	bodies, queries := everyRouteRequests(e)
	keyID, _, err := auth.ParseAPIKey(e.keyA)
	if err != nil {
		t.Fatal(err)
	}
	before := e.dump()
	n := 0
	for _, rt := range e.api.routes {
		if rt.access.level() == publicAccess {
			continue
		}
		key := rt.method + " " + rt.pattern
		path := e.walkPath(rt, cs.ProcessID, keyID, cs.SandboxID, "")
		path += queries[key]
		for _, tok := range []string{cs.AttachmentToken, "alt_x", "alt_" + e.keyA} {
			t.Run(key+" "+tok[:5], func(t *testing.T) {
				res := e.send(req{method: rt.method, path: path, key: tok, body: bodies[key], t: t})
				if rt.method == http.MethodHead { // no body to read the code from
					res.want(t, http.StatusUnauthorized)
					return
				}
				res.wantError(t, http.StatusUnauthorized, apiv1.CodeWrongTokenKind)
			})
		}
		n++
	}
	if n < 12 {
		t.Fatalf("only %d routes tried", n)
	}
	if after := e.dump(); after != before {
		t.Fatalf("refused requests changed the store:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if len(e.ring.Keys()) != keysBefore {
		t.Fatal("a refused request rotated the signing key")
	}
}

func TestRotateAttachKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cs := e.newSession(e.keyA)
	oldKid := e.ring.Keys()[0].ID

	e.do("POST", "/v1/admin/attach-keys/rotate", e.keyA, "").wantError(t, http.StatusForbidden, apiv1.CodePermissionDenied)
	if len(e.ring.Keys()) != 1 {
		t.Fatal("a member rotated the key")
	}
	var out apiv1.AttachKeyList
	e.do("POST", "/v1/admin/attach-keys/rotate", e.admin, "").want(t, http.StatusOK).decode(t, &out)
	if len(out.Keys) != 2 || out.Keys[0].ID != oldKid || out.Keys[0].Active || out.Keys[0].NotAfter == nil ||
		!out.Keys[1].Active || out.Keys[1].NotAfter != nil {
		t.Fatalf("keys after rotation %+v", out.Keys)
	}
	// The token issued before the rotation still verifies; new ones use the new key.
	if c, err := e.ring.Verifier().Verify(cs.AttachmentToken, e.clock.Now()); err != nil || c.KeyID != oldKid {
		t.Fatalf("pre-rotation token: %+v, %v", c, err)
	}
	var re apiv1.CommandSession
	e.send(req{method: "POST", path: attachmentsPath(cs.SandboxID, cs.ProcessID), key: e.keyA}).want(t, http.StatusCreated).decode(t, &re)
	if c, err := e.ring.Verifier().Verify(re.AttachmentToken, e.clock.Now()); err != nil || c.KeyID != out.Keys[1].ID {
		t.Fatalf("post-rotation token: %+v, %v", c, err)
	}
}

func TestRotateAttachKeyUnsupported(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *envConfig) { c.AttachKeys = nil })
	e.do("POST", "/v1/admin/attach-keys/rotate", e.admin, "").wantError(t, http.StatusNotImplemented, apiv1.CodeNotSupported)
	if len(e.ring.Keys()) != 1 {
		t.Fatal("rotated without a rotator")
	}
}
