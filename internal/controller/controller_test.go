package controller

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/rootfs"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/runtime/oci"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/store/sqlite"
	"github.com/airlockdev/airlock/internal/store/sqlstore"
	"github.com/airlockdev/airlock/internal/worker"
)

// env is a controller over a real SQLite store, a real OCI runtime and the
// real guest agent.
type env struct {
	t       testing.TB
	st      store.Store
	rt      runtime.Runtime
	wk      *worker.Worker
	ctrl    *Controller
	node    model.NodeID
	inc     model.Incarnation // the node's registered incarnation
	project model.ProjectID
	digest  model.TemplateDigest
	// stateRoot is the runtime's per-sandbox state directory root.
	stateRoot string
}

func newEnv(t *testing.T, flavor string, templateErr error) *env {
	return newEnvWith(t, flavor, templateErr, Config{})
}

// newEnvWith is newEnv with controller settings (Store, Worker, NodeID,
// Incarnation and Logger are filled in; the node is registered).
func newEnvWith(t testing.TB, flavor string, templateErr error, cc Config, opts ...func(*oci.Config)) *env {
	t.Helper()
	return newEnvWrapped(t, flavor, templateErr, cc, nil, opts...)
}

// newEnvWrapped is newEnvWith whose worker drives wrap(the runtime) (nil:
// the runtime itself), e.g. to inject failures; env.rt is the runtime.
func newEnvWrapped(t testing.TB, flavor string, templateErr error, cc Config, wrap func(*oci.Runtime) runtime.Runtime, opts ...func(*oci.Config)) *env {
	t.Helper()
	return newEnvFull(t, flavor, templateErr, cc, wrap, nil, opts...)
}

