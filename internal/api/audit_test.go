package api

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/noderoute"
	"github.com/airlockdev/airlock/internal/store"
)

// auditAll returns every audit entry, newest first.
func (e *testEnv) auditAll(t testing.TB) []store.AuditEntry {
	t.Helper()
	p, err := e.st.ListAudit(context.Background(), store.AuditQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return p.Entries
}

// auditAtLeast waits (a little: an answer can reach the client just
// before its entry is written) until there are at least n entries, and
// returns them all, newest first.
func (e *testEnv) auditAtLeast(t testing.TB, n int) []store.AuditEntry {
	t.Helper()
	all := e.auditAll(t)
	for deadline := time.Now().Add(5 * time.Second); len(all) < n && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		all = e.auditAll(t)
	}
	return all
}

func mustKeyID(t testing.TB, key string) model.APIKeyID {
	t.Helper()
	id, _, err := auth.ParseAPIKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestAuditEveryMutatingOperation walks the OpenAPI document: every
// operation whose method is not GET or HEAD, called with an admin key
// through the real handlers (bodies minimal, often refused), leaves exactly
// one audit entry naming its route, the key and the status it answered.
// The port proxy's operations are the one exception: a sandbox's own HTTP
// traffic, not a change to Airlock's state (route.audited).
func TestAuditEveryMutatingOperation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cs := e.newSession(e.admin)
	adminKey := mustKeyID(t, e.admin)
	revokable := mustKeyID(t, e.keyB) // revoking the admin's own key would end the walk
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatal(err)
	}
	bodies, queries := everyRouteRequests(e)
	routes := map[string]route{}
	for _, rt := range e.api.routes {
		routes[rt.method+" "+rt.pattern] = rt
	}
	var ops []string
	for path, item := range doc.Paths {
		for method := range item {
			m := strings.ToUpper(method)
			switch m {
			case "GET", "HEAD", "PARAMETERS", "SUMMARY", "DESCRIPTION", "SERVERS":
				continue
			}
			ops = append(ops, m+" "+strings.Replace(path, "{path}", "{path...}", 1)) // the document's spelling of a rest value
		}
	}
	sort.Strings(ops)
	// Deletes last, so that the resources other calls use still exist.
	sort.SliceStable(ops, func(i, j int) bool {
		return !strings.HasPrefix(ops[i], "DELETE ") && strings.HasPrefix(ops[j], "DELETE ")
	})
	n := 0
	for _, op := range ops {
		method, pattern, _ := strings.Cut(op, " ")
		if strings.HasPrefix(pattern, "/data/") {
			// The data plane (internal/dataplane) takes attachment and
			// transfer tokens, not API keys: the audited request that
			// issued the token is the record.
			continue
		}
		rt, ok := routes[op]
		if !ok {
			t.Fatalf("%s is documented but not routed", op)
		}
		if pattern == portsPattern {
			if rt.audited() {
				t.Fatalf("%s: the port proxy is audited", op)
			}
			continue
		}
		if !rt.audited() {
			t.Fatalf("%s is not audited", op)
		}
		path := strings.NewReplacer("{process_id}", cs.ProcessID, "{ref}", "default", "{name_tag}", "x:y", "{name}", "x").Replace(pattern)
		switch {
		case strings.HasPrefix(pattern, "/v1/admin/keys/"):
			path = strings.Replace(path, "{id}", revokable.String(), 1)
		case strings.HasPrefix(pattern, "/v1/admin/projects/"):
			path = strings.Replace(path, "{id}", e.projA.String(), 1)
		case strings.HasPrefix(pattern, "/v1/admin/nodes/"):
			path = strings.Replace(path, "{id}", testNode.String(), 1)
		case strings.HasPrefix(pattern, "/v1/pools/"):
			path = strings.Replace(path, "{id}", model.NewPoolID().String(), 1)
		case strings.HasPrefix(pattern, "/v1/snapshots/"):
			path = strings.Replace(path, "{id}", model.NewSnapshotID().String(), 1)
		default:
			path = strings.Replace(path, "{id}", cs.SandboxID, 1)
		}
		path += queries[op]
		t.Run(op, func(t *testing.T) {
			before := len(e.auditAll(t))
			res := e.send(req{method: method, path: path, key: e.admin, body: bodies[op], t: t})
			all := e.auditAtLeast(t, before+1)
			if len(all) != before+1 {
				t.Fatalf("%d audit entries after the request, want %d", len(all), before+1)
			}
			got := all[0]
			if got.Action != op || got.Method != method || got.Route != pattern || got.KeyID != adminKey ||
				got.Project != e.adminPj || got.Status != res.status || got.RequestID != res.header.Get("X-Request-Id") {
				t.Fatalf("audit entry %+v; the request was %s %s → %d (%s)", got, method, path, res.status, res.header.Get("X-Request-Id"))
			}
			if res.status >= 400 {
				var ae apiv1.Error
				if err := json.Unmarshal(res.body, &ae); err != nil || got.ErrorCode != ae.Code {
					t.Fatalf("error code %q, the answer %s", got.ErrorCode, res.body)
				}
			}
		})
		n++
	}
	if n < 30 {
		t.Fatalf("only %d operations walked", n)
	}
}

