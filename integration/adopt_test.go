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

// TestSandboxOutlivesServer SIGKILLs (and, separately, gracefully stops) the
// server while a sandbox runs a background process, restarts it, and checks
// the same sandbox — with the same process still running — is adopted, not
// recreated.
func TestSandboxOutlivesServer(t *testing.T) {
	airtest.RequireRoot(t)
	bins := build(t)
	for _, rt := range []string{"runc", "runsc"} {
		for _, how := range []string{"sigkill", "sigterm"} {
			t.Run(rt+"/"+how, func(t *testing.T) {
				airtest.RequireBinary(t, rt)
				s := newServer(t, bins, serverConfig{runtime: rt})
				s.start()
				ctx := ctxFor(t, 2*time.Minute)
				c := s.client()
				sb := createSandbox(ctx, t, c, apiv1.CreateSandboxRequest{})
				id := model.SandboxID(sb.ID)

				// Start a background process and leave it running: attach, then
				// drop the stream.
				cs, err := c.CreateCommand(ctx, id, apiv1.CreateCommandRequest{Args: []string{"sleep", "600"}})
				if err != nil {
					t.Fatal(err)
				}
				st, err := c.Attach(ctx, cs.AttachURL, cs.AttachmentToken)
				if err != nil {
					t.Fatal(err)
				}
				before := waitForPid(ctx, t, c, id)
				st.Close()

				if how == "sigkill" {
					s.kill()
				} else {
					s.stop()
				}
				s.start()
				c = s.client()
				got, err := c.GetSandbox(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if got.State != string(model.StateRunning) {
					t.Fatalf("after restart the sandbox is %s (%s)", got.State, got.StateReason)
				}
				after := execIn(ctx, t, c, id, "pidof", "sleep")
				if strings.TrimSpace(after.stdout) != before {
					t.Fatalf("background process: pid %q before, %q after restart (sandbox recreated?)", before, after.stdout)
				}
				list, err := c.ListAllSandboxes(ctx, client.ListSandboxesQuery{States: model.AllSandboxStates()})
				if err != nil {
					t.Fatal(err)
				}
				if len(list.Sandboxes) != 1 {
					t.Fatalf("sandboxes after restart: %+v", list.Sandboxes)
				}
			})
		}
	}
}

// waitForPid waits until `sleep` runs in the sandbox and returns its pid.
func waitForPid(ctx context.Context, t *testing.T, c *client.Client, id model.SandboxID) string {
	t.Helper()
	for i := 0; i < 100; i++ {
		out := execIn(ctx, t, c, id, "pidof", "sleep")
		if p := strings.TrimSpace(out.stdout); p != "" {
			return p
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the background sleep never started")
	return ""
}
