package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// fakeAudit serves GET /v1/audit from entries, two per page, and records
// the queries it was sent.
type fakeAudit struct {
	mu      sync.Mutex
	entries []apiv1.AuditEntry
	queries []url.Values
}

func newFakeAudit(t *testing.T, f *fakeServer, entries ...apiv1.AuditEntry) *fakeAudit {
	fa := &fakeAudit{entries: entries}
	prev := f.srv.Config.Handler
	f.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/audit" {
			prev.ServeHTTP(w, r)
			return
		}
		fa.mu.Lock()
		defer fa.mu.Unlock()
		q := r.URL.Query()
		fa.queries = append(fa.queries, q)
		start := 0
		if c := q.Get("cursor"); c != "" {
			start = int(c[0] - '0')
		}
		end := min(start+2, len(fa.entries))
		out := apiv1.AuditList{Entries: fa.entries[start:end]}
		if end < len(fa.entries) {
			out.NextCursor = string(rune('0' + end))
		}
		writeJSON(w, 200, out)
	})
	return fa
}

func TestAdminAudit(t *testing.T) {
	f := newFakeServer(t)
	key, prj, sb := model.NewAPIKeyID().String(), model.NewProjectID().String(), model.NewSandboxID().String()
	entries := []apiv1.AuditEntry{
		{ID: 3, Time: fixedTime, KeyID: key, ProjectID: prj, Action: "POST /v1/sandboxes/{id}/pause", ResourceKind: "sandbox", ResourceID: sb, Status: 409, ErrorCode: "invalid_transition"},
		{ID: 2, Time: fixedTime, TokenSandboxID: sb, ProjectID: prj, Action: "POST /v1/sandboxes/{id}/commands", ResourceKind: "sandbox", ResourceID: sb, Status: 201},
		{ID: 1, Time: fixedTime, KeyID: key, ProjectID: prj, Action: "POST /v1/sandboxes", ResourceKind: "sandbox", CreatedID: sb, Status: 202},
	}
	fa := newFakeAudit(t, f, entries...)
	ctx := context.Background()

	code, stdout, stderr := runCLI(ctx, f, "admin", "audit", "--project", prj, "--key", key, "--action", "POST /v1/sandboxes",
		"--resource", sb, "--sandbox", sb, "--result", "error", "--since", "2026-11-30T00:00:00Z", "--until", "2026-12-01T00:00:00Z", "--limit", "2")
	out := squash(stdout)
	if code != 0 || !strings.Contains(out, "TIME WHO PROJECT ACTION RESOURCE RESULT\n") ||
		!strings.Contains(out, "2026-11-30T12:00:00Z "+key+" "+prj+" POST /v1/sandboxes/{id}/pause sandbox "+sb+" 409 invalid_transition\n") ||
		!strings.Contains(out, "token:"+sb+" "+prj+" POST /v1/sandboxes/{id}/commands sandbox "+sb+" 201\n") ||
		strings.Contains(out, "POST /v1/sandboxes sandbox") || !strings.Contains(stderr, "more entries: add --cursor 2, or --all") {
		t.Fatalf("first page: %d\n%s\n%s", code, stdout, stderr)
	}
	want := url.Values{"project": {prj}, "key": {key}, "action": {"POST /v1/sandboxes"}, "resource": {sb}, "sandbox": {sb},
		"result": {"error"}, "since": {"2026-11-30T00:00:00Z"}, "until": {"2026-12-01T00:00:00Z"}, "limit": {"2"}}
	if got := fa.queries[0]; got.Encode() != want.Encode() {
		t.Fatalf("query %s, want %s", got.Encode(), want.Encode())
	}

	code, stdout, _ = runCLI(ctx, f, "-o", "json", "admin", "audit", "--all")
	var l apiv1.AuditList
	if code != 0 || json.Unmarshal([]byte(stdout), &l) != nil || len(l.Entries) != 3 || l.Entries[2].CreatedID != sb || l.NextCursor != "" {
		t.Fatalf("--all json: %d %s", code, stdout)
	}
	if got := fa.queries[len(fa.queries)-1].Get("cursor"); got != "2" {
		t.Fatalf("--all did not follow the cursor: %v", fa.queries)
	}

	for _, tc := range []struct {
		args     []string
		inStderr string
	}{
		{[]string{"--project", "nope"}, "--project"},
		{[]string{"--key", "prj_x"}, "--key"},
		{[]string{"--sandbox", "x"}, "--sandbox"},
		{[]string{"--result", "maybe"}, "--result must be ok, error or an HTTP status"},
		{[]string{"--since", "yesterday"}, "--since must be an RFC 3339 time"},
		{[]string{"--limit", "501"}, "--limit must be from 1 to 500"},
	} {
		n := len(fa.queries)
		code, _, stderr := runCLI(ctx, f, append([]string{"admin", "audit"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.inStderr) || len(fa.queries) != n {
			t.Errorf("%q: exit %d, %q", tc.args, code, stderr)
		}
	}
}

func TestParseAuditTime(t *testing.T) {
	now := fixedTime
	if got, err := parseAuditTime("--since", "24h", now); err != nil || !got.Equal(now.Add(-24*60*60*1e9)) {
		t.Fatalf("24h: %v %v", got, err)
	}
	if got, err := parseAuditTime("--since", "", now); err != nil || !got.IsZero() {
		t.Fatalf("empty: %v %v", got, err)
	}
	for _, bad := range []string{"-1h", "0s", "2026-13-01T00:00:00Z", "now"} {
		if _, err := parseAuditTime("--since", bad, now); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestServerAuditRetentionFlag(t *testing.T) {
	code, _, stderr := runCLI(context.Background(), nil, "server", "--audit-retention", "30m")
	if code != exitUsage || !strings.Contains(stderr, "--audit-retention must be at least 1h") {
		t.Fatalf("exit %d, %q", code, stderr)
	}
}