// TestAuditEntries: what an entry says of the principal, the resource and
// the result, and which requests are not recorded.
func TestAuditEntries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	keyA := mustKeyID(t, e.keyA)
	n0 := len(e.auditAll(t))
	last := func() store.AuditEntry { n0++; return e.auditAtLeast(t, n0)[0] }
	count := func() int { return len(e.auditAll(t)) }

	// A create records the sandbox it made.
	sb := e.createSandbox(e.keyA, `{}`).Sandbox.ID
	got := last()
	if got.Action != "POST /v1/sandboxes" || got.KeyID != keyA || got.Project != e.projA || got.Status != http.StatusAccepted ||
		got.ResourceKind != "sandbox" || got.ResourceID != "" || got.CreatedID != sb || got.Sandbox.String() != sb || got.ErrorCode != "" {
		t.Fatalf("create: %+v", got)
	}
	// A refusal by the state machine, with its code and resource.
	e.do("POST", "/v1/sandboxes/"+sb+"/wake", e.keyA, "").want(t, http.StatusConflict)
	got = last()
	if got.Action != "POST /v1/sandboxes/{id}/wake" || got.Status != http.StatusConflict || got.ErrorCode == "" ||
		got.ResourceKind != "sandbox" || got.ResourceID != sb || got.PathValues["id"] != sb {
		t.Fatalf("refused wake: %+v", got)
	}
	// A member on an admin route: 403, recorded.
	e.do("POST", "/v1/admin/projects", e.keyA, `{"name": "x"}`).wantError(t, http.StatusForbidden, apiv1.CodePermissionDenied)
	if got = last(); got.Action != "POST /v1/admin/projects" || got.KeyID != keyA || got.ErrorCode != apiv1.CodePermissionDenied || got.ResourceKind != "project" {
		t.Fatalf("refused admin call: %+v", got)
	}
	// Another project's sandbox: 404, recorded under the caller's project.
	sbB := e.createSandbox(e.keyB, `{}`).Sandbox.ID
	n0++ // its entry
	e.do("DELETE", "/v1/sandboxes/"+sbB, e.keyA, "").wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
	if got = last(); got.Project != e.projA || got.ResourceID != sbB || got.Status != http.StatusNotFound {
		t.Fatalf("another project's sandbox: %+v", got)
	}
	// A path value that is no ID is recorded as sent (made storable).
	e.send(req{method: "POST", path: "/v1/sandboxes/" + url.PathEscape("no\xffsuch") + "/pause", key: e.keyA, invalid: true}).want(t, http.StatusBadRequest)
	if got = last(); got.ResourceID != "no\uFFFDsuch" || got.Sandbox != "" {
		t.Fatalf("bad path value: %+v", got)
	}
	// The innermost resource names the kind.
	proc := model.NewProcessID().String()
	e.do("POST", "/v1/sandboxes/"+sb+"/processes/"+proc+"/signal", e.keyA, `{"signal": "KILL"}`)
	if got = last(); got.ResourceKind != "process" || got.ResourceID != proc || got.Sandbox.String() != sb {
		t.Fatalf("process route: %+v", got)
	}
	// A sandbox access token: no key, its sandbox.
	tok := e.sandboxToken(t, model.SandboxID(sb), e.projA)
	e.do("POST", "/v1/sandboxes/"+sb+"/resume", tok, "")
	if got = last(); got.KeyID != "" || got.TokenSandbox.String() != sb || got.Project != e.projA || got.Action != "POST /v1/sandboxes/{id}/resume" {
		t.Fatalf("sandbox token: %+v", got)
	}
	// ... and outside its routes: 403 token_scope, recorded.
	e.do("DELETE", "/v1/sandboxes/"+sb, tok, "").wantError(t, http.StatusForbidden, apiv1.CodeTokenScope)
	if got = last(); got.ErrorCode != apiv1.CodeTokenScope || got.TokenSandbox.String() != sb {
		t.Fatalf("sandbox token out of scope: %+v", got)
	}

	// Not recorded: bad credentials, reads.
	n := count()
	e.do("DELETE", "/v1/sandboxes/"+sb, "alk_nosuchkey", "").want(t, http.StatusUnauthorized)
	e.send(req{method: "DELETE", path: "/v1/sandboxes/" + sb, invalid: true}).want(t, http.StatusUnauthorized)
	e.do("GET", "/v1/sandboxes/"+sb, e.keyA, "").want(t, http.StatusOK)
	if count() != n {
		t.Fatal("an unauthenticated request or a read was recorded")
	}
}

