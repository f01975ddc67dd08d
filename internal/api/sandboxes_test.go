package api

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

func TestCreateGetDeleteSandbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out := e.createSandbox(e.keyA, `{}`)
	sb, op := out.Sandbox, out.Operation
	if sb.Template != e.digest.String() || sb.CPUs != 1 || sb.MemoryMiB != 512 || sb.State != "pending" {
		t.Fatalf("defaults not applied: %+v", sb)
	}
	if op.Kind != "create" || op.State != "pending" || op.SandboxID != sb.ID {
		t.Fatalf("create operation: %+v", op)
	}

	var got apiv1.Sandbox
	e.do("GET", "/v1/sandboxes/"+sb.ID, e.keyA, "").want(t, http.StatusOK).decode(t, &got)
	if got.Egress == nil || sb.Egress == nil || fmt.Sprint(*got.Egress) != fmt.Sprint(*sb.Egress) {
		t.Fatalf("egress: GET %+v, create %+v", got.Egress, sb.Egress)
	}
	got.Egress, sb.Egress = nil, nil
	if fmt.Sprint(got) != fmt.Sprint(sb) {
		t.Fatalf("GET differs from the create response:\n got %+v\nwant %+v", got, sb)
	}
	var gotOp apiv1.Operation
	e.do("GET", "/v1/operations/"+op.ID, e.keyA, "").want(t, http.StatusOK).decode(t, &gotOp)
	if fmt.Sprint(gotOp) != fmt.Sprint(op) {
		t.Fatalf("operation differs:\n got %+v\nwant %+v", gotOp, op)
	}

	full := e.createSandbox(e.keyA, fmt.Sprintf(`{"template": %q, "cpus": 2, "memory_mib": 1024,
		"env": {"FOO": "bar", "_X1": ""}, "metadata": {"team": "ml", "app.kubernetes.io/name": "x"}}`, e.digest))
	if full.Sandbox.CPUs != 2 || full.Sandbox.MemoryMiB != 1024 || full.Sandbox.Env["FOO"] != "bar" ||
		full.Sandbox.Metadata["team"] != "ml" || full.Sandbox.Template != e.digest.String() {
		t.Fatalf("explicit values not kept: %+v", full.Sandbox)
	}

	// Delete: 202 with the delete operation; the create operation is cancelled.
	var del apiv1.OperationResponse
	e.do("DELETE", "/v1/sandboxes/"+sb.ID, e.keyA, "").want(t, http.StatusAccepted).decode(t, &del)
	if del.Operation.Kind != "delete" || del.Operation.State != "pending" || del.Operation.SandboxID != sb.ID {
		t.Fatalf("delete operation: %+v", del.Operation)
	}
	e.do("GET", "/v1/sandboxes/"+sb.ID, e.keyA, "").want(t, http.StatusOK).decode(t, &got)
	if got.State != "deleting" {
		t.Fatalf("state after delete = %s, want deleting", got.State)
	}
	e.do("GET", "/v1/operations/"+op.ID, e.keyA, "").want(t, http.StatusOK).decode(t, &gotOp)
	if gotOp.State != "failed" || gotOp.Error == nil || gotOp.Error.Code != "cancelled" {
		t.Fatalf("the pending create was not cancelled: %+v", gotOp)
	}
	// The state machine refuses a second delete, and changes nothing.
	before := e.dump()
	e.do("DELETE", "/v1/sandboxes/"+sb.ID, e.keyA, "").wantError(t, http.StatusConflict, apiv1.CodeInvalidTransition)
	if after := e.dump(); after != before {
		t.Fatalf("a refused delete changed the store")
	}
}

func TestProjectIsolation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.createSandbox(e.keyB, `{"metadata": {"owner": "b"}}`)
	e.finishCreate(model.SandboxID(b.Sandbox.ID))
	a := e.createSandbox(e.keyA, `{"metadata": {"owner": "a"}}`)

	for _, c := range []struct {
		key    string
		other  apiv1.SandboxWithOperation
		mine   apiv1.SandboxWithOperation
		myName string
	}{{e.keyA, b, a, "A"}, {e.keyB, a, b, "B"}} {
		t.Run(c.myName, func(t *testing.T) {
			before := e.dump()
			id := c.other.Sandbox.ID
			e.do("GET", "/v1/sandboxes/"+id, c.key, "").wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
			e.do("GET", "/v1/operations/"+c.other.Operation.ID, c.key, "").wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
			e.do("GET", "/v1/operations/"+c.other.Operation.ID+"?wait=1s", c.key, "").wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
			e.do("DELETE", "/v1/sandboxes/"+id, c.key, "").wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
			e.do("POST", "/v1/sandboxes/"+id+"/commands", c.key, `{"args": ["true"]}`).wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
			if e.dump() != before {
				t.Fatal("another project's requests changed the store")
			}
			var list apiv1.SandboxList
			e.do("GET", "/v1/sandboxes?state=pending&state=running", c.key, "").want(t, http.StatusOK).decode(t, &list)
			if len(list.Sandboxes) != 1 || list.Sandboxes[0].ID != c.mine.Sandbox.ID {
				t.Fatalf("list = %+v, want only %s", list.Sandboxes, c.mine.Sandbox.ID)
			}
			e.do("GET", "/v1/sandboxes?metadata=owner%3D"+map[string]string{"A": "b", "B": "a"}[c.myName], c.key, "").
				want(t, http.StatusOK).decode(t, &list)
			if len(list.Sandboxes) != 0 {
				t.Fatalf("metadata filter shows another project's sandbox: %+v", list.Sandboxes)
			}
		})
	}
	// The admin key lives in its own project and sees neither.
	var list apiv1.SandboxList
	e.do("GET", "/v1/sandboxes", e.admin, "").want(t, http.StatusOK).decode(t, &list)
	if len(list.Sandboxes) != 0 {
		t.Fatalf("admin project lists tenant sandboxes: %+v", list.Sandboxes)
	}
}

