package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/worker"
)

// testEnvRef is the reference of the test's one environment.
var testEnvRef = model.EnvironmentRef("env:sha256:" + strings.Repeat("e", 64))

// createIn stores a pending sandbox of environment ref with its create
// operation.
func (e *env) createIn(ref model.EnvironmentRef) (model.SandboxID, model.OperationID) {
	e.t.Helper()
	return e.createOn(ref, "")
}

// createOn is createIn with the runtime an earlier run of the server chose.
func (e *env) createOn(ref model.EnvironmentRef, runtime string) (model.SandboxID, model.OperationID) {
	e.t.Helper()
	now := time.Now()
	sb := model.Sandbox{ID: model.NewSandboxID(), ProjectID: e.project, Template: e.digest,
		Resources: model.Resources{CPUs: 1, MemoryMiB: 256}, Env: model.Env{}, Metadata: model.Metadata{},
		State: model.StatePending, Environment: ref, NodeID: e.node, Runtime: runtime, CreatedAt: now, UpdatedAt: now}
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
	crunID, crunOp := e.createOn("", "crun")
	e.run()

	// Its reference: runs here.
	id, opID := e.createIn(testEnvRef)
	if op := e.waitOp(opID); op.State != model.OpSucceeded {
		t.Fatalf("create in the enabled environment: %+v", op)
	}
	if sb := e.sandbox(id); sb.State != model.StateRunning || sb.Runtime != "runc" {
		t.Fatalf("after create: %+v", sb)
	}

	// A reference this server does not drive: it never gets a runtime,
	// it fails and says why.
	other := model.EnvironmentRef("env:sha256:" + strings.Repeat("f", 64))
	badID, badOp := e.createIn(other)
	if op := e.waitOp(badOp); op.State != model.OpFailed || !strings.Contains(op.Error.Message, "does not drive") {
		t.Fatalf("create in an environment not driven: %+v %+v", op, op.Error)
	}
	if sb := e.sandbox(badID); sb.State != model.StateFailed || sb.Runtime != "" {
		t.Fatalf("after a create in an environment not driven: %+v", sb)
	}

	// One in an environment not driven, deleted before it was placed: its
	// create is cancelled and the delete finishes (nothing of it exists).
	goneID, goneCreate := e.createIn(other)
	goneDelete := e.delete(goneID)
	if op := e.waitOp(goneCreate); op.State != model.OpFailed {
		t.Fatalf("create of a sandbox deleted before it was placed: %+v", op)
	}
	if op := e.waitOp(goneDelete); op.State != model.OpSucceeded {
		t.Fatalf("delete of a sandbox never placed, of an environment not driven: %+v %+v", op, op.Error)
	}
	if sb := e.sandbox(goneID); sb.State != model.StateDeleted {
		t.Fatalf("after its delete: %s", sb.State)
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

// TestTwoEnvironmentsSideBySide: one controller drives runc and runsc
// sandboxes at once, each through its own worker; resync removes each
// runtime's orphans with that runtime and keeps the other's sandboxes.
func TestTwoEnvironmentsSideBySide(t *testing.T) {
	e := newEnv(t, "runc", nil)
	gv := newEnv(t, "runsc", nil) // only its runtime and worker are used
	ctx := context.Background()
	refRunc, refRunsc := testEnvRef, model.EnvironmentRef("env:sha256:"+strings.Repeat("5", 64))
	set, err := worker.NewSet([]worker.Environment{{Name: environment.NameRunc, Ref: refRunc, Worker: e.wk}, {Name: environment.NameRunsc, Ref: refRunsc, Worker: gv.wk}}, e.st.GetSandboxByID)
	if err != nil {
		t.Fatal(err)
	}
	e.ctrl, err = New(Config{Store: e.st, Workers: set, NodeID: e.node, Incarnation: e.inc, Resync: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	e.run()

	runcID, runcOp := e.createIn(refRunc)
	runscID, runscOp := e.createIn(refRunsc)
	oldID, oldOp := e.createIn("") // a row from before environments: the default
	for _, op := range []model.OperationID{runcOp, runscOp, oldOp} {
		if got := e.waitOp(op); got.State != model.OpSucceeded {
			t.Fatalf("create: %+v %+v", got, got.Error)
		}
	}
	for id, want := range map[model.SandboxID]string{runcID: "runc", runscID: "runsc", oldID: "runc"} {
		if sb := e.sandbox(id); sb.State != model.StateRunning || sb.Runtime != want {
			t.Fatalf("sandbox %s: %s on %q, want running on %s", id, sb.State, sb.Runtime, want)
		}
	}
	if _, err := gv.rt.State(ctx, runscID); err != nil {
		t.Fatalf("runsc does not have its sandbox: %v", err)
	}
	if _, err := e.rt.State(ctx, runscID); err == nil {
		t.Fatal("runc has the runsc sandbox")
	}
	// An agent through the set reaches each.
	for _, id := range []model.SandboxID{runcID, runscID} {
		agent, err := set.Agent(id)
		if err != nil {
			t.Fatal(err)
		}
		res, err := agent.Run(ctx, agentproto.StartRequest{ID: model.NewProcessID().String(), Args: []string{"echo", "hi"}})
		if err != nil || string(res.Stdout) != "hi\n" {
			t.Fatalf("run in %s: %+v, %v", id, res, err)
		}
	}

	// An orphan in runsc (no record wants it) goes; the others stay.
	orphan := model.Sandbox{ID: model.NewSandboxID(), ProjectID: e.project, Template: e.digest,
		Resources: model.Resources{CPUs: 1, MemoryMiB: 256}, Env: model.Env{}, Metadata: model.Metadata{}}
	if err := gv.wk.Ensure(ctx, orphan); err != nil {
		t.Fatal(err)
	}
	if err := e.ctrl.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := gv.rt.State(ctx, orphan.ID); err == nil {
		t.Fatal("resync left the runsc orphan")
	}
	for _, id := range []model.SandboxID{runcID, runscID, oldID} {
		if sb := e.sandbox(id); sb.State != model.StateRunning {
			t.Fatalf("sandbox %s after resync: %s (%s)", id, sb.State, sb.StateReason)
		}
	}
	for _, id := range []model.SandboxID{runcID, runscID, oldID} {
		if op := e.waitOp(e.delete(id)); op.State != model.OpSucceeded {
			t.Fatalf("delete %s: %+v", id, op)
		}
	}
	if ids, _ := gv.rt.List(ctx); len(ids) != 0 {
		t.Fatalf("runsc still has %v", ids)
	}
}