// TestAuditCreatedIDs: every create records the ID it made (a sandbox's
// as its sandbox too), the handler's own or, for a replay of its
// Idempotency-Key, the stored answer's; a key reused for another request
// records its refusal's code and no ID.
func TestAuditCreatedIDs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withPoolClaims())
	n := len(e.auditAll(t))
	last := func() store.AuditEntry { n++; return e.auditAtLeast(t, n)[0] }
	idOf := func(r *resp) string {
		var ans struct {
			ID      string `json:"id"`
			Sandbox struct {
				ID string `json:"id"`
			} `json:"sandbox"`
		}
		if err := json.Unmarshal(r.body, &ans); err != nil {
			t.Fatal(err)
		}
		if ans.Sandbox.ID != "" {
			return ans.Sandbox.ID
		}
		return ans.ID
	}
	var pool apiv1.Pool
	e.do("PUT", "/v1/pools", e.admin, `{"template":"default","size":1,"memory_mib":256}`).want(t, http.StatusOK).decode(t, &pool)
	n++
	slot := e.poolSandbox(model.PoolID(pool.ID), model.Resources{CPUs: 1, MemoryMiB: 256, DiskMiB: model.DefaultDiskMiB})
	for _, tc := range []struct {
		name, method, path, key, body, other string
		status                               int
	}{
		{"pool claim", "POST", "/v1/sandboxes", e.keyA, `{"memory_mib":256}`, `{"memory_mib":512}`, http.StatusCreated},
		{"sandbox", "POST", "/v1/sandboxes", e.keyA, `{}`, `{"memory_mib":512}`, http.StatusAccepted},
		{"project", "POST", "/v1/admin/projects", e.admin, `{"name": "created"}`, `{"name": "other"}`, http.StatusCreated},
		{"key", "POST", "/v1/admin/keys", e.admin, fmt.Sprintf(`{"project_id": %q, "role": "member", "name": "k"}`, e.projA),
			fmt.Sprintf(`{"project_id": %q, "role": "member", "name": "l"}`, e.projA), http.StatusCreated},
		{"build", "POST", "/v1/templates", e.admin, fmt.Sprintf(`{"source": %q}`, e.tplDir), fmt.Sprintf(`{"source": %q, "name": "x"}`, e.tplDir), http.StatusAccepted},
		{"pool", "PUT", "/v1/pools", e.admin, `{"template":"default","size":2,"memory_mib":256}`, `{"template":"default","size":3,"memory_mib":256}`, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			send := func(body string) *resp {
				return e.send(req{method: tc.method, path: tc.path, key: tc.key, body: body, t: t,
					header: http.Header{"Idempotency-Key": {"created-" + strings.ReplaceAll(tc.name, " ", "-")}}})
			}
			id := ""
			for i := range 2 { // the create, then its replay
				r := send(tc.body).want(t, tc.status)
				if r.header.Get(headerReplayed) != "" != (i == 1) {
					t.Fatalf("answer %d: replayed %q", i, r.header.Get(headerReplayed))
				}
				if i == 0 {
					if id = idOf(r); id == "" {
						t.Fatalf("no ID in %s", r.body)
					}
					if tc.name == "pool claim" && id != slot.String() {
						t.Fatalf("claimed %s, want the pool's %s", id, slot)
					}
				}
				got := last()
				if got.RequestID != r.header.Get("X-Request-Id") || got.CreatedID != id || got.ErrorCode != "" || got.Status != tc.status {
					t.Fatalf("entry %+v, want created %s (replayed %q)", got, id, r.header.Get(headerReplayed))
				}
				if sb, _ := model.ParseSandboxID(id); got.Sandbox != sb {
					t.Fatalf("entry %+v: sandbox %q, want %q", got, got.Sandbox, sb)
				}
			}
			send(tc.other).wantError(t, http.StatusConflict, apiv1.CodeIdempotencyKeyReused)
			if got := last(); got.CreatedID != "" || got.ErrorCode != apiv1.CodeIdempotencyKeyReused || got.Sandbox != "" {
				t.Fatalf("reused key: %+v", got)
			}
		})
	}
}

