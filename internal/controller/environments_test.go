package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
)

// testEnvRef is the reference of the test's one environment.
var testEnvRef = model.EnvironmentRef("env:sha256:" + strings.Repeat("e", 64))

// createIn stores a pending sandbox of environment ref with its create
// operation.
func (e *env) createIn(ref model.EnvironmentRef) (model.SandboxID, model.OperationID) {
	e.t.Helper()
	now := time.Now()
	sb := model.Sandbox{ID: model.NewSandboxID(), ProjectID: e.project, Template: e.digest,
		Resources: model.Resources{CPUs: 1, MemoryMiB: 256}, Env: model.Env{}, Metadata: model.Metadata{},
		State: model.StatePending, Environment: ref, CreatedAt: now, UpdatedAt: now}
	op := model.Operation{ID: model.NewOperationID(), ProjectID: e.project, SandboxID: sb.ID, Kind: model.OpCreate,
		State: model.OpPending, CreatedAt: now, UpdatedAt: now}
	if err := e.st.CreateSandbox(context.Background(), sb, policy.Spec{}, op, nil); err != nil {
		e.t.Fatal(err)
	}
	return sb.ID, op.ID
}

func TestSandboxesAreRoutedByEnvironment(t *testing.T) {
	e := newEnv(t, "runc", nil)
	ctx := context.Background()
	// Placed on crun by an earlier run of the server: left alone.
	crunID, crunOp := e.createIn("")
	if err := e.st.PlaceSandbox(ctx, crunID, e.node, "crun", time.Now()); err != nil {
		t.Fatal(err)
	}
	e.run()

	// Its reference: runs here.
	id, opID := e.createIn(testEnvRef)
	if op := e.waitOp(opID); op.State != model.OpSucceeded {
		t.Fatalf("create in the enabled environment: %+v", op)
	}
	if sb := e.sandbox(id); sb.State != model.StateRunning || sb.Runtime != "runc" {
		t.Fatalf("after create: %+v", sb)
	}

	// A reference this server does not drive: never placed, it fails and
	// says why.
	other := model.EnvironmentRef("env:sha256:" + strings.Repeat("f", 64))
	badID, badOp := e.createIn(other)
	if op := e.waitOp(badOp); op.State != model.OpFailed || !strings.Contains(op.Error.Message, "does not drive") {
		t.Fatalf("create in an environment not driven: %+v %+v", op, op.Error)
	}
	if sb := e.sandbox(badID); sb.State != model.StateFailed || sb.NodeID != "" {
		t.Fatalf("after a create in an environment not driven: %+v", sb)
	}

	// The crun sandbox: its operation fails, the sandbox stays as it was.
	op := e.waitOp(crunOp)
	if op.State != model.OpFailed || op.Error == nil || op.Error.Code != "environment_not_enabled" || !strings.Contains(op.Error.Message, "--env crun") {
		t.Fatalf("operation of the crun sandbox: %+v %+v", op, op.Error)
	}
	if sb := e.sandbox(crunID); sb.State != model.StatePending || sb.Runtime != "crun" {
		t.Fatalf("the crun sandbox was touched: %+v", sb)
	}
	delOp := e.waitOp(e.delete(crunID))
	if delOp.State != model.OpFailed || delOp.Error.Code != "environment_not_enabled" {
		t.Fatalf("delete of the crun sandbox: %+v", delOp)
	}
	if err := e.ctrl.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	if sb := e.sandbox(crunID); sb.State != model.StateDeleting {
		t.Fatalf("the crun sandbox after a resync: %s", sb.State)
	}
	ops, err := e.st.ListUnfinishedOperations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range ops {
		if o.SandboxID == crunID {
			t.Fatalf("resync requeued a delete of a sandbox it does not drive: %+v", o)
		}
	}
	if sb := e.sandbox(id); sb.State != model.StateRunning {
		t.Fatalf("the runc sandbox after a resync: %s", sb.State)
	}
	if op := e.waitOp(e.delete(id)); op.State != model.OpSucceeded {
		t.Fatalf("delete: %+v", op)
	}
}
