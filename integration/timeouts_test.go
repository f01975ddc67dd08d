package integration

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/reaper"
)

// cannotSuspendLog is what a server whose runtime cannot suspend logs at
// start (internal/server/reaper.go); its reaper then leaves idle sandboxes
// running and pauses, instead of suspending, at an on_timeout=suspend
// deadline.
const cannotSuspendLog = "idle sandboxes are not suspended: the runtime cannot suspend"

// TestTimeouts runs deadlines and idle limits through a real server on
// runc and runsc with short limits: a deadline set by the CLI deletes the sandbox; an
// on_timeout=suspend deadline suspends it (or pauses it where the runtime
// cannot suspend); an idle sandbox is suspended (or, where the runtime
// cannot suspend, keeps running); a sandbox with an attached stream is
// active while the stream lasts.
func TestTimeouts(t *testing.T) {
	airtest.RequireRoot(t)
	bins := build(t)
	// runc suspends the filesystem only, runsc checkpoints memory too.
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			airtest.RequireBinary(t, rt)
			testTimeouts(t, bins, rt)
		})
	}
}

func testTimeouts(t *testing.T, bins binaries, rt string) {
	s := newServer(t, bins, serverConfig{runtime: rt, extraArgs: []string{"--reap-interval", "200ms"}})
	s.start()
	ctx := ctxFor(t, 3*time.Minute)
	c := s.client()
	canSuspend := !strings.Contains(s.log.String(), cannotSuspendLog)
	t.Logf("the runtime can suspend: %v", canSuspend)
	never := int64(0)

	t.Run("deadline set by the CLI deletes", func(t *testing.T) {
		stdout, stderr, code := s.cli(ctx, "-o", "json", "sandbox", "create", "--sandbox-timeout", "1h", "--idle-timeout", "0")
		if code != 0 {
			t.Fatalf("sandbox create: exit %d: %s", code, stderr)
		}
		var created apiv1.SandboxWithOperation
		if err := json.Unmarshal([]byte(stdout), &created); err != nil {
			t.Fatalf("decode %q: %v", stdout, err)
		}
		sb := created.Sandbox
		if sb.TimeoutAt == nil || sb.OnTimeout != "delete" || sb.IdleTimeout != 0 {
			t.Fatalf("created with timeout_at %v on_timeout %q idle_timeout %d", sb.TimeoutAt, sb.OnTimeout, sb.IdleTimeout)
		}
		id := model.SandboxID(sb.ID)
		stdout, stderr, code = s.cli(ctx, "-o", "json", "sandbox", "timeout", sb.ID, "3s")
		if code != 0 {
			t.Fatalf("sandbox timeout: exit %d: %s", code, stderr)
		}
		var changed apiv1.Sandbox
		if err := json.Unmarshal([]byte(stdout), &changed); err != nil {
			t.Fatalf("decode %q: %v", stdout, err)
		}
		if changed.TimeoutAt == nil || changed.TimeoutAt.After(time.Now().Add(4*time.Second)) {
			t.Fatalf("timeout_at after `sandbox timeout 3s`: %v", changed.TimeoutAt)
		}
		deleted := s.waitState(ctx, id, model.StateDeleted)
		if deleted.UpdatedAt.Before(*changed.TimeoutAt) {
			t.Fatalf("deleted at %s, before its deadline %s", deleted.UpdatedAt, changed.TimeoutAt)
		}
		late := deleted.UpdatedAt.Sub(*changed.TimeoutAt)
		if late > 20*time.Second {
			t.Fatalf("deleted %s after its deadline", late)
		}
		t.Logf("deleted %s after its deadline (reap interval 200ms)", late)
		// A deleted sandbox's deadline cannot change.
		if _, stderr, code := s.cli(ctx, "sandbox", "timeout", sb.ID, "1m"); code == 0 || !strings.Contains(stderr, "invalid_transition") {
			t.Fatalf("timeout of a deleted sandbox: exit %d, stderr %q", code, stderr)
		}
	})

	t.Run("deadline with on_timeout suspend", func(t *testing.T) {
		sb := createSandbox(ctx, t, c, apiv1.CreateSandboxRequest{Timeout: 2, OnTimeout: "suspend", IdleTimeout: &never})
		id := model.SandboxID(sb.ID)
		want, reason := model.StateSuspended, reaper.ReasonDeadline
		if !canSuspend {
			want, reason = model.StatePaused, reaper.ReasonDeadlinePaused
		}
		got := s.waitState(ctx, id, want)
		if got.TimeoutAt != nil {
			t.Fatalf("the deadline is still set once acted on: %v", got.TimeoutAt)
		}
		t.Logf("at the deadline the sandbox became %s (%q; the reaper's reason was %q)", got.State, got.StateReason, reason)
		msg := "deadline passed; suspend requested"
		if !canSuspend {
			msg = "deadline passed; its runtime cannot suspend, pause requested"
		}
		s.wantLog(t, id, msg)
	})

	t.Run("idle limit", func(t *testing.T) {
		two := int64(2)
		sb := createSandbox(ctx, t, c, apiv1.CreateSandboxRequest{IdleTimeout: &two})
		id := model.SandboxID(sb.ID)
		if !canSuspend {
			// Nothing to suspend it with: it keeps running past its limit.
			time.Sleep(5 * time.Second)
			got, err := c.GetSandbox(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != string(model.StateRunning) {
				t.Fatalf("an idle sandbox whose runtime cannot suspend is %s (%q), want running", got.State, got.StateReason)
			}
			if !strings.Contains(s.log.String(), "idle, but its runtime cannot suspend it") {
				t.Fatal("the server did not log that it leaves the idle sandbox running")
			}
			return
		}
		got := s.waitState(ctx, id, model.StateSuspended)
		s.wantLog(t, id, "idle; suspend requested")
		if got.UpdatedAt.Sub(sb.CreatedAt) < 2*time.Second {
			t.Fatalf("suspended %s after its create, within its idle limit", got.UpdatedAt.Sub(sb.CreatedAt))
		}
		t.Logf("suspended %s after its create (idle limit 2s; the suspend itself included)", got.UpdatedAt.Sub(sb.CreatedAt))
	})

	t.Run("an attached stream keeps it active", func(t *testing.T) {
		three := int64(3) // enough to create the command before it is idle, on a loaded host too
		sb := createSandbox(ctx, t, c, apiv1.CreateSandboxRequest{IdleTimeout: &three})
		id := model.SandboxID(sb.ID)
		cs, err := c.CreateCommand(ctx, id, apiv1.CreateCommandRequest{Args: []string{"sh", "-c", "echo start; sleep 9; echo end"}})
		if err != nil {
			t.Fatal(err)
		}
		st, err := c.Attach(ctx, cs.AttachURL, cs.AttachmentToken)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- drain(st) }()
		// More than twice its idle limit, attached the whole time.
		for range 7 {
			time.Sleep(time.Second)
			got, err := c.GetSandbox(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != string(model.StateRunning) {
				t.Fatalf("a sandbox with an attached stream became %s (%q)", got.State, got.StateReason)
			}
		}
		if err := <-done; err != nil {
			t.Fatalf("attached stream: %v", err)
		}
		st.Close()
		// The stream kept last_activity_at moving (flushed while attached).
		got, err := c.GetSandbox(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got.LastActivityAt == nil || got.LastActivityAt.Sub(sb.CreatedAt) < 4*time.Second {
			t.Fatalf("last_activity_at %v, created %s: the attached stream was not recorded as activity", got.LastActivityAt, sb.CreatedAt)
		}
		if canSuspend {
			// Once the stream is gone, the idle limit applies.
			s.waitState(ctx, id, model.StateSuspended)
		}
	})
}

// wantLog fails unless the server logged msg about the sandbox.
func (s *server) wantLog(t *testing.T, id model.SandboxID, msg string) {
	t.Helper()
	for _, line := range strings.Split(s.log.String(), "\n") {
		if strings.Contains(line, `msg="`+msg+`"`) && strings.Contains(line, "sandbox="+id.String()) {
			return
		}
	}
	t.Fatalf("the server did not log %q for %s", msg, id)
}

// drain reads a stream to its exit event.
func drain(st *client.Stream) error {
	for {
		ev, err := st.Next()
		if errors.Is(err, io.EOF) {
			return errors.New("the stream ended without an exit event")
		}
		if err != nil {
			return err
		}
		if ev.Kind == apiv1.EventExit {
			return nil
		}
	}
}
