package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// lifecycleCrash is one fault point of a pause, resume, suspend or wake:
// the operation that reaches it, the operations that bring a new sandbox
// to the state it starts from, and its points.
type lifecycleCrash struct {
	kind   model.OperationKind
	before []model.OperationKind
	points []string
}

func lifecycleCrashes() []lifecycleCrash {
	return []lifecycleCrash{
		{model.OpPause, nil, []string{"pause.before-runtime", "pause.after-runtime"}},
		{model.OpResume, []model.OperationKind{model.OpPause}, []string{"resume.before-runtime", "resume.after-runtime"}},
		{model.OpSuspend, nil, []string{"suspend.before-runtime", "suspend.after-runtime"}},
		{model.OpWake, []model.OperationKind{model.OpSuspend}, []string{"wake.before-runtime-create", "wake.after-runtime-create", "wake.after-start"}},
	}
}

// TestCrashDuringLifecycle kills the server at each step of a pause,
// resume, suspend and wake, restarts it, and checks the operation
// converges: it succeeds, the sandbox is in the lifecycle's final state and
// usable from there, and after its delete nothing is left on the host.
func TestCrashDuringLifecycle(t *testing.T) {
	airtest.RequireRoot(t)
	bins := build(t)
	for _, setup := range crashSetups() {
		for _, lc := range lifecycleCrashes() {
			for _, point := range lc.points {
				t.Run(setup.name+"/"+point, func(t *testing.T) {
					airtest.RequireBinary(t, setup.runtime)
					s := newServer(t, bins, serverConfig{runtime: setup.runtime, databaseURL: setup.databaseURL(t)})
					s.start()
					ctx := ctxFor(t, 3*time.Minute)
					c := s.client()
					sb := createSandbox(ctx, t, c, apiv1.CreateSandboxRequest{})
					id := model.SandboxID(sb.ID)
					if out := execIn(ctx, t, c, id, "sh", "-c", "echo before > /root/mark"); out.exitCode != 0 {
						t.Fatalf("write a file: %+v", out)
					}
					for _, k := range lc.before {
						lifecycleAndWait(ctx, t, c, id, k)
					}
					s.stop()

					s.cfg.crashAt = point
					s.start()
					keyed := client.WithIdempotencyKey(ctx, model.IdempotencyKey(string(lc.kind)+"-"+id.String()))
					_, firstErr := s.client().LifecycleSandbox(keyed, id, lc.kind) // may die before it answers
					s.waitExit(60 * time.Second)
					if !strings.Contains(s.log.String(), "fault injection: killing the server") {
						t.Fatalf("the server did not die at %s:\n%s", point, s.log.String())
					}

					s.cfg.crashAt = ""
					s.start()
					c = s.client()
					res, err := c.LifecycleSandbox(keyed, id, lc.kind) // replays the first result
					if err != nil {
						t.Fatalf("repeat the %s (first attempt: %v): %v", lc.kind, firstErr, err)
					}
					op, err := c.WaitOperation(ctx, model.OperationID(res.Operation.ID))
					if err != nil {
						t.Fatal(err)
					}
					if op.State != string(model.OpSucceeded) {
						t.Fatalf("%s after crash at %s: %s %+v", lc.kind, point, op.State, op.Error)
					}
					final, err := model.LifecycleOf(lc.kind)
					if err != nil {
						t.Fatal(err)
					}
					if got := s.waitState(ctx, id, final.Final); got.State != string(final.Final) {
						t.Fatalf("sandbox is %s", got.State)
					}
					// Usable from there: back to running, and the file
					// written before is there.
					switch final.Final {
					case model.StatePaused:
						lifecycleAndWait(ctx, t, c, id, model.OpResume)
					case model.StateSuspended:
						lifecycleAndWait(ctx, t, c, id, model.OpWake)
					}
					if out := execIn(ctx, t, c, id, "cat", "/root/mark"); out.stdout != "before\n" {
						t.Fatalf("sandbox after recovery: %+v", out)
					}
					deleteAndCheck(ctx, t, s, id)
				})
			}
		}
	}
}

// lifecycleAndWait requests a pause, resume, suspend or wake and waits for
// its success.
func lifecycleAndWait(ctx context.Context, t *testing.T, c *client.Client, id model.SandboxID, kind model.OperationKind) {
	t.Helper()
	res, err := c.LifecycleSandbox(ctx, id, kind)
	if err != nil {
		t.Fatalf("%s: %v", kind, err)
	}
	op, err := c.WaitOperation(ctx, model.OperationID(res.Operation.ID))
	if err != nil {
		t.Fatalf("%s: %v", kind, err)
	}
	if op.State != string(model.OpSucceeded) {
		t.Fatalf("%s: %s %+v", kind, op.State, op.Error)
	}
}
