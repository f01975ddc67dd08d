package api

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/sandboxes"
	"github.com/airlockdev/airlock/internal/store"
)

func (e *testEnv) quota(project model.ProjectID) apiv1.ProjectQuota {
	e.t.Helper()
	var q apiv1.ProjectQuota
	e.do("GET", "/v1/admin/projects/"+project.String()+"/quota", e.admin, "").want(e.t, http.StatusOK).decode(e.t, &q)
	return q
}

func (e *testEnv) setQuota(project model.ProjectID, body string) apiv1.ProjectQuota {
	e.t.Helper()
	var q apiv1.ProjectQuota
	e.do("PUT", "/v1/admin/projects/"+project.String()+"/quota", e.admin, body).want(e.t, http.StatusOK).decode(e.t, &q)
	return q
}

func (e *testEnv) countRows(table string, project model.ProjectID) int {
	e.t.Helper()
	var n int
	if err := e.st.DB().QueryRow(`SELECT count(*) FROM `+table+` WHERE project_id = ?`, string(project)).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// finishDelete drives a sandbox's pending delete to completion through the
// store, as the reconciler would.
func (e *testEnv) finishDelete(id model.SandboxID) {
	e.t.Helper()
	ctx := context.Background()
	now := time.Now()
	for {
		op, err := e.st.ClaimOperation(ctx, store.Claim{Owner: testNode, Incarnation: testIncarnation, Lease: time.Minute, Now: now})
		if err != nil {
			e.t.Fatalf("claim: %v", err)
		}
		f := store.Finish{OperationID: op.ID, Owner: testNode, Incarnation: testIncarnation, State: model.OpSucceeded, Now: now}
		if op.SandboxID == id && op.Kind == model.OpDelete {
			f.SandboxFrom, f.SandboxTo = model.StateDeleting, model.StateDeleted
		}
		if err := e.st.FinishOperation(ctx, f); err != nil {
			e.t.Fatalf("finish: %v", err)
		}
		if f.SandboxTo != "" {
			return
		}
	}
}

func TestDiskMiB(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *envConfig) {
		c.svc.DefaultDiskMiB = 2048
		c.svc.Capacity = &model.NodeCapacity{DiskMiB: 8192}
	})
	if sb := e.createSandbox(e.keyA, `{}`).Sandbox; sb.DiskMiB != 2048 {
		t.Fatalf("default disk_mib %d, want the server's 2048", sb.DiskMiB)
	}
	sb := e.createSandbox(e.keyA, `{"disk_mib": 8192}`).Sandbox
	var got apiv1.Sandbox
	e.do("GET", "/v1/sandboxes/"+sb.ID, e.keyA, "").want(t, http.StatusOK).decode(t, &got)
	if sb.DiskMiB != 8192 || got.DiskMiB != 8192 {
		t.Fatalf("disk_mib %d / %d, want 8192", sb.DiskMiB, got.DiskMiB)
	}
	before := e.dump()
	r := e.do("POST", "/v1/sandboxes", e.keyA, `{"disk_mib": 8193}`).wantError(t, http.StatusBadRequest, apiv1.CodeExceedsCapacity)
	if !strings.Contains(string(r.body), "disk_mib 8193") {
		t.Fatalf("message does not name the request: %s", r.body)
	}
	for _, body := range []string{`{"disk_mib": 63}`, `{"disk_mib": 16777217}`, `{"disk_mib": "big"}`} {
		e.send(req{method: "POST", path: "/v1/sandboxes", key: e.keyA, body: body, invalid: true}).
			wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	}
	if e.dump() != before {
		t.Fatal("a refused create changed the store")
	}
	if _, err := sandboxes.New(sandboxes.Config{Store: e.st, DefaultDiskMiB: 8193,
		Capacity: &model.NodeCapacity{DiskMiB: 8192}}); err == nil {
		t.Fatal("a default disk above the maximum was accepted")
	}
}

func TestProjectQuotaRoutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.quota(e.projA)
	if q.ProjectID != e.projA.String() || q.Limits != (apiv1.QuotaLimits{}) || q.Usage != (apiv1.QuotaUsage{}) {
		t.Fatalf("new project: %+v", q)
	}
	e.createSandbox(e.keyA, `{"cpus": 2, "memory_mib": 1024, "disk_mib": 4096}`)
	q = e.setQuota(e.projA, `{"sandboxes": 5, "cpus": null, "memory_mib": 0}`)
	if q.Limits.Sandboxes == nil || *q.Limits.Sandboxes != 5 || q.Limits.CPUs != nil || *q.Limits.MemoryMiB != 0 || q.Limits.DiskMiB != nil {
		t.Fatalf("limits %+v", q.Limits)
	}
	if q.Usage != (apiv1.QuotaUsage{Sandboxes: 1, CPUs: 2, MemoryMiB: 1024, DiskMiB: 4096}) {
		t.Fatalf("usage %+v", q.Usage)
	}
	if got := e.quota(e.projA); !reflect.DeepEqual(got, q) {
		t.Fatalf("GET %+v, PUT answered %+v", got, q)
	}
	// memory_mib 0 admits nothing.
	r := e.do("POST", "/v1/sandboxes", e.keyA, `{}`).wantError(t, http.StatusForbidden, apiv1.CodeQuotaExceeded)
	if !strings.Contains(string(r.body), "memory_mib: the project's live sandboxes hold 1024 of 0, and this sandbox asks for 512 more") {
		t.Fatalf("message: %s", r.body)
	}
	// PUT replaces: absent is unlimited.
	if q = e.setQuota(e.projA, `{}`); q.Limits != (apiv1.QuotaLimits{}) {
		t.Fatalf("cleared: %+v", q.Limits)
	}
	e.createSandbox(e.keyA, `{}`)

	path := "/v1/admin/projects/" + e.projA.String() + "/quota"
	e.do("GET", path, e.keyA, "").wantError(t, http.StatusForbidden, apiv1.CodePermissionDenied)
	e.do("PUT", path, e.keyA, `{}`).wantError(t, http.StatusForbidden, apiv1.CodePermissionDenied)
	unknown := "/v1/admin/projects/" + model.NewProjectID().String() + "/quota"
	e.do("GET", unknown, e.admin, "").wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
	e.do("PUT", unknown, e.admin, `{"sandboxes": 1}`).wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
	before := e.dump()
	for _, body := range []string{`{"sandboxes": -1}`, `{"cpus": 1099511627777}`, `{"disk_mib": "10"}`, `{"gpus": 1}`, `[]`} {
		e.send(req{method: "PUT", path: path, key: e.admin, body: body, invalid: true}).
			wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	}
	e.send(req{method: "GET", path: "/v1/admin/projects/prj_nope/quota", key: e.admin, invalid: true}).
		wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	if e.dump() != before {
		t.Fatal("a refused quota change changed the store")
	}
	// Idempotent: a replay answers as the first time.
	r1 := e.send(req{method: "PUT", path: path, key: e.admin, body: `{"cpus": 9}`, header: idem("q1")}).want(t, http.StatusOK)
	r2 := e.send(req{method: "PUT", path: path, key: e.admin, body: `{"cpus": 9}`, header: idem("q1")}).want(t, http.StatusOK)
	if string(r1.body) != string(r2.body) || r2.header.Get(headerReplayed) != "true" {
		t.Fatalf("replay: %s / %s", r1.body, r2.body)
	}
}

// TestQuotaConcurrentCreates: many creates at once through HTTP against a
// quota of k: exactly k are accepted, the rest get 403 quota_exceeded, and
// a refused create leaves no sandbox, operation or idempotency record.
// Retries with an accepted request's Idempotency-Key are replays and do not
// count; deleting a sandbox frees its share once the delete completes.
func TestQuotaConcurrentCreates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const (
		k = 3
		n = 24
	)
	e.setQuota(e.projA, fmt.Sprintf(`{"sandboxes": %d, "cpus": 64}`, k))
	results := make([]*resp, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = e.send(req{method: "POST", path: "/v1/sandboxes", key: e.keyA, t: t,
				header: idem(fmt.Sprintf("create-%d", i)), body: fmt.Sprintf(`{"metadata": {"i": "%d"}}`, i)})
		}()
	}
	wg.Wait()
	var accepted []int
	for i, r := range results {
		switch r.status {
		case http.StatusAccepted:
			accepted = append(accepted, i)
		case http.StatusForbidden:
			r.wantError(t, http.StatusForbidden, apiv1.CodeQuotaExceeded)
			if !strings.Contains(string(r.body), fmt.Sprintf("%d live sandboxes of the %d", k, k)) {
				t.Fatalf("refusal does not name the limit and usage: %s", r.body)
			}
		default:
			t.Fatalf("create %d: %d %s", i, r.status, r.body)
		}
	}
	if len(accepted) != k {
		t.Fatalf("%d creates accepted, want %d", len(accepted), k)
	}
	check := func() {
		t.Helper()
		for table, want := range map[string]int{"sandboxes": k, "operations": k, "idempotency": k} {
			if got := e.countRows(table, e.projA); got != want {
				t.Fatalf("%d rows in %s, want %d", got, table, want)
			}
		}
		if u := e.quota(e.projA).Usage; u.Sandboxes != k || u.CPUs != k {
			t.Fatalf("usage %+v", u)
		}
	}
	check()

	// Retries of accepted creates, concurrent and later, are replays.
	for range 2 {
		for _, i := range accepted {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := e.send(req{method: "POST", path: "/v1/sandboxes", key: e.keyA, t: t,
					header: idem(fmt.Sprintf("create-%d", i)), body: fmt.Sprintf(`{"metadata": {"i": "%d"}}`, i)})
				if r.status != http.StatusAccepted || r.header.Get(headerReplayed) != "true" ||
					string(r.body) != string(results[i].body) {
					t.Errorf("retry of %d: %d %s", i, r.status, r.body)
				}
			}()
		}
		wg.Wait()
	}
	check()

	// Another project is not limited by A's quota.
	e.createSandbox(e.keyB, `{}`)

	// Deleting frees the share once the delete completes (deleting counts).
	var first apiv1.SandboxWithOperation
	results[accepted[0]].decode(t, &first)
	e.do("DELETE", "/v1/sandboxes/"+first.Sandbox.ID, e.keyA, "").want(t, http.StatusAccepted)
	e.do("POST", "/v1/sandboxes", e.keyA, `{}`).wantError(t, http.StatusForbidden, apiv1.CodeQuotaExceeded)
	e.finishDelete(model.SandboxID(first.Sandbox.ID))
	e.createSandbox(e.keyA, `{}`)
	e.do("POST", "/v1/sandboxes", e.keyA, `{}`).wantError(t, http.StatusForbidden, apiv1.CodeQuotaExceeded)
}