func TestListPaginationAndFilters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var all []string
	for i := range 7 {
		team := []string{"red", "blue"}[i%2]
		out := e.createSandbox(e.keyA, fmt.Sprintf(`{"metadata": {"team": %q, "n": "%d"}}`, team, i))
		all = append(all, out.Sandbox.ID)
	}
	e.finishCreate(model.SandboxID(all[0]))
	e.finishCreate(model.SandboxID(all[1]))
	e.do("DELETE", "/v1/sandboxes/"+all[6], e.keyA, "").want(t, http.StatusAccepted)

	// Page through everything not deleted, 3 at a time.
	var got []string
	cursor := ""
	pages := 0
	for {
		q := url.Values{"limit": {"3"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page apiv1.SandboxList
		e.do("GET", "/v1/sandboxes?"+q.Encode(), e.keyA, "").want(t, http.StatusOK).decode(t, &page)
		pages++
		for _, sb := range page.Sandboxes {
			got = append(got, sb.ID)
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
		if pages > 10 {
			t.Fatal("pagination does not end")
		}
	}
	// all[6] is deleting, not deleted, so it is listed.
	if strings.Join(got, ",") != strings.Join(all, ",") || pages != 3 {
		t.Fatalf("paged %d times through %v, want 3 pages of %v", pages, got, all)
	}

	cases := []struct {
		query string
		want  []string
	}{
		{"state=running", all[:2]},
		{"state=running&state=deleting", []string{all[0], all[1], all[6]}},
		{"state=pending", all[2:6]},
		{"state=deleted", nil},
		{"metadata=team%3Dred", []string{all[0], all[2], all[4], all[6]}},
		{"metadata=team%3Dred&metadata=n%3D2", []string{all[2]}},
		{"metadata=team%3Dred&state=running", []string{all[0]}},
		{"metadata=team%3Dgreen", nil},
		{"limit=1000", all},
	}
	for _, c := range cases {
		t.Run(c.query, func(t *testing.T) {
			var page apiv1.SandboxList
			e.do("GET", "/v1/sandboxes?"+c.query, e.keyA, "").want(t, http.StatusOK).decode(t, &page)
			var ids []string
			for _, sb := range page.Sandboxes {
				ids = append(ids, sb.ID)
			}
			if strings.Join(ids, ",") != strings.Join(c.want, ",") {
				t.Fatalf("got %v, want %v", ids, c.want)
			}
		})
	}

	// A tampered cursor is refused.
	var page apiv1.SandboxList
	e.do("GET", "/v1/sandboxes?limit=2", e.keyA, "").want(t, http.StatusOK).decode(t, &page)
	// Flip bits of the version byte, keeping to the base64url alphabet (the
	// first character carries the version's top bits: 'A' for version 1).
	c := []byte(page.NextCursor)
	if c[0] == 'B' {
		c[0] = 'C'
	} else {
		c[0] = 'B'
	}
	e.do("GET", "/v1/sandboxes?cursor="+string(c), e.keyA, "").wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
}

// A create asking for more than one sandbox can have on this node is
// refused with a clear code, and nothing is written.
func TestCreateAboveNodeCapacity(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *envConfig) { c.svc.Capacity = &model.NodeCapacity{CPUs: 2, MemoryMiB: 4096} })
	before := e.dump()
	for _, body := range []string{`{"cpus": 3}`, `{"memory_mib": 4097}`, `{"cpus": 64, "memory_mib": 262144}`} {
		e.do("POST", "/v1/sandboxes", e.keyA, body).wantError(t, http.StatusBadRequest, apiv1.CodeExceedsCapacity)
	}
	if after := e.dump(); after != before {
		t.Fatalf("a refused create changed the store:\n%s\n%s", before, after)
	}
	e.do("POST", "/v1/sandboxes", e.keyA, `{"cpus": 2, "memory_mib": 4096}`).want(t, http.StatusAccepted)
}

// Each API key's mutations are rate limited (token bucket): beyond the
// burst a mutation gets 429 rate_limited with Retry-After and changes
// nothing; reads are not limited, and another key has its own bucket.
func TestMutationRateLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *envConfig) { c.MutationRate, c.MutationBurst = 0.001, 5 }) // the setup's admin key makes 4
	for range 5 {
		e.do("POST", "/v1/sandboxes", e.keyA, `{}`).want(t, http.StatusAccepted)
	}
	before := e.dump()
	r := e.do("POST", "/v1/sandboxes", e.keyA, `{}`)
	r.wantError(t, http.StatusTooManyRequests, apiv1.CodeRateLimited)
	if r.header.Get("Retry-After") == "" {
		t.Fatal("no Retry-After")
	}
	if after := e.dump(); after != before {
		t.Fatal("a rate-limited create changed the store")
	}
	e.do("GET", "/v1/sandboxes", e.keyA, "").want(t, http.StatusOK)
	e.do("POST", "/v1/sandboxes", e.keyB, `{}`).want(t, http.StatusAccepted)
}