// TestAuditPanic: a handler that panics is recorded with the 500 that
// follows and code internal, or with what it answered before.
func TestAuditPanic(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mux := http.NewServeMux()
	for _, rt := range []route{
		{"POST", "/v1/sandboxes/{id}/pause", member, func(http.ResponseWriter, *http.Request, principal) { panic("boom") }},
		{"POST", "/v1/sandboxes/{id}/suspend", member, func(w http.ResponseWriter, r *http.Request, _ principal) {
			e.api.writeError(w, r, errorf(apiv1.CodeSandboxBusy, "busy"))
			panic("boom after the answer")
		}},
	} {
		mux.Handle(rt.method+" "+rt.pattern, e.api.guard(rt))
	}
	srv := httptest.NewServer(e.api.Wrap(mux))
	t.Cleanup(srv.Close)
	sb := model.NewSandboxID().String()
	for _, tc := range []struct {
		kind   string
		status int
		code   string
	}{{"pause", http.StatusInternalServerError, apiv1.CodeInternal}, {"suspend", http.StatusConflict, apiv1.CodeSandboxBusy}} {
		hr, err := http.NewRequest("POST", srv.URL+"/v1/sandboxes/"+sb+"/"+tc.kind, nil)
		if err != nil {
			t.Fatal(err)
		}
		hr.Header.Set("Authorization", "Bearer "+e.keyA)
		if res, err := srv.Client().Do(hr); err == nil {
			res.Body.Close()
		}
		got := e.auditAll(t)[0]
		if got.Action != "POST /v1/sandboxes/{id}/"+tc.kind || got.Status != tc.status || got.ErrorCode != tc.code || got.ResourceID != sb {
			t.Fatalf("%s: entry %+v, want %d %s", tc.kind, got, tc.status, tc.code)
		}
	}
}

