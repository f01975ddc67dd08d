package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/pgtest"
)

// runtimes are the runtimes the end-to-end path is exercised on.
func runtimes() []string { return []string{"runc", "crun", "runsc"} }

// TestRunEcho is the skeleton's promise: `airlock run -- echo hello` prints
// hello through API → store → controller → runtime → agent → data plane.
func TestRunEcho(t *testing.T) {
	airtest.RequireRoot(t)
	bins := build(t)
	for _, rt := range runtimes() {
		t.Run(rt, func(t *testing.T) {
			airtest.RequireBinary(t, rt)
			s := newServer(t, bins, serverConfig{runtime: rt})
			s.start()
			ctx := ctxFor(t, 2*time.Minute)

			stdout, stderr, code := s.cli(ctx, "run", "--", "echo", "hello")
			if code != 0 || stdout != "hello\n" {
				t.Fatalf("airlock run -- echo hello: exit %d, stdout %q, stderr %q", code, stdout, stderr)
			}
			// The exit code, stderr and env travel the same path.
			stdout, stderr, code = s.cli(ctx, "run", "--env", "GREETING=hi", "--", "sh", "-c", `echo "$GREETING" from $(hostname); echo oops >&2; exit 3`)
			if code != 3 || stdout != "hi from airlock\n" || stderr != "oops\n" {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
			}
		})
	}
}

// TestAutoRuntime checks that, without --runtime, the server picks gVisor
// (the strongest isolation that works on a KVM-less host) and says so.
func TestAutoRuntime(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runsc")
	s := newServer(t, build(t), serverConfig{})
	s.start()
	ctx := ctxFor(t, time.Minute)
	if !strings.Contains(s.log.String(), "runtime=runsc") {
		t.Errorf("server log does not say it picked runsc:\n%s", s.log.String())
	}
	sb := createSandbox(ctx, t, s.client(), apiv1.CreateSandboxRequest{})
	if sb.Runtime != "runsc" {
		t.Errorf("sandbox runtime = %q, want runsc", sb.Runtime)
	}
	// gVisor's kernel identifies itself in dmesg.
	res := execIn(ctx, t, s.client(), model.SandboxID(sb.ID), "dmesg")
	if !strings.Contains(res.stdout, "gVisor") {
		t.Errorf("dmesg inside the sandbox does not mention gVisor: %q", res.stdout)
	}
}

// TestBadInputThroughCLI checks that a user's mistakes get clear errors.
func TestBadInputThroughCLI(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runc")
	s := newServer(t, build(t), serverConfig{runtime: "runc"})
	s.start()
	ctx := ctxFor(t, time.Minute)
	cases := []struct {
		args    []string
		code    int
		wantErr string
	}{
		{[]string{"run", "--template", "no-such-template", "--", "true"}, 1, "template_not_found"},
		{[]string{"sandbox", "get", "not-an-id"}, 2, `sandbox ID "not-an-id" must start with "sbx_"`},
		{[]string{"sandbox", "get", model.NewSandboxID().String()}, 1, "not_found"},
		{[]string{"run", "--cpus", "1000", "--", "true"}, 1, "invalid_request"},
		{[]string{"run", "--", "no-such-command"}, 127, "exec_failed"},
	}
	for _, tc := range cases {
		_, stderr, code := s.cli(ctx, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.wantErr) {
			t.Errorf("airlock %v: exit %d, stderr %q; want exit %d mentioning %q", tc.args, code, stderr, tc.code, tc.wantErr)
		}
	}
	// A wrong key is refused.
	s.key = "alk_" + strings.Repeat("a", 26) + "_" + strings.Repeat("b", 52)
	_, stderr, code := s.cli(ctx, "sandbox", "list")
	if code == 0 || !strings.Contains(stderr, "unauthenticated") {
		t.Errorf("wrong key: exit %d, stderr %q", code, stderr)
	}
	key, _ := readAdminKey(s.dataDir)
	s.key = key
}

// TestPostgresStore runs the full path on the PostgreSQL store.
func TestPostgresStore(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runc")
	dsn := pgtest.DSN(t)
	s := newServer(t, build(t), serverConfig{runtime: "runc", databaseURL: dsn})
	s.start()
	ctx := ctxFor(t, time.Minute)
	stdout, stderr, code := s.cli(ctx, "run", "--", "echo", "hello")
	if code != 0 || stdout != "hello\n" {
		t.Fatalf("airlock run on PostgreSQL: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
