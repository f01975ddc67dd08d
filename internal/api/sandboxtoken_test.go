package api

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/model"
)

// advance moves the env's clock forward by d.
func (e *testEnv) advance(d time.Duration) {
	e.clock.mu.Lock()
	defer e.clock.mu.Unlock()
	e.clock.t = e.clock.t.Add(d)
}

// sandboxToken signs a sandbox access token with the env's keyring.
func (e *testEnv) sandboxToken(t testing.TB, sb model.SandboxID, project model.ProjectID) string {
	t.Helper()
	tok, err := e.ring.Issuer().IssueSandbox(auth.SandboxClaims{Sandbox: sb, Project: project})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestE2BKeyFormat: POST /v1/admin/keys makes an E2B-form key on request,
// which works on the native API like any key; an unknown format creates
// nothing.
func TestE2BKeyFormat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var k apiv1.APIKey
	e.do("POST", "/v1/admin/keys", e.admin, fmt.Sprintf(`{"project_id": %q, "role": "member", "format": "e2b"}`, e.projA)).
		want(t, http.StatusCreated).decode(t, &k)
	if !regexp.MustCompile(`^e2b_[0-9a-f]+$`).MatchString(k.Token) {
		t.Fatalf("token %q is not an E2B key", k.Token)
	}
	if id, _, err := auth.ParseAPIKey(k.Token); err != nil || id.String() != k.ID {
		t.Fatalf("token %q does not carry key ID %s: %v", k.Token, k.ID, err)
	}
	// It is a member key of project A: it sees A's sandboxes, not B's, and
	// is no admin.
	sbA := e.createSandbox(e.keyA, `{}`).Sandbox.ID
	sbB := e.createSandbox(e.keyB, `{}`).Sandbox.ID
	e.do("GET", "/v1/sandboxes/"+sbA, k.Token, "").want(t, http.StatusOK)
	e.do("GET", "/v1/sandboxes/"+sbB, k.Token, "").wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
	e.do("GET", "/v1/admin/keys", k.Token, "").wantError(t, http.StatusForbidden, apiv1.CodePermissionDenied)
	var created apiv1.SandboxWithOperation
	e.do("POST", "/v1/sandboxes", k.Token, `{}`).want(t, http.StatusAccepted).decode(t, &created)
	e.do("GET", "/v1/sandboxes/"+created.Sandbox.ID, e.keyA, "").want(t, http.StatusOK) // in project A
	// Revoked, it is refused like any key.
	e.do("DELETE", "/v1/admin/keys/"+k.ID, e.admin, "").want(t, http.StatusOK)
	e.do("GET", "/v1/sandboxes", k.Token, "").wantError(t, http.StatusUnauthorized, apiv1.CodeUnauthenticated)

	// The default and the explicit Airlock format.
	for _, body := range []string{
		fmt.Sprintf(`{"project_id": %q, "role": "member"}`, e.projA),
		fmt.Sprintf(`{"project_id": %q, "role": "member", "format": "airlock"}`, e.projA),
	} {
		var a apiv1.APIKey
		e.do("POST", "/v1/admin/keys", e.admin, body).want(t, http.StatusCreated).decode(t, &a)
		if !strings.HasPrefix(a.Token, "alk_") {
			t.Fatalf("%s: token %q", body, a.Token)
		}
		e.do("GET", "/v1/sandboxes", a.Token, "").want(t, http.StatusOK)
	}

	// Unknown formats: 400, nothing created.
	before := e.dump()
	for _, f := range []string{`"E2B"`, `"alk"`, `"e2b "`, `"x"`, `1`, `""`} {
		body := fmt.Sprintf(`{"project_id": %q, "role": "member", "format": %s}`, e.projA, f)
		t.Run(f, func(t *testing.T) {
			if f == `""` {
				// The empty string is the default format (last: it
				// creates a key).
				var a apiv1.APIKey
				e.send(req{method: "POST", path: "/v1/admin/keys", key: e.admin, body: body, invalid: true, t: t}).want(t, http.StatusCreated).decode(t, &a)
				if !strings.HasPrefix(a.Token, "alk_") {
					t.Fatalf("token %q", a.Token)
				}
				return
			}
			r := e.send(req{method: "POST", path: "/v1/admin/keys", key: e.admin, body: body, invalid: true, t: t}).
				wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
			if f != `1` && !strings.Contains(string(r.body), "format") {
				t.Fatalf("message does not name the format: %s", r.body)
			}
			if after := e.dump(); after != before {
				t.Fatalf("a refused key changed the store:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// TestSandboxTokenOpensItsSandbox: a sandbox access token acts as a member
// of its project on its own sandbox's routes.
func TestSandboxTokenOpensItsSandbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.runningSandbox(e.keyA)
	tok := e.sandboxToken(t, sb, e.projA)

	var got apiv1.Sandbox
	e.do("GET", "/v1/sandboxes/"+sb.String(), tok, "").want(t, http.StatusOK).decode(t, &got)
	if got.ID != sb.String() {
		t.Fatalf("got %+v", got)
	}
	// What the owner decides is not the token's.
	e.do("POST", "/v1/sandboxes/"+sb.String()+"/timeout", tok, `{"timeout": 600}`).wantError(t, http.StatusForbidden, apiv1.CodeTokenScope)
	e.do("GET", "/v1/sandboxes/"+sb.String()+"/egress", tok, "").wantError(t, http.StatusForbidden, apiv1.CodeTokenScope)
	e.do("DELETE", "/v1/sandboxes/"+sb.String(), tok, "").wantError(t, http.StatusForbidden, apiv1.CodeTokenScope)
	e.do("POST", "/v1/sandboxes/"+sb.String()+"/suspend", tok, "").wantError(t, http.StatusForbidden, apiv1.CodeTokenScope)
	var cs apiv1.CommandSession
	e.do("POST", "/v1/sandboxes/"+sb.String()+"/commands", tok, `{"args": ["true"]}`).want(t, http.StatusCreated).decode(t, &cs)
	if cs.AttachmentToken == "" {
		t.Fatal("no attachment token")
	}
	var att apiv1.CommandSession
	e.do("POST", attachmentsPath(sb.String(), cs.ProcessID), tok, `{"actions": ["read"]}`).want(t, http.StatusCreated).decode(t, &att)

	// Once the sandbox is deleted, the token is dead.
	e.do("DELETE", "/v1/sandboxes/"+sb.String(), e.keyA, "").want(t, http.StatusAccepted)
	e.do("GET", "/v1/sandboxes/"+sb.String(), tok, "").want(t, http.StatusOK) // deleting
	e.finishDelete(sb)
	e.do("GET", "/v1/sandboxes/"+sb.String(), tok, "").wantError(t, http.StatusUnauthorized, apiv1.CodeUnauthenticated)
	e.do("GET", "/v1/sandboxes/"+sb.String(), e.keyA, "").want(t, http.StatusOK) // the key still sees it
}

// TestSandboxTokenAttacks is the attacker's table: every request here is
// refused with the status and code given, and changes nothing.
func TestSandboxTokenAttacks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sbA := e.runningSandbox(e.keyA)
	sbA2 := e.runningSandbox(e.keyA)
	sbB := e.runningSandbox(e.keyB)
	tok := e.sandboxToken(t, sbA, e.projA)
	cs := e.newSession(e.keyA)
	fileTok, err := e.ring.Issuer().IssueFile(auth.FileClaims{Sandbox: sbA, Path: "/f", Direction: apiv1.DirectionDownload, IssuedAt: e.clock.Now()})
	if err != nil {
		t.Fatal(err)
	}
	// Another keyring, unknown to the API.
	stranger, err := auth.OpenKeyring(filepath.Join(t.TempDir(), "keys"), auth.KeyringOptions{})
	if err != nil {
		t.Fatal(err)
	}
	strangerTok, err := stranger.Issuer().IssueSandbox(auth.SandboxClaims{Sandbox: sbA, Project: e.projA})
	if err != nil {
		t.Fatal(err)
	}
	// The API's own key ID with another key's signature.
	_, otherPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sameKid, err := auth.NewIssuer(e.ring.Keys()[0].ID, otherPriv)
	if err != nil {
		t.Fatal(err)
	}
	forgedTok, err := sameKid.IssueSandbox(auth.SandboxClaims{Sandbox: sbA, Project: e.projA})
	if err != nil {
		t.Fatal(err)
	}
	body := strings.TrimPrefix(tok, auth.SandboxTokenPrefix)
	parts := strings.Split(body, ".")
	otherParts := strings.Split(strings.TrimPrefix(e.sandboxToken(t, sbA2, e.projA), auth.SandboxTokenPrefix), ".")
	sbAPath := "/v1/sandboxes/" + sbA.String()

	cases := []struct {
		name, method, path, token, body string
		status                          int
		code                            string
	}{
		{"other sandbox of the project", "GET", "/v1/sandboxes/" + sbA2.String(), tok, "", 403, apiv1.CodeTokenScope},
		{"other sandbox, delete", "DELETE", "/v1/sandboxes/" + sbA2.String(), tok, "", 403, apiv1.CodeTokenScope},
		{"other sandbox, commands", "POST", "/v1/sandboxes/" + sbA2.String() + "/commands", tok, `{"args": ["true"]}`, 403, apiv1.CodeTokenScope},
		{"other project's sandbox", "GET", "/v1/sandboxes/" + sbB.String(), tok, "", 403, apiv1.CodeTokenScope},
		{"list sandboxes", "GET", "/v1/sandboxes", tok, "", 403, apiv1.CodeTokenScope},
		{"create sandbox", "POST", "/v1/sandboxes", tok, `{}`, 403, apiv1.CodeTokenScope},
		{"templates", "GET", "/v1/templates", tok, "", 403, apiv1.CodeTokenScope},
		{"secrets", "GET", "/v1/secrets", tok, "", 403, apiv1.CodeTokenScope},
		{"admin keys", "POST", "/v1/admin/keys", tok, fmt.Sprintf(`{"project_id": %q, "role": "admin"}`, e.projA), 403, apiv1.CodeTokenScope},
		{"admin projects", "GET", "/v1/admin/projects", tok, "", 403, apiv1.CodeTokenScope},
		{"operations", "GET", "/v1/operations/" + model.NewOperationID().String(), tok, "", 403, apiv1.CodeTokenScope},
		{"claims name another project", "GET", "/v1/sandboxes/" + sbB.String(), e.sandboxToken(t, sbB, e.projA), "", 401, apiv1.CodeUnauthenticated},
		{"claims name another project (own sandbox)", "GET", sbAPath, e.sandboxToken(t, sbA, e.projB), "", 401, apiv1.CodeUnauthenticated},
		{"no such sandbox", "GET", "/v1/sandboxes/" + model.NewSandboxID().String(), e.sandboxToken(t, model.NewSandboxID(), e.projA), "", 401, apiv1.CodeUnauthenticated},
		{"system project", "GET", sbAPath, e.sandboxToken(t, sbA, model.SystemProject), "", 401, apiv1.CodeUnauthenticated},
		{"unknown key", "GET", sbAPath, strangerTok, "", 401, apiv1.CodeUnauthenticated},
		{"forged with the API's kid", "GET", sbAPath, forgedTok, "", 401, apiv1.CodeUnauthenticated},
		{"another token's signature", "GET", sbAPath, auth.SandboxTokenPrefix + parts[0] + "." + parts[1] + "." + otherParts[2], "", 401, apiv1.CodeUnauthenticated},
		{"payload swapped to another sandbox", "GET", "/v1/sandboxes/" + sbA2.String(), auth.SandboxTokenPrefix + parts[0] + "." + otherParts[1] + "." + parts[2], "", 401, apiv1.CodeUnauthenticated},
		{"truncated", "GET", sbAPath, tok[:len(tok)-3], "", 401, apiv1.CodeUnauthenticated},
		{"malformed", "GET", sbAPath, "als_x", "", 401, apiv1.CodeUnauthenticated},
		{"prefix only", "GET", sbAPath, "als_", "", 401, apiv1.CodeUnauthenticated},
		{"attachment token as sandbox token", "GET", "/v1/sandboxes/" + cs.SandboxID, auth.SandboxTokenPrefix + strings.TrimPrefix(cs.AttachmentToken, "alt_"), "", 401, apiv1.CodeUnauthenticated},
		{"file token as sandbox token", "GET", sbAPath, auth.SandboxTokenPrefix + strings.TrimPrefix(fileTok, auth.FilesTokenPrefix), "", 401, apiv1.CodeUnauthenticated},
		{"sandbox token as attachment token", "GET", sbAPath, "alt_" + body, "", 401, apiv1.CodeWrongTokenKind},
		{"sandbox token as file token", "GET", sbAPath, auth.FilesTokenPrefix + body, "", 401, apiv1.CodeWrongTokenKind},
		{"sandbox token as API key", "GET", sbAPath, "alk_" + body, "", 401, apiv1.CodeUnauthenticated},
	}
	before := e.dump()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.send(req{method: tc.method, path: tc.path, key: tc.token, body: tc.body, t: t}).wantError(t, tc.status, tc.code)
		})
	}
	if after := e.dump(); after != before {
		t.Fatalf("refused requests changed the store:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// A retired key: after a rotation the old token keeps working for the
	// overlap window, then not; the new key's token does.
	e.do("GET", sbAPath, tok, "").want(t, http.StatusOK)
	if _, err := e.ring.Rotate(); err != nil {
		t.Fatal(err)
	}
	fresh := e.sandboxToken(t, sbA, e.projA)
	if fresh == tok {
		t.Fatal("the token did not change with the key")
	}
	e.do("GET", sbAPath, tok, "").want(t, http.StatusOK)
	e.advance(auth.MinKeyOverlap + time.Minute)
	e.do("GET", sbAPath, tok, "").wantError(t, http.StatusUnauthorized, apiv1.CodeUnauthenticated)
	e.do("GET", sbAPath, fresh, "").want(t, http.StatusOK)
}

// TestSandboxTokenScopeOnEveryRoute: a valid sandbox token is refused with
// token_scope on every route but its own sandbox's, and on the owner's
// routes of its own sandbox (delete, timeout, egress, pause, suspend),
// changing nothing; it is never refused for its scope on the rest of its
// own sandbox's routes.
func TestSandboxTokenScopeOnEveryRoute(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cs := e.newSession(e.keyA)
	own := model.SandboxID(cs.SandboxID)
	other := e.runningSandbox(e.keyA)
	tok := e.sandboxToken(t, own, e.projA)
	keyID, _, err := auth.ParseAPIKey(e.keyA)
	if err != nil {
		t.Fatal(err)
	}
	bodies, queries := everyRouteRequests(e)
	pathOf := func(rt route, sb model.SandboxID) string {
		path := e.walkPath(rt, cs.ProcessID, keyID, sb.String(), "")
		return path + queries[rt.method+" "+rt.pattern]
	}
	isOwn := func(rt route) bool {
		return rt.pattern == "/v1/sandboxes/{id}" || strings.HasPrefix(rt.pattern, "/v1/sandboxes/{id}/")
	}

	before := e.dump()
	n := 0
	for _, rt := range e.api.routes {
		if rt.access.level() == publicAccess {
			continue
		}
		key := rt.method + " " + rt.pattern
		// Every route, with {id} another sandbox where it is one.
		t.Run(key+" elsewhere", func(t *testing.T) {
			res := e.send(req{method: rt.method, path: pathOf(rt, other), key: tok, body: bodies[key], t: t})
			if rt.method == http.MethodHead { // no body to read the code from
				res.want(t, http.StatusForbidden)
				return
			}
			res.wantError(t, http.StatusForbidden, apiv1.CodeTokenScope)
		})
		n++
	}
	if n < 40 {
		t.Fatalf("only %d routes tried", n)
	}
	if after := e.dump(); after != before {
		t.Fatalf("refused requests changed the store:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// Its own sandbox's routes: whatever the handler answers, it is not a
	// refusal of the token. DELETE goes last. Two routes answer 501 here,
	// where no agent hosts the sandbox (TestSandboxTokenOpensItsSandbox and
	// the forward test reach them).
	needsAgent := map[string]bool{
		"GET /v1/sandboxes/{id}/processes/{process_id}":         true,
		"POST /v1/sandboxes/{id}/processes/{process_id}/signal": true,
	}
	// The owner's routes of its own sandbox are refused like any other.
	ownerOnly := 0
	for _, rt := range e.api.routes {
		if !isOwn(rt) || rt.has(sandboxToken) {
			continue
		}
		ownerOnly++
		key := rt.method + " " + rt.pattern
		t.Run(key+" own, owner's", func(t *testing.T) {
			e.send(req{method: rt.method, path: pathOf(rt, own), key: tok, body: bodies[key], t: t}).wantError(t, http.StatusForbidden, apiv1.CodeTokenScope)
		})
	}
	if ownerOnly < 5 {
		t.Fatalf("only %d owner-only routes of a sandbox", ownerOnly)
	}
	if after := e.dump(); after != before {
		t.Fatalf("refused requests changed the store:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	for _, rt := range e.api.routes {
		if !isOwn(rt) || !rt.has(sandboxToken) || needsAgent[rt.method+" "+rt.pattern] {
			continue
		}
		key := rt.method + " " + rt.pattern
		t.Run(key+" own", func(t *testing.T) {
			r := e.send(req{method: rt.method, path: pathOf(rt, own), key: tok, body: bodies[key], t: t})
			var apiErr apiv1.Error
			_ = json.Unmarshal(r.body, &apiErr)
			if r.status == http.StatusUnauthorized || r.status == http.StatusForbidden && (rt.method == http.MethodHead || apiErr.Code == apiv1.CodeTokenScope) {
				t.Fatalf("refused: %d %s", r.status, r.body)
			}
		})
	}
}

// TestSandboxTokenRateLimited: a sandbox token's mutations are rate
// limited in a bucket of their own (the sandbox's), apart from the keys'.
func TestSandboxTokenRateLimited(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *envConfig) { c.MutationRate, c.MutationBurst = 0.001, 5 }) // the setup's admin key makes 4
	sb := e.runningSandbox(e.keyA)                                                    // key A: 1
	tok := e.sandboxToken(t, sb, e.projA)
	// Waking a running sandbox is refused (409) but is a mutation all the same.
	path := "/v1/sandboxes/" + sb.String() + "/wake"
	for range 5 {
		e.do("POST", path, tok, "").want(t, http.StatusConflict)
	}
	e.do("POST", path, tok, "").wantError(t, http.StatusTooManyRequests, apiv1.CodeRateLimited)
	e.do("GET", "/v1/sandboxes/"+sb.String(), tok, "").want(t, http.StatusOK)
	e.do("POST", path, e.keyA, "").want(t, http.StatusConflict)
}
