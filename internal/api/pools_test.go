package api

import (
	"context"
	"net/http"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
)

func withPoolClaims() envOption {
	return func(c *envConfig) { c.svc.ClaimPools = true }
}

// poolSandbox stores a ready, unclaimed sandbox of pool id on the test
// node, as the pool controller and the reconciler would make it.
func (e *testEnv) poolSandbox(id model.PoolID, res model.Resources) model.SandboxID {
	e.t.Helper()
	now := e.clock.Now()
	sb := model.Sandbox{
		ID: model.NewSandboxID(), ProjectID: model.SystemProject, Template: e.digest, Resources: res,
		State: model.StatePending, NodeID: testNode, Pool: id, CreatedAt: now, UpdatedAt: now,
	}
	op := model.Operation{ID: model.NewOperationID(), ProjectID: model.SystemProject, SandboxID: sb.ID,
		Kind: model.OpCreate, State: model.OpPending, CreatedAt: now, UpdatedAt: now}
	if err := e.st.CreateSandbox(context.Background(), sb, policy.Spec{Default: policy.None}, op, nil); err != nil {
		e.t.Fatal(err)
	}
	e.finishCreate(sb.ID)
	return sb.ID
}

func (e *testEnv) pools() apiv1.PoolList {
	e.t.Helper()
	var out apiv1.PoolList
	e.do("GET", "/v1/pools", e.admin, "").want(e.t, http.StatusOK).decode(e.t, &out)
	return out
}

func TestPoolsAdminOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withPoolClaims())
	e.do("GET", "/v1/pools", e.keyA, "").wantError(t, http.StatusForbidden, apiv1.CodePermissionDenied)
	e.do("PUT", "/v1/pools", e.keyA, `{"template":"default","size":1}`).wantError(t, http.StatusForbidden, apiv1.CodePermissionDenied)
	e.do("DELETE", "/v1/pools/"+model.NewPoolID().String(), e.keyA, "").wantError(t, http.StatusForbidden, apiv1.CodePermissionDenied)
	if got := e.pools(); len(got.Pools) != 0 {
		t.Fatalf("pools after refused calls: %+v", got)
	}
}

func TestPutPoolErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withPoolClaims())
	before := e.dump()
	for _, tc := range []struct {
		body    string
		status  int
		code    string
		invalid bool // by the OpenAPI document's schema already
	}{
		{`{"template":"nope","size":1}`, http.StatusNotFound, apiv1.CodeTemplateNotFound, false},
		{`{"template":"default","size":-1}`, http.StatusBadRequest, apiv1.CodeInvalidRequest, true},
		{`{"template":"default","size":1001}`, http.StatusBadRequest, apiv1.CodeInvalidRequest, true},
		{`{"template":"default","size":1,"cpus":0}`, http.StatusBadRequest, apiv1.CodeInvalidRequest, true},
		{`{"template":"default","size":1,"memory_mib":1}`, http.StatusBadRequest, apiv1.CodeInvalidRequest, true},
		{`{"template":"../x","size":1}`, http.StatusBadRequest, apiv1.CodeInvalidRequest, false},
		{`{"template":"default","size":1,"environment":"runsc"}`, http.StatusNotImplemented, apiv1.CodeNotSupported, false},
		{`{"template":"default","size":1,"extra":1}`, http.StatusBadRequest, apiv1.CodeInvalidRequest, true},
	} {
		e.send(req{method: "PUT", path: "/v1/pools", key: e.admin, body: tc.body, invalid: tc.invalid}).wantError(t, tc.status, tc.code)
	}
	e.do("DELETE", "/v1/pools/"+model.NewPoolID().String(), e.admin, "").wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
	e.send(req{method: "DELETE", path: "/v1/pools/sbx_x", key: e.admin, invalid: true}).wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	if after := e.dump(); after != before {
		t.Fatalf("a refused request changed the store:\nbefore %s\nafter %s", before, after)
	}
}