// TestAuditStoreFailure: the mutation stands when its entry cannot be
// written; the failure is counted.
func TestAuditStoreFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.st.DB().Exec(`DROP TABLE audit`); err != nil {
		t.Fatal(err)
	}
	e.createSandbox(e.keyA, `{}`)
	if got := e.api.AuditFailures(); got != 1 {
		t.Fatalf("AuditFailures = %d, want 1", got)
	}
}

// TestAuditRecordedOnceWhenForwarded: a request replica A forwards to the
// hosting replica B is recorded once, by A, with B's answer.
func TestAuditRecordedOnceWhenForwarded(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	before := len(c.auditAll(t))
	res, b := c.call(c.a, "POST", "/v1/sandboxes/"+c.sandbox+"/files/mkdir", c.keyA, `{"path": "/audited"}`, nil)
	if res.StatusCode >= 300 {
		t.Fatalf("mkdir via A: %d %s", res.StatusCode, b)
	}
	// The relayed answer is streamed: the client may have it before A,
	// whose handler returns after the copy, has written the entry.
	all := c.auditAll(t)
	for deadline := time.Now().Add(10 * time.Second); len(all) == before && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		all = c.auditAll(t)
	}
	time.Sleep(100 * time.Millisecond) // a second entry (B's) would be written by now
	if all = c.auditAll(t); len(all) != before+1 {
		t.Fatalf("%d entries for one forwarded request", len(all)-before)
	}
	if got := all[0]; got.Action != "POST /v1/sandboxes/{id}/files/mkdir" || got.Status != res.StatusCode || got.RequestID != res.Header.Get("X-Request-Id") ||
		got.ErrorCode != "" || got.CreatedID != "" {
		t.Fatalf("entry %+v for %d %s", got, res.StatusCode, res.Header.Get("X-Request-Id"))
	}
}

// TestAuditForwardedAnswers: the entry of a forwarded request has the
// code of the error the hosting node answered with (which it sends in a
// header the client never sees), or of the forwarding replica's own.
func TestAuditForwardedAnswers(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	gone := c.createSandbox(c.keyA, `{}`).Sandbox.ID
	c.place(gone, model.NewNodeID()) // a node nobody registered
	for _, tc := range []struct {
		name, sandbox, body string
		status              int
		code                string
	}{
		{"ok", c.sandbox, `{"path": "/fine"}`, http.StatusOK, ""},
		{"refused by the node", c.sandbox, `{"path": "relative"}`, http.StatusBadRequest, apiv1.CodeInvalidPath},
		{"bad body", c.sandbox, `{"path": 1}`, http.StatusBadRequest, apiv1.CodeInvalidRequest},
		{"node unreachable", gone, `{"path": "/x"}`, http.StatusServiceUnavailable, apiv1.CodeNodeUnreachable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(c.auditAll(t))
			res, b := c.call(c.a, "POST", "/v1/sandboxes/"+tc.sandbox+"/files/mkdir", c.keyA, tc.body, nil)
			if res.StatusCode != tc.status {
				t.Fatalf("%d %s, want %d", res.StatusCode, b, tc.status)
			}
			for _, h := range []string{noderoute.HeaderErrorCode, noderoute.HeaderCreatedID} {
				if v, ok := res.Header[h]; ok {
					t.Fatalf("the client got %s: %q", h, v)
				}
			}
			all := c.auditAtLeast(t, before+1)
			if got := all[0]; got.RequestID != res.Header.Get("X-Request-Id") || got.Status != tc.status || got.ErrorCode != tc.code {
				t.Fatalf("entry %+v, want %d %q", got, tc.status, tc.code)
			}
		})
	}
	// The node itself, asked by a replica, says the code in the header.
	path := "/v1/sandboxes/" + c.sandbox + "/files/mkdir"
	tok := forwardToken(t, c.a.ring, auth.ForwardClaims{From: c.a.id, To: c.b.id, Request: "POST " + path, Base: c.a.srv.URL})
	res, b := c.call(c.b, "POST", path, c.keyA, `{"path": "relative"}`, http.Header{noderoute.HeaderForwardedBy: {string(c.a.id)}, noderoute.HeaderForwardToken: {tok}})
	wantCode(t, res, b, http.StatusBadRequest, apiv1.CodeInvalidPath)
	if got := res.Header.Get(noderoute.HeaderErrorCode); got != apiv1.CodeInvalidPath {
		t.Fatalf("%s: %q, want %s", noderoute.HeaderErrorCode, got, apiv1.CodeInvalidPath)
	}
	// ... and to anyone else nothing.
	res, b = c.call(c.b, "POST", path, c.keyA, `{"path": "relative"}`, nil)
	wantCode(t, res, b, http.StatusBadRequest, apiv1.CodeInvalidPath)
	if got, ok := res.Header[noderoute.HeaderErrorCode]; ok {
		t.Fatalf("a client got %s: %q", noderoute.HeaderErrorCode, got)
	}
}