// newEnvFull is newEnvWrapped whose worker's configuration wcfg may change
// (nil: none).
func newEnvFull(t testing.TB, flavor string, templateErr error, cc Config, wrap func(*oci.Runtime) runtime.Runtime, wcfg func(*worker.Config), opts ...func(*oci.Config)) *env {
	t.Helper()
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, flavor)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	dir, err := os.MkdirTemp("", "ctl-")
	if err != nil {
		t.Fatal(err)
	}
	// runc and crun sandbox roots are unprivileged host users that must
	// reach their state directories below it.
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		mounts, _ := rootfs.MountsUnder(dir)
		for _, m := range mounts {
			_ = rootfs.Unmount(context.Background(), log, m)
		}
		os.RemoveAll(dir)
	})
	st, err := sqlite.Open(ctx, filepath.Join(dir, "airlock.db"), log, sqlstore.WithTracerProvider(cc.TracerProvider))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	stateRoot := filepath.Join(dir, "sbx")
	ocfg := oci.Config{
		Flavor:       flavor,
		RootDir:      filepath.Join(dir, "state"),
		StateRoot:    stateRoot,
		CgroupParent: "/airlock-test",
		Logger:       log,
	}
	for _, o := range opts {
		o(&ocfg)
	}
	rt, err := oci.New(ocfg)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := airtest.BusyboxRootfs(t)
	var driven runtime.Runtime = rt
	if wrap != nil {
		driven = wrap(rt)
	}
	wc := worker.Config{
		Runtime: driven,
		TemplateDir: func(model.TemplateDigest) (string, error) {
			if templateErr != nil {
				return "", templateErr
			}
			return tmpl, nil
		},
		AgentBinary:    airtest.BuildAgent(t),
		Logger:         log,
		TracerProvider: cc.TracerProvider,
	}
	if wcfg != nil {
		wcfg(&wc)
	}
	wk, err := worker.New(wc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wk.Close() })
	e := &env{t: t, st: st, rt: rt, wk: wk, node: model.NewNodeID(), inc: model.NewIncarnation(), project: model.NewProjectID(), digest: model.DigestFromSHA256([32]byte{7}), stateRoot: stateRoot}
	if _, err := st.RegisterNode(ctx, model.Node{ID: e.node, Incarnation: e.inc, Role: model.RoleAll, AdvertiseURL: "http://127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	set, err := worker.NewSet([]worker.Environment{{Name: environment.Name(flavor), Ref: testEnvRef, Worker: wk}}, st.GetSandboxByID)
	if err != nil {
		t.Fatal(err)
	}
	cc.Store, cc.Workers, cc.NodeID, cc.Incarnation, cc.Logger = st, set, e.node, e.inc, log
	if cc.Resync == 0 {
		cc.Resync = time.Hour // tests call Resync themselves
	}
	e.ctrl, err = New(cc)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := st.CreateProject(ctx, model.Project{ID: e.project, Name: "p", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutTemplate(ctx, model.Template{Digest: e.digest, Manifest: []byte("{}"), CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	// Whatever a test leaves, the runtime must hold nothing afterwards.
	t.Cleanup(func() {
		ids, _ := rt.List(context.Background())
		for _, id := range ids {
			_ = rt.Delete(context.Background(), id)
		}
	})
	return e
}

// run starts the controller until the test ends.
func (e *env) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.ctrl.Run(ctx)
	}()
	e.t.Cleanup(func() {
		cancel()
		<-done
	})
}

func (e *env) create() (model.SandboxID, model.OperationID) {
	e.t.Helper()
	now := time.Now()
	sb := model.Sandbox{ID: model.NewSandboxID(), ProjectID: e.project, Template: e.digest,
		Resources: model.Resources{CPUs: 1, MemoryMiB: 256}, Env: model.Env{"HELLO": "world"}, Metadata: model.Metadata{},
		State: model.StatePending, NodeID: e.node, CreatedAt: now, UpdatedAt: now}
	op := model.Operation{ID: model.NewOperationID(), ProjectID: e.project, SandboxID: sb.ID, Kind: model.OpCreate,
		State: model.OpPending, CreatedAt: now, UpdatedAt: now}
	if err := e.st.CreateSandbox(context.Background(), sb, policy.Spec{}, op, nil); err != nil {
		e.t.Fatal(err)
	}
	return sb.ID, op.ID
}

func (e *env) delete(id model.SandboxID) model.OperationID {
	e.t.Helper()
	now := time.Now()
	op := model.Operation{ID: model.NewOperationID(), ProjectID: e.project, SandboxID: id, Kind: model.OpDelete,
		State: model.OpPending, CreatedAt: now, UpdatedAt: now}
	if _, err := e.st.RequestDelete(context.Background(), store.DeleteRequest{ProjectID: e.project, SandboxID: id, Operation: op, Now: now}); err != nil {
		e.t.Fatal(err)
	}
	return op.ID
}

// waitOp waits for an operation to finish.
func (e *env) waitOp(id model.OperationID) model.Operation {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	changes := e.st.Watch(ctx)
	for {
		op, err := e.st.GetOperation(ctx, e.project, id)
		if err != nil {
			e.t.Fatal(err)
		}
		if op.State.Done() {
			return op
		}
		select {
		case <-ctx.Done():
			e.t.Fatalf("operation %s did not finish: %+v", id, op)
		case <-changes:
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (e *env) sandbox(id model.SandboxID) model.Sandbox {
	e.t.Helper()
	sb, err := e.st.GetSandboxByID(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return sb
}

func TestCreateRunDelete(t *testing.T) {
	e := newEnv(t, "runc", nil)
	e.run()
	id, opID := e.create()
	if op := e.waitOp(opID); op.State != model.OpSucceeded {
		t.Fatalf("create: %+v", op)
	}
	sb := e.sandbox(id)
	if sb.State != model.StateRunning || sb.NodeID != e.node || sb.Runtime != "runc" {
		t.Fatalf("after create: %+v", sb)
	}
	agent, err := e.wk.Agent(id)
	if err != nil {
		t.Fatal(err)
	}
	res, err := agent.Run(context.Background(), agentproto.StartRequest{ID: model.NewProcessID().String(), Args: []string{"sh", "-c", "echo $HELLO"}})
	if err != nil || string(res.Stdout) != "world\n" {
		t.Fatalf("run in sandbox: %+v, %v", res, err)
	}
	if op := e.waitOp(e.delete(id)); op.State != model.OpSucceeded {
		t.Fatalf("delete: %+v", op)
	}
	if sb := e.sandbox(id); sb.State != model.StateDeleted {
		t.Fatalf("after delete: %s", sb.State)
	}
	if _, err := e.rt.State(context.Background(), id); err == nil {
		t.Fatal("the runtime still has the deleted sandbox")
	}
}

func TestCreateWithMissingTemplateFails(t *testing.T) {
	e := newEnv(t, "runc", os.ErrNotExist)
	e.run()
	id, opID := e.create()
	op := e.waitOp(opID)
	if op.State != model.OpFailed || op.Error == nil || op.Attempts != 1 {
		t.Fatalf("create with a missing template: %+v (a permanent error must not be retried)", op)
	}
	if sb := e.sandbox(id); sb.State != model.StateFailed || !strings.Contains(sb.StateReason, "template") {
		t.Fatalf("sandbox: %s %q", sb.State, sb.StateReason)
	}
	if ids, _ := e.rt.List(context.Background()); len(ids) != 0 {
		t.Fatalf("a failed create left %v in the runtime", ids)
	}
}

func TestDeleteCancelsPendingCreate(t *testing.T) {
	e := newEnv(t, "runc", nil)
	id, createOp := e.create()
	deleteOp := e.delete(id) // before any controller runs
	e.run()
	if op := e.waitOp(createOp); op.State != model.OpFailed || op.Error == nil || op.Error.Code != "cancelled" {
		t.Fatalf("create: %+v", op)
	}
	if op := e.waitOp(deleteOp); op.State != model.OpSucceeded {
		t.Fatalf("delete: %+v", op)
	}
}

func TestResyncFailsDeadSandboxAndRemovesOrphans(t *testing.T) {
	e := newEnv(t, "runc", nil)
	e.run()
	id, opID := e.create()
	if op := e.waitOp(opID); op.State != model.OpSucceeded {
		t.Fatalf("create: %+v", op)
	}
	// Something outside Airlock kills the sandbox.
	if err := e.rt.Stop(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	// And something left a sandbox that no record wants.
	orphan := model.NewSandboxID()
	tmpl := airtest.BusyboxRootfs(t)
	if err := e.rt.Create(context.Background(), runtime.Spec{ID: orphan, RootFS: runtime.RootFS{Lower: tmpl}, Hostname: "x",
		Resources: runtime.Resources{CPUs: 1, MemoryBytes: 128 << 20, PidsLimit: 64}, AgentBinary: airtest.BuildAgent(t)}); err != nil {
		t.Fatal(err)
	}
	if err := e.ctrl.Resync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if sb := e.sandbox(id); sb.State != model.StateFailed || !strings.Contains(sb.StateReason, "stopped") {
		t.Fatalf("dead sandbox: %s %q", sb.State, sb.StateReason)
	}
	if _, err := e.rt.State(context.Background(), orphan); err == nil {
		t.Fatal("resync left the orphan")
	}
	// The failed sandbox keeps its resources until deleted, then loses them.
	if op := e.waitOp(e.delete(id)); op.State != model.OpSucceeded {
		t.Fatalf("delete: %+v", op)
	}
}

// A paused sandbox is alive: resync keeps it running in the store.
func TestResyncKeepsPausedSandbox(t *testing.T) {
	e := newEnv(t, "runc", nil)
	e.run()
	id, opID := e.create()
	if op := e.waitOp(opID); op.State != model.OpSucceeded {
		t.Fatalf("create: %+v", op)
	}
	p, err := runtime.AsPauser(e.rt)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Pause(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if err := e.ctrl.Resync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if sb := e.sandbox(id); sb.State != model.StateRunning {
		t.Fatalf("paused sandbox after resync: %s %q", sb.State, sb.StateReason)
	}
	if err := p.Resume(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if op := e.waitOp(e.delete(id)); op.State != model.OpSucceeded {
		t.Fatalf("delete: %+v", op)
	}
}

// TestResyncReportsOOMUnderGVisor: under gVisor a memory hog kills the
// whole sandbox; resync marks it failed and says why.
func TestResyncReportsOOMUnderGVisor(t *testing.T) {
	e := newEnv(t, "runsc", nil)
	e.run()
	id, opID := e.create()
	if op := e.waitOp(opID); op.State != model.OpSucceeded {
		t.Fatalf("create: %+v", op)
	}
	// 256 MiB limit; ask for 1 GiB.
	agent, _ := e.wk.Agent(id)
	_, _ = agent.Run(context.Background(), agentproto.StartRequest{ID: model.NewProcessID().String(),
		Args: []string{"dd", "if=/dev/zero", "of=/dev/null", "bs=1024M", "count=1"}})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := e.ctrl.Resync(context.Background()); err != nil {
			t.Fatal(err)
		}
		sb := e.sandbox(id)
		if sb.State == model.StateFailed {
			if !strings.Contains(sb.StateReason, "memory") {
				t.Fatalf("reason %q does not mention memory", sb.StateReason)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox still %s after the memory hog", sb.State)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if op := e.waitOp(e.delete(id)); op.State != model.OpSucceeded {
		t.Fatalf("delete: %+v", op)
	}
}

// TestFailedDeleteIsRetried: a delete that keeps failing ends its operation
// as failed with the sandbox still deleting; once the cause is gone, the
// resync loop queues the delete again and it succeeds.
func TestFailedDeleteIsRetried(t *testing.T) {
	chattr := airtest.RequireBinary(t, "chattr")
	e := newEnvWith(t, "runc", nil, Config{MaxAttempts: 1})
	e.run()
	id, opID := e.create()
	if op := e.waitOp(opID); op.State != model.OpSucceeded {
		t.Fatalf("create: %+v", op)
	}
	// An immutable file makes removing the sandbox's state fail.
	pinned := filepath.Join(e.stateRoot, id.String(), "bundle", "config.json")
	if out, err := exec.Command(chattr, "+i", pinned).CombinedOutput(); err != nil {
		t.Skipf("chattr +i not supported here: %v %s", err, out)
	}
	unpin := func() { _ = exec.Command(chattr, "-i", pinned).Run() }
	t.Cleanup(unpin)

	if op := e.waitOp(e.delete(id)); op.State != model.OpFailed {
		t.Fatalf("delete of a pinned sandbox: %+v", op)
	}
	if sb := e.sandbox(id); sb.State != model.StateDeleting {
		t.Fatalf("after a failed delete the sandbox is %s", sb.State)
	}
	unpin()
	if err := e.ctrl.Resync(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for e.sandbox(id).State != model.StateDeleted {
		if time.Now().After(deadline) {
			t.Fatalf("the requeued delete did not finish: %s", e.sandbox(id).State)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := e.rt.State(context.Background(), id); err == nil {
		t.Fatal("the runtime still has the deleted sandbox")
	}
}