// TestPoolClaim: a matching create claims a ready sandbox (201, running,
// source pool) with its own env, metadata and project; an empty pool falls
// back to a cold create (202) and counts a miss; a create of other
// resources does not match.
func TestPoolClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withPoolClaims())
	var p apiv1.Pool
	e.do("PUT", "/v1/pools", e.admin, `{"template":"default","size":1,"memory_mib":256}`).want(t, http.StatusOK).decode(t, &p)
	if p.Size != 1 || p.Ready != 0 || p.Template != "default:latest" || p.MemoryMiB != 256 || p.CPUs != 1 || p.Drained {
		t.Fatalf("new pool: %+v", p)
	}
	var again apiv1.Pool
	e.do("PUT", "/v1/pools", e.admin, `{"template":"default","size":2,"memory_mib":256}`).want(t, http.StatusOK).decode(t, &again)
	if again.ID != p.ID || again.Size != 2 {
		t.Fatalf("second PUT of the key: %+v, want pool %s of size 2", again, p.ID)
	}
	res := model.Resources{CPUs: 1, MemoryMiB: 256, DiskMiB: model.DefaultDiskMiB}
	slot := e.poolSandbox(model.PoolID(p.ID), res)
	// Invisible to projects until claimed.
	e.do("GET", "/v1/sandboxes/"+slot.String(), e.keyA, "").wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
	var list apiv1.SandboxList
	e.do("GET", "/v1/sandboxes", e.admin, "").want(t, http.StatusOK).decode(t, &list)
	if len(list.Sandboxes) != 0 {
		t.Fatalf("the admin's project lists pool sandboxes: %+v", list)
	}
	if got := e.pools().Pools[0]; got.Ready != 1 || len(got.Releases) != 1 || got.Releases[0].Digest != e.digest.String() {
		t.Fatalf("pool after one ready sandbox: %+v", got)
	}

	body := `{"memory_mib":256,"env":{"GREETING":"hi"},"metadata":{"task":"t1"},"egress":{"default":"none"}}`
	var claimed apiv1.SandboxWithOperation
	r := e.send(req{method: "POST", path: "/v1/sandboxes", key: e.keyA, body: body, header: http.Header{"Idempotency-Key": {"claim-1"}}})
	r.want(t, http.StatusCreated).decode(t, &claimed)
	sb, op := claimed.Sandbox, claimed.Operation
	if sb.ID != slot.String() || sb.State != "running" || sb.Source != apiv1.SourcePool || sb.Env["GREETING"] != "hi" ||
		sb.Metadata["task"] != "t1" || sb.Egress == nil || sb.Egress.Default != "none" {
		t.Fatalf("claimed sandbox: %+v", sb)
	}
	if op.Kind != "create" || op.State != "succeeded" || op.Source != apiv1.SourcePool || op.SandboxID != sb.ID {
		t.Fatalf("claim's operation: %+v", op)
	}
	var got apiv1.Sandbox
	e.do("GET", "/v1/sandboxes/"+sb.ID, e.keyA, "").want(t, http.StatusOK).decode(t, &got)
	if got.Source != apiv1.SourcePool || got.Egress == nil || got.Egress.Default != "none" {
		t.Fatalf("GET the claimed sandbox: %+v", got)
	}
	var gotOp apiv1.Operation
	e.do("GET", "/v1/operations/"+op.ID, e.keyA, "").want(t, http.StatusOK).decode(t, &gotOp)
	if gotOp.State != "succeeded" || gotOp.Source != apiv1.SourcePool {
		t.Fatalf("GET the claim's operation: %+v", gotOp)
	}
	// The same request again is a replay, not a second claim.
	var replay apiv1.SandboxWithOperation
	e.send(req{method: "POST", path: "/v1/sandboxes", key: e.keyA, body: body, header: http.Header{"Idempotency-Key": {"claim-1"}}}).
		want(t, http.StatusCreated).decode(t, &replay)
	if replay.Sandbox.ID != sb.ID {
		t.Fatalf("replay claimed %s, want %s", replay.Sandbox.ID, sb.ID)
	}

	// Empty now: a cold create, and a miss.
	cold := e.createSandbox(e.keyA, `{"memory_mib":256}`)
	if cold.Sandbox.State != "pending" || cold.Sandbox.Source != "" {
		t.Fatalf("create from an empty pool: %+v", cold.Sandbox)
	}
	// Other resources match no pool: no miss.
	e.createSandbox(e.keyA, `{"memory_mib":512}`)
	pl := e.pools().Pools[0]
	if pl.Hits != 1 || pl.Misses != 1 || pl.Ready != 0 || pl.LastUsedAt == nil {
		t.Fatalf("pool after a hit and a miss: %+v", pl)
	}

	var deleted apiv1.Pool
	e.do("DELETE", "/v1/pools/"+p.ID, e.admin, "").want(t, http.StatusOK).decode(t, &deleted)
	if deleted.ID != p.ID {
		t.Fatalf("DELETE returned %+v", deleted)
	}
	if len(e.pools().Pools) != 0 {
		t.Fatal("the pool is still listed")
	}
	// The claimed sandbox is the project's, untouched.
	e.do("GET", "/v1/sandboxes/"+sb.ID, e.keyA, "").want(t, http.StatusOK)
}

// TestPoolClaimQuota: a claim counts against the claiming project's quota
// and is refused like a create over it; the pool's sandbox stays the
// pool's.
func TestPoolClaimQuota(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withPoolClaims())
	var p apiv1.Pool
	e.do("PUT", "/v1/pools", e.admin, `{"template":"default","size":1}`).want(t, http.StatusOK).decode(t, &p)
	slot := e.poolSandbox(model.PoolID(p.ID), model.Resources{CPUs: 1, MemoryMiB: 512, DiskMiB: model.DefaultDiskMiB})
	e.do("PUT", "/v1/admin/projects/"+e.projA.String()+"/quota", e.admin, `{"sandboxes":0}`).want(t, http.StatusOK)
	e.do("POST", "/v1/sandboxes", e.keyA, `{}`).wantError(t, http.StatusForbidden, apiv1.CodeQuotaExceeded)
	sb, err := e.st.GetSandboxByID(context.Background(), slot)
	if err != nil || sb.Pool != model.PoolID(p.ID) || sb.ProjectID != model.SystemProject {
		t.Fatalf("pool sandbox after a refused claim: %+v, %v", sb, err)
	}
	// The system project is nobody's to act for.
	e.do("POST", "/v1/admin/keys", e.admin, `{"project_id":"`+model.SystemProject.String()+`","role":"admin","name":"x"}`).
		wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
	e.do("PUT", "/v1/admin/projects/"+model.SystemProject.String()+"/quota", e.admin, `{"sandboxes":0}`).
		wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
	var projects apiv1.ProjectList
	e.do("GET", "/v1/admin/projects", e.admin, "").want(t, http.StatusOK).decode(t, &projects)
	for _, pr := range projects.Projects {
		if pr.ID == model.SystemProject.String() {
			t.Fatal("the system project is listed")
		}
	}
}