// TestForwardedAnswerHeaders: the answer to a request that says it was
// forwarded carries the error code and the created ID its handler noted;
// any other answer carries neither.
func TestForwardedAnswerHeaders(t *testing.T) {
	t.Parallel()
	a := &API{log: slog.New(slog.DiscardHandler)}
	h := a.withRequestContext(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		noteAnswer(r.Context(), "", "prj_created")
		noteAnswer(r.Context(), "some_code", "")
		w.WriteHeader(http.StatusTeapot)
	}))
	for _, forwarded := range []bool{false, true} {
		r := httptest.NewRequest("POST", "/x", nil)
		if forwarded {
			r.Header.Set(noderoute.HeaderForwardedBy, "node_x")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		code, created := w.Header().Get(noderoute.HeaderErrorCode), w.Header().Get(noderoute.HeaderCreatedID)
		if forwarded && (code != "some_code" || created != "prj_created") || !forwarded && (code != "" || created != "") {
			t.Fatalf("forwarded %v: %q, %q", forwarded, code, created)
		}
	}
}

// TestListAudit: GET /v1/audit is for admins, pages with its cursor,
// filters, and refuses bad filters with 400.
func TestListAudit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b0 := len(e.auditAll(t)) // the harness's own set-up
	sbA := e.createSandbox(e.keyA, `{}`).Sandbox.ID
	e.createSandbox(e.keyB, `{}`)
	e.do("POST", "/v1/sandboxes/"+sbA+"/wake", e.keyA, "").want(t, http.StatusConflict)
	e.do("PUT", "/v1/admin/projects/"+e.projA.String()+"/quota", e.admin, `{"sandboxes": 5}`).want(t, http.StatusOK)

	list := func(query string) apiv1.AuditList {
		t.Helper()
		var out apiv1.AuditList
		e.do("GET", "/v1/audit"+query, e.admin, "").want(t, http.StatusOK).decode(t, &out)
		return out
	}
	e.do("GET", "/v1/audit", e.keyA, "").wantError(t, http.StatusForbidden, apiv1.CodePermissionDenied)
	e.send(req{method: "GET", path: "/v1/audit", invalid: true}).want(t, http.StatusUnauthorized)

	all := list("")
	if len(all.Entries) != b0+4 || all.NextCursor != "" {
		t.Fatalf("all: %+v", all)
	}
	if all.Entries[0].Action != "PUT /v1/admin/projects/{id}/quota" || all.Entries[3].Action != "POST /v1/sandboxes" || all.Entries[3].CreatedID != sbA {
		t.Fatalf("not newest first: %+v", all.Entries)
	}
	// Paging: one at a time, newest first, to the end.
	var paged []int64
	q := "?limit=1"
	for range b0 + 10 {
		p := list(q)
		for _, en := range p.Entries {
			paged = append(paged, en.ID)
		}
		if p.NextCursor == "" {
			break
		}
		q = "?limit=1&cursor=" + p.NextCursor
	}
	if len(paged) != b0+4 || paged[0] != all.Entries[0].ID || paged[b0+3] != all.Entries[b0+3].ID {
		t.Fatalf("paged %v", paged)
	}
	ids := func(l apiv1.AuditList) (out []string) {
		for _, en := range l.Entries {
			out = append(out, en.Action)
		}
		return out
	}
	since := url.QueryEscape(all.Entries[1].Time.Format("2006-01-02T15:04:05.999999999Z07:00"))
	for _, tc := range []struct {
		query string
		want  int
	}{
		{"?project=" + e.projA.String(), 2},
		{"?key=" + mustKeyID(t, e.keyB).String(), 1},
		{"?action=" + url.QueryEscape("POST /v1/sandboxes"), 3},
		{"?action=" + url.QueryEscape("POST /v1/sandboxes/{id}/wake"), 1},
		{"?action=PUT", 1},
		{"?resource=" + sbA, 2},
		{"?sandbox=" + sbA, 2},
		{"?result=error", 1},
		{"?result=ok", b0 + 3},
		{"?result=409", 1},
		{"?since=" + since, 2},
		{"?until=" + since, b0 + 2},
		{"?project=" + e.projA.String() + "&result=ok&action=POST", 1},
	} {
		if got := list(tc.query); len(got.Entries) != tc.want {
			t.Errorf("%s: %v, want %d entries", tc.query, ids(got), tc.want)
		}
	}
	before := e.dump()
	n := len(e.auditAll(t))
	for _, bad := range []string{
		"?limit=0", "?limit=501", "?limit=x", "?cursor=nope", "?cursor=AQAAAAAAAAAA", "?project=nope", "?key=nope",
		"?sandbox=nope", "?result=maybe", "?result=600", "?result=0200", "?since=yesterday", "?until=2026-01-01",
		"?since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z", "?action=", "?resource=", "?colour=red", "?limit=1&limit=2",
	} {
		res := e.send(req{method: "GET", path: "/v1/audit" + bad, key: e.admin, invalid: auditInvalidByDocument(bad)})
		res.wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	}
	if e.dump() != before || len(e.auditAll(t)) != n {
		t.Fatal("a refused listing changed the store")
	}
}

