package api

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func idem(key string) http.Header { return http.Header{"Idempotency-Key": {key}} }

func (e *testEnv) countSandboxes(project model.ProjectID) int {
	e.t.Helper()
	var n int
	if err := e.st.DB().QueryRow(`SELECT count(*) FROM sandboxes WHERE project_id = ?`, string(project)).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func TestIdempotentCreateSandbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.send(req{method: "POST", path: "/v1/sandboxes", key: e.keyA, header: idem("create-1"),
		body: `{"cpus": 2, "metadata": {"a": "1", "b": "2"}}`}).want(t, http.StatusAccepted)
	if first.header.Get(headerReplayed) != "" {
		t.Fatal("first response marked as replayed")
	}
	// Same request, other whitespace and key order: the same bytes back.
	again := e.send(req{method: "POST", path: "/v1/sandboxes", key: e.keyA, header: idem("create-1"),
		body: "{\n  \"metadata\": {\"b\": \"2\", \"a\": \"1\"},\n  \"cpus\": 2\n}"}).want(t, http.StatusAccepted)
	if !bytes.Equal(first.body, again.body) {
		t.Fatalf("replay differs:\n%s\n%s", first.body, again.body)
	}
	if again.header.Get(headerReplayed) != "true" {
		t.Fatal("replay without Idempotent-Replayed: true")
	}
	if n := e.countSandboxes(e.projA); n != 1 {
		t.Fatalf("%d sandboxes, want 1", n)
	}

	// Same key, different request: 409 and nothing changes.
	before := e.dump()
	for _, r := range []req{
		{method: "POST", path: "/v1/sandboxes", body: `{"cpus": 3, "metadata": {"a": "1", "b": "2"}}`},
		{method: "POST", path: "/v1/sandboxes", body: `{}`},
		{method: "DELETE", path: "/v1/sandboxes/" + model.NewSandboxID().String()},
	} {
		r.key, r.header = e.keyA, idem("create-1")
		e.send(r).wantError(t, http.StatusConflict, apiv1.CodeIdempotencyKeyReused)
	}
	if e.dump() != before {
		t.Fatal("a reused key changed the store")
	}

	// Keys are per project: B's "create-1" is its own.
	e.send(req{method: "POST", path: "/v1/sandboxes", key: e.keyB, header: idem("create-1"),
		body: `{"cpus": 2, "metadata": {"a": "1", "b": "2"}}`}).want(t, http.StatusAccepted)
	if a, b := e.countSandboxes(e.projA), e.countSandboxes(e.projB); a != 1 || b != 1 {
		t.Fatalf("sandboxes A=%d B=%d, want 1 and 1", a, b)
	}

	// A failed request is not remembered: the key stays free.
	e.send(req{method: "POST", path: "/v1/sandboxes", key: e.keyA, header: idem("create-2"),
		body: `{"template": "missing"}`}).wantError(t, http.StatusNotFound, apiv1.CodeTemplateNotFound)
	e.send(req{method: "POST", path: "/v1/sandboxes", key: e.keyA, header: idem("create-2"),
		body: `{}`}).want(t, http.StatusAccepted)
	if n := e.countSandboxes(e.projA); n != 2 {
		t.Fatalf("%d sandboxes, want 2", n)
	}
}

func TestIdempotencyConcurrentTwins(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 8
	var wg sync.WaitGroup
	results := make([]*resp, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = e.send(req{method: "POST", path: "/v1/sandboxes", key: e.keyA, header: idem("twin"),
				body: `{"metadata": {"twin": "yes"}}`, t: t})
		}()
	}
	wg.Wait()
	replays := 0
	for i, r := range results {
		if r.status != http.StatusAccepted {
			t.Fatalf("twin %d: status %d: %s", i, r.status, r.body)
		}
		if !bytes.Equal(r.body, results[0].body) {
			t.Fatalf("twin %d answered differently:\n%s\n%s", i, r.body, results[0].body)
		}
		if r.header.Get(headerReplayed) == "true" {
			replays++
		}
	}
	if replays != n-1 {
		t.Fatalf("%d replays, want %d", replays, n-1)
	}
	if c := e.countSandboxes(e.projA); c != 1 {
		t.Fatalf("%d sandboxes from %d concurrent twins, want 1", c, n)
	}
}

