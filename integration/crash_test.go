package integration

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/pgtest"
)

// The fault points of the worker (see internal/worker): the server SIGKILLs
// itself when it reaches one.
var (
	createPoints = []string{"create.before-network", "create.after-network", "create.before-runtime-create", "create.after-runtime-create", "create.after-start"}
	deletePoints = []string{"delete.before-runtime-delete", "delete.after-runtime-delete", "delete.after-network-detach"}
)

// crashSetup is a runtime and store combination the crash tests run on.
type crashSetup struct {
	name     string
	runtime  string
	postgres bool
}

func (c crashSetup) databaseURL(t *testing.T) string {
	if !c.postgres {
		return ""
	}
	return pgtest.DSN(t)
}

func crashSetups() []crashSetup {
	return []crashSetup{
		{"runc-sqlite", "runc", false},
		{"runsc-sqlite", "runsc", false},
		{"runc-postgres", "runc", true},
	}
}

// TestCrashDuringCreate kills the server at each step of a create, restarts
// it, and checks the create converges: the operation succeeds, the sandbox
// runs commands, and after delete nothing is left on the host.
func TestCrashDuringCreate(t *testing.T) {
	airtest.RequireRoot(t)
	bins := build(t)
	for _, setup := range crashSetups() {
		for _, point := range createPoints {
			t.Run(setup.name+"/"+point, func(t *testing.T) {
				airtest.RequireBinary(t, setup.runtime)
				s := newServer(t, bins, serverConfig{runtime: setup.runtime, databaseURL: setup.databaseURL(t), crashAt: point})
				s.start()
				ctx := ctxFor(t, 2*time.Minute)
				// The server may die before it answers: the same call with the
				// same Idempotency-Key after the restart returns the first result.
				keyed := client.WithIdempotencyKey(ctx, model.IdempotencyKey("create-"+model.NewOperationID().String()))
				_, firstErr := s.client().CreateSandbox(keyed, apiv1.CreateSandboxRequest{})
				s.waitExit(60 * time.Second) // the armed point kills it
				if !strings.Contains(s.log.String(), "fault injection: killing the server") {
					t.Fatalf("the server did not die at %s:\n%s", point, s.log.String())
				}

				s.cfg.crashAt = ""
				s.start()
				c := s.client()
				res, err := c.CreateSandbox(keyed, apiv1.CreateSandboxRequest{})
				if err != nil {
					t.Fatalf("repeat the create (first attempt: %v): %v", firstErr, err)
				}
				assertOneSandbox(ctx, t, c)
				op, err := c.WaitOperation(ctx, model.OperationID(res.Operation.ID))
				if err != nil {
					t.Fatal(err)
				}
				if op.State != string(model.OpSucceeded) {
					t.Fatalf("create after crash at %s: %s %+v", point, op.State, op.Error)
				}
				id := model.SandboxID(res.Sandbox.ID)
				if out := execIn(ctx, t, c, id, "echo", "alive"); out.stdout != "alive\n" {
					t.Fatalf("sandbox after recovery: %+v", out)
				}
				assertOneSandbox(ctx, t, c)
				deleteAndCheck(ctx, t, s, id)
			})
		}
	}
}

// TestCrashDuringDelete kills the server at each step of a delete, restarts
// it, and checks the delete converges with nothing left on the host.
func TestCrashDuringDelete(t *testing.T) {
	airtest.RequireRoot(t)
	bins := build(t)
	for _, setup := range crashSetups() {
		for _, point := range deletePoints {
			t.Run(setup.name+"/"+point, func(t *testing.T) {
				airtest.RequireBinary(t, setup.runtime)
				s := newServer(t, bins, serverConfig{runtime: setup.runtime, databaseURL: setup.databaseURL(t)})
				s.start()
				ctx := ctxFor(t, 2*time.Minute)
				sb := createSandbox(ctx, t, s.client(), apiv1.CreateSandboxRequest{})
				id := model.SandboxID(sb.ID)
				s.stop()

				s.cfg.crashAt = point
				s.start()
				keyed := client.WithIdempotencyKey(ctx, model.IdempotencyKey("delete-"+id.String()))
				_, firstErr := s.client().DeleteSandbox(keyed, id) // may die before it answers
				s.waitExit(60 * time.Second)

				s.cfg.crashAt = ""
				s.start()
				res, err := s.client().DeleteSandbox(keyed, id) // replays the first result
				if err != nil {
					t.Fatalf("repeat the delete (first attempt: %v): %v", firstErr, err)
				}
				op, err := s.client().WaitOperation(ctx, model.OperationID(res.Operation.ID))
				if err != nil {
					t.Fatal(err)
				}
				if op.State != string(model.OpSucceeded) {
					t.Fatalf("delete after crash at %s: %s %+v", point, op.State, op.Error)
				}
				got := s.waitState(ctx, id, model.StateDeleted)
				if got.State != string(model.StateDeleted) {
					t.Fatalf("sandbox is %s", got.State)
				}
				assertNoLeftovers(t, s.dataDir, []model.SandboxID{id}, false)
			})
		}
	}
}

