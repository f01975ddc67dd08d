package integration

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// TestEnvironments runs one server with two execution environments, a
// sandbox in each, then restarts it with one of them only: the other's
// sandbox is left alone (still running, its delete refused) and, once the
// environment is enabled again, managed and deleted.
func TestEnvironments(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runc")
	airtest.RequireBinary(t, "runsc")
	bins := build(t)
	both := []string{"--env", "runc", "--env", "runsc"}
	// Its own network namespace (the egress tests' fake internet), so that
	// it runs beside other tests' servers on this host.
	s := newServer(t, bins, serverConfig{extraArgs: both, netns: newFakenet(t)})
	t.Cleanup(func() {
		// Runs before the harness's cleanup, which must be able to delete
		// the runc sandbox, whatever failed.
		if !slices.Contains(s.cfg.extraArgs, "runc") {
			s.stop()
			s.cfg.extraArgs = both
		}
	})
	s.start()
	ctx := ctxFor(t, 4*time.Minute)
	c := s.client()

	envs := listEnvironments(t, s)
	for _, name := range []string{"runc", "runsc"} {
		e, ok := envs[name]
		if !ok || !e.Enabled || !e.Available || e.Default != (name == "runc") {
			t.Fatalf("environment %s: %+v (listed: %+v)", name, e, envs)
		}
	}
	if envs["runc"].Isolation != "shared-kernel" || envs["runsc"].Isolation != "user-space-kernel" || envs["runsc"].Snapshot != "memory" {
		t.Fatalf("environments: %+v", envs)
	}

	// One sandbox in each: runc through the API by name, runsc through the
	// CLI (--env NAME beside a variable).
	runc := createSandbox(ctx, t, c, apiv1.CreateSandboxRequest{Environment: "runc"})
	stdout, stderr, code := s.cli(ctx, "-o", "json", "sandbox", "create", "--env", "runsc", "--env", "GREETING=hi")
	if code != 0 {
		t.Fatalf("sandbox create --env runsc: %d %s", code, stderr)
	}
	var created apiv1.SandboxWithOperation
	if err := json.Unmarshal([]byte(stdout), &created); err != nil {
		t.Fatalf("create output: %v\n%s", err, stdout)
	}
	runsc := s.waitState(ctx, model.SandboxID(created.Sandbox.ID), model.StateRunning)
	for _, tc := range []struct {
		sb   apiv1.Sandbox
		name string
	}{{runc, "runc"}, {runsc, "runsc"}} {
		if tc.sb.Runtime != tc.name || tc.sb.Environment != envs[tc.name].Ref {
			t.Fatalf("%s sandbox: runtime %q environment %q, want %s", tc.name, tc.sb.Runtime, tc.sb.Environment, envs[tc.name].Ref)
		}
	}
	// Each runs where it should: runc on the host's kernel, runsc on
	// gVisor's.
	hostKernel, err := exec.Command("uname", "-r").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := execIn(ctx, t, c, model.SandboxID(runc.ID), "uname", "-r"); got.exitCode != 0 || got.stdout != string(hostKernel) {
		t.Fatalf("uname -r in runc: %+v, want %q", got, hostKernel)
	}
	if got := execIn(ctx, t, c, model.SandboxID(runsc.ID), "sh", "-c", "uname -r; echo $GREETING"); got.exitCode != 0 || strings.HasPrefix(got.stdout, string(hostKernel)) || !strings.HasSuffix(got.stdout, "\nhi\n") {
		t.Fatalf("in runsc: %+v (host kernel %q)", got, hostKernel)
	}

	// Restart with runsc only.
	s.stop()
	s.cfg.extraArgs = []string{"--env", "runsc"}
	s.start()
	c = s.client()
	envs = listEnvironments(t, s)
	if e := envs["runc"]; e.Enabled || !e.Available || e.Default {
		t.Fatalf("runc after the restart without it: %+v", e)
	}
	if e := envs["runsc"]; !e.Enabled || !e.Default {
		t.Fatalf("runsc after the restart: %+v", e)
	}
	// The runsc sandbox still works; the runc one is left alone: still
	// running in runc, its record unchanged, and the server says so.
	if got := execIn(ctx, t, c, model.SandboxID(runsc.ID), "echo", "still"); got.stdout != "still\n" {
		t.Fatalf("runsc sandbox after the restart: %+v", got)
	}
	if st := runcState(t, s.dataDir, runc.ID); st != "running" {
		t.Fatalf("the runc container is %q after the restart without runc", st)
	}
	waitLog(t, s, "leaving them alone")
	if sb, err := c.GetSandbox(ctx, model.SandboxID(runc.ID)); err != nil || sb.State != string(model.StateRunning) || sb.Runtime != "runc" {
		t.Fatalf("the runc sandbox's record after the restart: %+v, %v", sb, err)
	}
	// Its commands are refused with the reason.
	var apiErr *client.APIError
	_, err = c.CreateCommand(ctx, model.SandboxID(runc.ID), apiv1.CreateCommandRequest{Args: []string{"true"}, Background: true})
	if !errors.As(err, &apiErr) || apiErr.Code != apiv1.CodeEnvironmentUnavailable {
		t.Fatalf("a command in the runc sandbox while runc is not enabled: %v", err)
	}
	// A new runc sandbox is refused: runc is not enabled here.
	_, err = c.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Environment: "runc"})
	if !errors.As(err, &apiErr) || apiErr.Code != apiv1.CodeEnvironmentUnavailable {
		t.Fatalf("create in runc while it is not enabled: %v", err)
	}
	// Its delete is accepted but not carried out: the operation says why,
	// the container keeps running.
	res, err := c.DeleteSandbox(ctx, model.SandboxID(runc.ID))
	if err != nil {
		t.Fatal(err)
	}
	op, err := c.WaitOperation(ctx, model.OperationID(res.Operation.ID))
	var failed *client.OperationFailedError
	if !errors.As(err, &failed) || op.Error == nil || op.Error.Code != "environment_not_enabled" || !strings.Contains(op.Error.Message, "--env runc") {
		t.Fatalf("delete of the runc sandbox without runc: %+v %v", op, err)
	}
	if st := runcState(t, s.dataDir, runc.ID); st != "running" {
		t.Fatalf("the runc container is %q after a delete the server could not carry out", st)
	}

	// runc enabled again: the pending delete is taken up again and done.
	s.stop()
	s.cfg.extraArgs = []string{"--env", "runsc", "--env", "runc"}
	s.start()
	c = s.client()
	s.waitState(ctx, model.SandboxID(runc.ID), model.StateDeleted)
	if st := runcState(t, s.dataDir, runc.ID); st != "" {
		t.Fatalf("the runc container is %q after its delete", st)
	}
	if got := execIn(ctx, t, c, model.SandboxID(runsc.ID), "echo", "again"); got.stdout != "again\n" {
		t.Fatalf("runsc sandbox after the second restart: %+v", got)
	}
	// The harness's cleanup deletes the runsc sandbox and checks that
	// nothing is left.
}

