package integration

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// TestServerInFakenet checks the harness of the egress tests: a server
// started in the fake internet's host namespace runs there (not in the
// real host's), and the API client, the data plane and the CLI reach it on
// that namespace's loopback.
func TestServerInFakenet(t *testing.T) {
	n := newFakenet(t)
	s := newServer(t, build(t), serverConfig{runtime: "runc", netns: n})
	s.start()
	want, err := n.HostNetnsID()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", s.cmd.Process.Pid)); err != nil || got != want {
		t.Fatalf("server in netns %s (%v), want the fake host's %s", got, err, want)
	}
	ctx := ctxFor(t, 2*time.Minute)
	sb := createSandbox(ctx, t, s.client(), apiv1.CreateSandboxRequest{})
	if res := execIn(ctx, t, s.client(), model.SandboxID(sb.ID), "echo", "hello"); res.stdout != "hello\n" || res.exitCode != 0 {
		t.Fatalf("exec: %+v", res)
	}
	out, errOut, code := s.cli(ctx, "run", "--", "echo", "from-cli")
	if code != 0 || strings.TrimSpace(out) != "from-cli" {
		t.Fatalf("airlock run: code %d, stdout %q, stderr %q", code, out, errOut)
	}
}