// TestKillAtRandomMoments SIGKILLs the server at random moments while
// sandboxes are being created and deleted, and checks everything converges.
func TestKillAtRandomMoments(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runc")
	s := newServer(t, build(t), serverConfig{runtime: "runc"})
	s.start()
	ctx := ctxFor(t, 3*time.Minute)
	var ops []model.OperationID
	for round := 0; round < 4; round++ {
		c := s.client()
		for i := 0; i < 3; i++ {
			res, err := c.CreateSandbox(ctx, apiv1.CreateSandboxRequest{})
			if err != nil {
				t.Fatal(err)
			}
			ops = append(ops, model.OperationID(res.Operation.ID))
		}
		time.Sleep(time.Duration(rand.IntN(400)) * time.Millisecond)
		s.kill()
		s.start()
		// Delete half of what exists, then kill again soon after.
		c = s.client()
		list, err := c.ListAllSandboxes(ctx, client.ListSandboxesQuery{})
		if err != nil {
			t.Fatal(err)
		}
		for i, sb := range list.Sandboxes {
			if i%2 == 1 {
				continue
			}
			res, err := c.DeleteSandbox(ctx, model.SandboxID(sb.ID))
			if err != nil {
				if client.IsCode(err, apiv1.CodeInvalidTransition) {
					continue
				}
				t.Fatal(err)
			}
			ops = append(ops, model.OperationID(res.Operation.ID))
		}
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
		s.kill()
		s.start()
	}
	// Every operation ends, and every sandbox is either running and usable
	// or deleted.
	c := s.client()
	for _, id := range ops {
		op, err := c.WaitOperation(ctx, id)
		var failed *client.OperationFailedError
		switch {
		case errors.As(err, &failed):
			// A create that a delete overtook is cancelled; nothing else may fail.
			if e := failed.Operation.Error; e == nil || e.Code != "cancelled" {
				t.Errorf("operation %s failed: %+v", id, e)
			}
		case err != nil:
			t.Fatal(err)
		case op.State != string(model.OpSucceeded):
			t.Errorf("operation %s ended %s", id, op.State)
		}
	}
	list, err := c.ListAllSandboxes(ctx, client.ListSandboxesQuery{States: model.AllSandboxStates()})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range list.Sandboxes {
		switch sb.State {
		case string(model.StateRunning):
			if out := execIn(ctx, t, c, model.SandboxID(sb.ID), "true"); out.exitCode != 0 {
				t.Errorf("sandbox %s: %+v", sb.ID, out)
			}
		case string(model.StateDeleted):
		default:
			t.Errorf("sandbox %s did not converge: %s (%s)", sb.ID, sb.State, sb.StateReason)
		}
	}
}

func assertOneSandbox(ctx context.Context, t *testing.T, c *client.Client) {
	t.Helper()
	list, err := c.ListAllSandboxes(ctx, client.ListSandboxesQuery{States: model.AllSandboxStates()})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Sandboxes) != 1 {
		t.Fatalf("want exactly one sandbox, have %d: %+v", len(list.Sandboxes), list.Sandboxes)
	}
}

// deleteAndCheck deletes a sandbox, waits for it, and checks the host holds
// nothing of it.
func deleteAndCheck(ctx context.Context, t *testing.T, s *server, id model.SandboxID) {
	t.Helper()
	c := s.client()
	res, err := c.DeleteSandbox(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	op, err := c.WaitOperation(ctx, model.OperationID(res.Operation.ID))
	if err != nil {
		t.Fatal(err)
	}
	if op.State != string(model.OpSucceeded) {
		t.Fatalf("delete: %s %+v", op.State, op.Error)
	}
	assertNoLeftovers(t, s.dataDir, []model.SandboxID{id}, false)
}