// TestIdempotencySealsSecrets: responses that carry secrets are replayable,
// but the database holds neither the secrets nor the raw key.
func TestIdempotencySealsSecrets(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.createSandbox(e.keyA, `{}`).Sandbox.ID
	e.finishCreate(model.SandboxID(sb))
	const rawKey = "secret-idempotency-key-0123456789"

	var cs1, cs2 apiv1.CommandSession
	r1 := e.send(req{method: "POST", path: "/v1/sandboxes/" + sb + "/commands", key: e.keyA, header: idem(rawKey),
		body: `{"args": ["echo", "hi"]}`}).want(t, http.StatusCreated)
	r1.decode(t, &cs1)
	r2 := e.send(req{method: "POST", path: "/v1/sandboxes/" + sb + "/commands", key: e.keyA, header: idem(rawKey),
		body: `{"args": ["echo", "hi"]}`}).want(t, http.StatusCreated)
	r2.decode(t, &cs2)
	if cs1 != cs2 || !bytes.Equal(r1.body, r2.body) {
		t.Fatalf("replayed session differs: %+v vs %+v", cs1, cs2)
	}

	var key1, key2 apiv1.APIKey
	body := fmt.Sprintf(`{"project_id": %q, "role": "member", "name": "ci"}`, e.projB)
	e.send(req{method: "POST", path: "/v1/admin/keys", key: e.admin, header: idem(rawKey), body: body}).want(t, http.StatusCreated).decode(t, &key1)
	e.send(req{method: "POST", path: "/v1/admin/keys", key: e.admin, header: idem(rawKey), body: body}).want(t, http.StatusCreated).decode(t, &key2)
	if key1 != key2 || key1.Token == "" {
		t.Fatalf("replayed key differs or has no token: %+v vs %+v", key1, key2)
	}
	var keys apiv1.APIKeyList
	e.do("GET", "/v1/admin/keys?project_id="+e.projB.String(), e.admin, "").want(t, http.StatusOK).decode(t, &keys)
	if len(keys.Keys) != 2 { // the one newEnv made, and this one
		t.Fatalf("%d keys in project B, want 2", len(keys.Keys))
	}
	// The replayed token works.
	e.do("GET", "/v1/sandboxes", key1.Token, "").want(t, http.StatusOK)

	dump := e.dump()
	secretTail := func(tok string) string { return tok[len(tok)-52:] }
	for what, s := range map[string]string{
		"attachment token":  cs1.AttachmentToken,
		"attachment secret": secretTail(cs1.AttachmentToken),
		"API key token":     key1.Token,
		"API key secret":    secretTail(key1.Token),
		"idempotency key":   rawKey,
	} {
		if strings.Contains(dump, s) || strings.Contains(dump, strings.Trim(fmt.Sprint([]byte(s)), "[]")) {
			t.Errorf("the database contains the %s", what)
		}
	}
}

func TestIdempotentDeleteAndAdmin(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.createSandbox(e.keyA, `{}`).Sandbox.ID
	d1 := e.send(req{method: "DELETE", path: "/v1/sandboxes/" + sb, key: e.keyA, header: idem("del")}).want(t, http.StatusAccepted)
	// Without the key a second delete is refused; with it, the first answer comes back.
	e.do("DELETE", "/v1/sandboxes/"+sb, e.keyA, "").wantError(t, http.StatusConflict, apiv1.CodeInvalidTransition)
	d2 := e.send(req{method: "DELETE", path: "/v1/sandboxes/" + sb, key: e.keyA, header: idem("del")}).want(t, http.StatusAccepted)
	if !bytes.Equal(d1.body, d2.body) {
		t.Fatal("replayed delete differs")
	}

	// Project creation: one project however often it is retried.
	p1 := e.send(req{method: "POST", path: "/v1/admin/projects", key: e.admin, header: idem("proj"), body: `{"name": "once"}`}).want(t, http.StatusCreated)
	p2 := e.send(req{method: "POST", path: "/v1/admin/projects", key: e.admin, header: idem("proj"), body: `{"name": "once"}`}).want(t, http.StatusCreated)
	if !bytes.Equal(p1.body, p2.body) || p2.header.Get(headerReplayed) != "true" {
		t.Fatal("project creation was not replayed")
	}
	e.send(req{method: "POST", path: "/v1/admin/projects", key: e.admin, header: idem("proj"), body: `{"name": "twice"}`}).
		wantError(t, http.StatusConflict, apiv1.CodeIdempotencyKeyReused)

	// Revocation.
	_, tok := e.newProject("revokee", "member")
	id := tok[:30]
	id = "key_" + id[4:]
	r1 := e.send(req{method: "DELETE", path: "/v1/admin/keys/" + id, key: e.admin, header: idem("rev")}).want(t, http.StatusOK)
	r2 := e.send(req{method: "DELETE", path: "/v1/admin/keys/" + id, key: e.admin, header: idem("rev")}).want(t, http.StatusOK)
	if !bytes.Equal(r1.body, r2.body) {
		t.Fatal("replayed revocation differs")
	}
	var k apiv1.APIKey
	r1.decode(t, &k)
	if k.RevokedAt == nil || k.Token != "" {
		t.Fatalf("revoked key: %+v", k)
	}
	e.do("GET", "/v1/sandboxes", tok, "").wantError(t, http.StatusUnauthorized, apiv1.CodeUnauthenticated)

	// Template import: one build, replayed.
	body := fmt.Sprintf(`{"source": %q, "name": "again"}`, e.tplDir)
	t1 := e.send(req{method: "POST", path: "/v1/templates", key: e.admin, header: idem("tpl"), body: body}).want(t, http.StatusAccepted)
	t2 := e.send(req{method: "POST", path: "/v1/templates", key: e.admin, header: idem("tpl"), body: body}).want(t, http.StatusAccepted)
	if !bytes.Equal(t1.body, t2.body) || t2.header.Get(headerReplayed) != "true" {
		t.Fatal("template import was not replayed")
	}
	var bl apiv1.BuildList
	e.do("GET", "/v1/builds?name=again", e.admin, "").want(t, http.StatusOK).decode(t, &bl)
	if len(bl.Builds) != 1 {
		t.Fatalf("builds of again = %+v", bl.Builds)
	}
}

