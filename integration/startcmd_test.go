package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// TestTemplateStartCmd: a recipe's start_cmd and ready_cmd, through the
// CLI and the API, on runc and runsc. The build checks them in a build
// sandbox (the start command's output is in the build log) and records
// them; a sandbox of the template has the start command running (it
// wrote its file, it listens on its port, it is one of the sandbox's
// processes) at its first exec, and its create took as long as the ready
// command needed; after a suspend and a wake it runs once (started again
// on runc, whose suspend keeps files only; continued on runsc); a sandbox
// on which the ready command never passes (its environment says so) fails
// its create with template_not_ready and leaves nothing.
func TestTemplateStartCmd(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "unshare")
	bins := build(t)
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			airtest.RequireBinary(t, rt)
			ctx := ctxFor(t, 4*time.Minute)
			dir := t.TempDir()
			// The start command takes a second before it is ready: it
			// writes its file, then serves a port (busybox nc). The ready
			// command waits for both, and fails at once where NOT_READY
			// is set (no sandbox of the build has it).
			recipe := filepath.Join(dir, "start.yaml")
			src := "from: {template: minimal}\n" +
				"workdir: /tmp\n" +
				"start_cmd: 'echo start-output; sleep 1; echo up > /tmp/started; exec nc -ll -p 7070 -e echo hello'\n" +
				"ready_cmd: '[ -z \"$NOT_READY\" ] && [ -f /tmp/started ] && netstat -ltn | grep -q :7070'\n" +
				"ready_timeout: 20s\n"
			if err := os.WriteFile(recipe, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			s := newServer(t, bins, serverConfig{runtime: rt})
			s.start()
			stdout, stderr, code := s.cli(ctx, "-o", "json", "template", "build", "-f", recipe, "--name", "stest")
			if code != 0 {
				t.Fatalf("template build: exit %d\n%s\n%s", code, stdout, stderr)
			}
			var b apiv1.Build
			if err := json.Unmarshal([]byte(stdout), &b); err != nil || b.State != "succeeded" {
				t.Fatalf("template build printed %q (%v)", stdout, err)
			}
			log, _, _ := s.cli(ctx, "build", "log", b.ID, "--follow=false")
			for _, want := range []string{"start-output", "the template is ready"} {
				if !strings.Contains(log, want) {
					t.Errorf("the build log lacks %q:\n%s", want, log)
				}
			}
			c := s.client()
			tpl, err := c.GetTemplate(ctx, "stest")
			if err != nil || tpl.Config == nil || !strings.Contains(tpl.Config.StartCmd, "nc -ll") || tpl.Config.ReadyTimeoutMS != 20000 {
				t.Fatalf("template: %+v %v", tpl.Config, err)
			}

			start := time.Now()
			stdout, stderr, code = s.cli(ctx, "-o", "json", "sandbox", "create", "--template", "stest")
			if code != 0 {
				t.Fatalf("create: exit %d %s %s", code, stdout, stderr)
			}
			if el := time.Since(start); el < time.Second {
				t.Errorf("the create took %v: it did not wait for the ready command", el)
			}
			var made apiv1.SandboxWithOperation
			if err := json.Unmarshal([]byte(stdout), &made); err != nil {
				t.Fatal(err)
			}
			sb := made.Sandbox
			id := model.SandboxID(sb.ID)
			stdout, stderr, code = s.cli(ctx, "exec", sb.ID, "--", "/bin/sh", "-c", "cat /tmp/started; nc 127.0.0.1 7070 </dev/null; pwd")
			if code != 0 || stdout != "up\nhello\n/tmp\n" {
				t.Fatalf("first exec: exit %d, %q %q", code, stdout, stderr)
			}
			startRunning := func(when string) {
				t.Helper()
				procs, err := c.ListProcesses(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				running := 0
				for _, p := range procs.Processes {
					if p.Running && len(p.Args) == 3 && strings.Contains(p.Args[2], "nc -ll") {
						running++
					}
				}
				if running != 1 {
					t.Errorf("%s: %d running start commands among %+v", when, running, procs.Processes)
				}
			}
			startRunning("after the create")
			// A suspend and a wake: on runc (files only) the processes
			// start again, the start command among them; on runsc (memory
			// kept) it runs on and is not started a second time.
			for _, op := range []string{"suspend", "wake"} {
				if stdout, stderr, code := s.cli(ctx, "sandbox", op, sb.ID); code != 0 {
					t.Fatalf("%s: exit %d %s %s", op, code, stdout, stderr)
				}
			}
			startRunning("after a suspend and a wake")
			if stdout, stderr, code := s.cli(ctx, "exec", sb.ID, "--", "/bin/sh", "-c", "nc 127.0.0.1 7070 </dev/null"); code != 0 || stdout != "hello\n" {
				t.Errorf("the port after the wake: exit %d, %q %q", code, stdout, stderr)
			}
			if _, _, code := s.cli(ctx, "sandbox", "delete", sb.ID); code != 0 {
				t.Errorf("delete: exit %d", code)
			}

			// Never ready: the create fails with the code, after the
			// ready timeout (its message says so; the guest's timer, not a
			// wall clock here, decides it), and nothing is left.
			stdout, stderr, code = s.cli(ctx, "sandbox", "create", "--template", "stest", "--env", "NOT_READY=1")
			if code == 0 || !strings.Contains(stdout+stderr, apiv1.CodeTemplateNotReady) || !strings.Contains(stdout+stderr, "did not succeed within 20s") {
				t.Fatalf("a never-ready create: exit %d, %q %q", code, stdout, stderr)
			}
			all, err := c.ListAllSandboxes(ctx, client.ListSandboxesQuery{})
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range all.Sandboxes {
				if x.State != "deleted" && x.State != "failed" {
					t.Errorf("sandbox %s is left %s", x.ID, x.State)
				}
			}
		})
	}
}