// auditInvalidByDocument says which bad queries the OpenAPI document
// itself refuses (the others are refused by the server only).
func auditInvalidByDocument(q string) bool {
	switch q {
	case "?cursor=nope", "?cursor=AQAAAAAAAAAA", "?since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z", "?limit=1&limit=2", "?colour=red":
		return false
	}
	return true
}

// TestAuditSkipsRateLimited: a request the rate limit refuses leaves no
// entry (the limit bounds a key's writes; a row per refusal would undo it).
func TestAuditSkipsRateLimited(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *envConfig) { c.MutationRate, c.MutationBurst = 0.001, 5 }) // the setup's admin key makes 4
	for range 5 {
		e.do("POST", "/v1/sandboxes/"+model.NewSandboxID().String()+"/pause", e.keyA, "").want(t, http.StatusNotFound)
	}
	n := len(e.auditAll(t))
	for range 3 {
		e.do("POST", "/v1/sandboxes/"+model.NewSandboxID().String()+"/pause", e.keyA, "").wantError(t, http.StatusTooManyRequests, apiv1.CodeRateLimited)
	}
	if got := len(e.auditAll(t)); got != n {
		t.Fatalf("%d entries for rate-limited requests", got-n)
	}
	if last := e.auditAll(t)[0]; last.Status != http.StatusNotFound || last.KeyID != mustKeyID(t, e.keyA) {
		t.Fatalf("the last entry is %+v, want the 404 before the limit", last)
	}
}
