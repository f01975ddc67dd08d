package cli

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

func TestOpList(t *testing.T) {
	sb := model.NewSandboxID().String()
	ops := []apiv1.Operation{
		{ID: model.NewOperationID().String(), Kind: "delete", State: "failed", SandboxID: sb, Attempts: 2, CreatedAt: fixedTime, UpdatedAt: fixedTime,
			Error: &apiv1.Error{Code: "runtime_error", Message: "the runtime said no"}},
		{ID: model.NewOperationID().String(), Kind: "create", State: "succeeded", SandboxID: sb, Attempts: 1, CreatedAt: fixedTime, UpdatedAt: fixedTime},
	}
	var (
		mu      sync.Mutex
		queries []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/operations" || r.Header.Get("Authorization") != "Bearer key_test" {
			writeJSON(w, 404, apiv1.Error{Code: apiv1.CodeNotFound, Message: "no route"})
			return
		}
		mu.Lock()
		queries = append(queries, r.URL.RawQuery)
		mu.Unlock()
		// Two pages of one: the cursor names the second.
		if r.URL.Query().Get("cursor") == "" {
			writeJSON(w, 200, apiv1.OperationList{Operations: ops[:1], NextCursor: "page2"})
			return
		}
		writeJSON(w, 200, apiv1.OperationList{Operations: ops[1:]})
	}))
	defer srv.Close()
	f := &fakeServer{t: t, srv: srv}
	ctx := context.Background()
	project := model.NewProjectID().String()

	code, stdout, stderr := runCLI(ctx, f, "op", "list", "--sandbox", sb, "--state", "failed,succeeded", "--kind", "delete", "--kind", "create", "--project", project, "--limit", "1")
	if code != 0 || !strings.Contains(stdout, ops[0].ID) || strings.Contains(stdout, ops[1].ID) ||
		!strings.Contains(squash(stdout), "the runtime said no (runtime_error)") || !strings.Contains(stderr, "--cursor page2") {
		t.Errorf("op list: %d\n%s\n%s", code, stdout, stderr)
	}
	want := "kind=delete&kind=create&limit=1&project=" + project + "&sandbox=" + sb + "&state=failed&state=succeeded"
	if len(queries) != 1 || queries[0] != want {
		t.Errorf("queries = %q, want [%q]", queries, want)
	}

	queries = nil
	code, stdout, _ = runCLI(ctx, f, "op", "list", "--all", "-o", "json")
	if code != 0 || !strings.Contains(stdout, ops[0].ID) || !strings.Contains(stdout, ops[1].ID) || len(queries) != 2 || queries[1] != "cursor=page2" {
		t.Errorf("op list --all: %d %s (queries %q)", code, stdout, queries)
	}

	for _, args := range [][]string{
		{"op", "list", "--state", "done"},
		{"op", "list", "--kind", "explode"},
		{"op", "list", "--sandbox", "nope"},
		{"op", "list", "--project", "nope"},
		{"op", "list", "--limit", "-1"},
		{"op", "list", "extra"},
	} {
		queries = nil
		if code, _, stderr := runCLI(ctx, f, args...); code != 2 || len(queries) != 0 {
			t.Errorf("%v: exit %d (want 2, a usage error), %d requests; %s", args, code, len(queries), stderr)
		}
	}
}