func listEnvironments(t *testing.T, s *server) map[string]apiv1.Environment {
	t.Helper()
	stdout, stderr, code := s.cli(ctxFor(t, time.Minute), "-o", "json", "env", "list")
	if code != 0 {
		t.Fatalf("env list: %d %s", code, stderr)
	}
	var l apiv1.EnvironmentList
	if err := json.Unmarshal([]byte(stdout), &l); err != nil {
		t.Fatalf("env list: %v\n%s", err, stdout)
	}
	out := map[string]apiv1.Environment{}
	for _, e := range l.Environments {
		if prev, ok := out[e.Name]; ok && prev.Enabled {
			continue // an enabled definition wins over an older one of the name
		}
		out[e.Name] = e
	}
	return out
}

// runcState is the status runc reports of a sandbox's container ("" when
// it has none).
func runcState(t *testing.T, dataDir, id string) string {
	t.Helper()
	root := filepath.Join(dataDir, "runtime", "runc", "state")
	out, err := exec.Command("runc", "--root", root, "state", id).Output()
	if err != nil {
		if _, serr := os.Stat(filepath.Join(root, id)); os.IsNotExist(serr) {
			return ""
		}
		t.Fatalf("runc state %s: %v", id, err)
	}
	var st struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatal(err)
	}
	return st.Status
}

// waitLog waits until the server's log contains s.
func waitLog(t *testing.T, srv *server, s string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(srv.log.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("the server did not log %q:\n%s", s, tail(srv.log.String(), 50))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