// blindIdempotency is the real store with lookups of idempotency records
// failing to find anything, as when a concurrent twin commits between a
// request's lookup and its insert. It forces the path where the store's
// atomic insert reports the conflict.
type blindIdempotency struct{ store.Store }

func (blindIdempotency) GetIdempotency(context.Context, model.ProjectID, []byte) (store.IdempotencyRecord, error) {
	return store.IdempotencyRecord{}, store.ErrNotFound
}

func TestIdempotencyConflictFromStore(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *envConfig) { c.Store = blindIdempotency{c.Store} })
	first := e.send(req{method: "POST", path: "/v1/sandboxes", key: e.keyA, header: idem("k"), body: `{"cpus": 2}`}).want(t, http.StatusAccepted)
	again := e.send(req{method: "POST", path: "/v1/sandboxes", key: e.keyA, header: idem("k"), body: `{ "cpus" : 2 }`}).want(t, http.StatusAccepted)
	if !bytes.Equal(first.body, again.body) || again.header.Get(headerReplayed) != "true" {
		t.Fatalf("conflict was not replayed:\n%s\n%s", first.body, again.body)
	}
	before := e.dump()
	e.send(req{method: "POST", path: "/v1/sandboxes", key: e.keyA, header: idem("k"), body: `{"cpus": 3}`}).
		wantError(t, http.StatusConflict, apiv1.CodeIdempotencyKeyReused)
	if e.dump() != before {
		t.Fatal("a reused key changed the store")
	}
	if n := e.countSandboxes(e.projA); n != 1 {
		t.Fatalf("%d sandboxes, want 1", n)
	}
	// The same through the other mutations that insert the record atomically.
	var created apiv1.SandboxWithOperation
	first.decode(t, &created)
	e.finishCreate(model.SandboxID(created.Sandbox.ID))
	cmd := "/v1/sandboxes/" + created.Sandbox.ID + "/commands"
	c1 := e.send(req{method: "POST", path: cmd, key: e.keyA, header: idem("c"), body: `{"args": ["true"]}`}).want(t, http.StatusCreated)
	c2 := e.send(req{method: "POST", path: cmd, key: e.keyA, header: idem("c"), body: `{"args": ["true"]}`}).want(t, http.StatusCreated)
	if !bytes.Equal(c1.body, c2.body) {
		t.Fatal("command session conflict was not replayed")
	}
	del := "/v1/sandboxes/" + created.Sandbox.ID
	d1 := e.send(req{method: "DELETE", path: del, key: e.keyA, header: idem("d")}).want(t, http.StatusAccepted)
	d2 := e.send(req{method: "DELETE", path: del, key: e.keyA, header: idem("d")}).want(t, http.StatusAccepted)
	if !bytes.Equal(d1.body, d2.body) {
		t.Fatal("delete conflict was not replayed")
	}
	body := fmt.Sprintf(`{"project_id": %q, "role": "member"}`, e.projA)
	k1 := e.send(req{method: "POST", path: "/v1/admin/keys", key: e.admin, header: idem("key"), body: body}).want(t, http.StatusCreated)
	k2 := e.send(req{method: "POST", path: "/v1/admin/keys", key: e.admin, header: idem("key"), body: body}).want(t, http.StatusCreated)
	if !bytes.Equal(k1.body, k2.body) {
		t.Fatal("API key conflict was not replayed")
	}
	p1 := e.send(req{method: "POST", path: "/v1/admin/projects", key: e.admin, header: idem("p"), body: `{"name": "blind"}`}).want(t, http.StatusCreated)
	p2 := e.send(req{method: "POST", path: "/v1/admin/projects", key: e.admin, header: idem("p"), body: `{"name": "blind"}`})
	// The lookup is blind and the name is taken: the project is not created
	// twice, and the answer is the first one or already_exists.
	if p2.status != http.StatusConflict && !bytes.Equal(p1.body, p2.body) {
		t.Fatalf("second project creation answered %d %s", p2.status, p2.body)
	}
}
