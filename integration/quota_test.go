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

// TestProjectQuotaThroughCLI: an admin sets a project's quota with
// `airlock admin project quota`; the project's member then gets its
// sandboxes up to the quota and a clear refusal beyond it; a deleted
// sandbox frees its share; disk_mib travels from the CLI to the sandbox.
func TestProjectQuotaThroughCLI(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runc")
	s := newServer(t, build(t), serverConfig{runtime: "runc", extraArgs: []string{"--max-disk-mib", "20480"}})
	s.start()
	ctx := ctxFor(t, 3*time.Minute)

	var prj apiv1.Project
	s.cliJSON(ctx, &prj, "admin", "project", "create", "quota-e2e")
	var key apiv1.APIKey
	s.cliJSON(ctx, &key, "admin", "key", "create", "--project", prj.ID, "--role", "member")
	member := func(args ...string) (string, string, int) {
		t.Helper()
		return s.cli(ctx, append([]string{"--api-key", key.Token}, args...)...)
	}
	mc, err := client.New(s.url, key.Token)
	if err != nil {
		t.Fatal(err)
	}
	// The member's sandboxes are not in the admin's project, which the
	// harness cleans up: delete them before it runs.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		list, err := mc.ListAllSandboxes(ctx, client.ListSandboxesQuery{})
		if err != nil {
			t.Errorf("list the member's sandboxes: %v", err)
			return
		}
		for _, sb := range list.Sandboxes {
			if sb.State == string(model.StateDeleting) {
				continue
			}
			if _, err := mc.DeleteSandbox(ctx, model.SandboxID(sb.ID)); err != nil {
				t.Errorf("delete %s: %v", sb.ID, err)
			}
		}
		for _, sb := range list.Sandboxes {
			waitDeleted(ctx, t, mc, model.SandboxID(sb.ID))
		}
	})

	stdout, stderr, code := s.cli(ctx, "admin", "project", "quota", prj.ID, "--sandboxes", "1", "--disk-mib", "8192")
	if code != 0 || !strings.Contains(squash(stdout), "sandboxes 0 1\n") || !strings.Contains(squash(stdout), "disk_mib 0 8192\n") {
		t.Fatalf("set quota: exit %d\n%s\n%s", code, stdout, stderr)
	}

	// Above the server's --max-disk-mib: refused before the quota.
	_, stderr, code = member("sandbox", "create", "--disk-mib", "20481")
	if code != 1 || !strings.Contains(stderr, "exceeds_node_capacity") || !strings.Contains(stderr, "disk_mib 20481") {
		t.Fatalf("disk above the maximum: exit %d, %s", code, stderr)
	}
	// Above the project's disk quota.
	_, stderr, code = member("sandbox", "create", "--disk-mib", "8193")
	if code != 1 || !strings.Contains(stderr, "quota_exceeded") || !strings.Contains(stderr, "disk_mib: the project's live sandboxes hold 0 of 8192, and this sandbox asks for 8193 more") {
		t.Fatalf("disk above the quota: exit %d, %s", code, stderr)
	}
	stdout, stderr, code = member("sandbox", "create", "--disk-mib", "4096")
	if code != 0 || !strings.Contains(squash(stdout), "State: running") || !strings.Contains(squash(stdout), "Disk: 4096 MiB") {
		t.Fatalf("first create: exit %d\n%s\n%s", code, stdout, stderr)
	}
	_, stderr, code = member("sandbox", "create", "--disk-mib", "64")
	if code != 1 || !strings.Contains(stderr, "quota_exceeded") || !strings.Contains(stderr, "1 live sandboxes of the 1 its quota allows") {
		t.Fatalf("create over the quota: exit %d, %s", code, stderr)
	}
	var q apiv1.ProjectQuota
	s.cliJSON(ctx, &q, "admin", "project", "quota", prj.ID)
	if q.Usage.Sandboxes != 1 || q.Usage.DiskMiB != 4096 || q.Usage.CPUs != 1 || q.Limits.Sandboxes == nil || *q.Limits.Sandboxes != 1 {
		t.Fatalf("quota %+v", q)
	}

	// A deleted sandbox frees its share.
	list, err := mc.ListSandboxes(ctx, client.ListSandboxesQuery{})
	if err != nil || len(list.Sandboxes) != 1 {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if _, stderr, code := member("sandbox", "delete", list.Sandboxes[0].ID); code != 0 {
		t.Fatalf("delete: exit %d, %s", code, stderr)
	}
	if stdout, stderr, code := member("sandbox", "create", "--no-wait", "--disk-mib", "8192"); code != 0 {
		t.Fatalf("create after the delete: exit %d\n%s\n%s", code, stdout, stderr)
	}
	// The default disk (10240 MiB) is above the quota's 8192 anyway.
	if _, stderr, code := member("sandbox", "create", "--no-wait"); code != 1 || !strings.Contains(stderr, "quota_exceeded") {
		t.Fatalf("create at the quota: exit %d, %s", code, stderr)
	}
	// --clear lifts every limit.
	if _, stderr, code := s.cli(ctx, "admin", "project", "quota", prj.ID, "--clear"); code != 0 {
		t.Fatalf("clear: exit %d, %s", code, stderr)
	}
	if stdout, stderr, code := member("sandbox", "create", "--no-wait"); code != 0 {
		t.Fatalf("create after --clear: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

func waitDeleted(ctx context.Context, t *testing.T, c *client.Client, id model.SandboxID) {
	t.Helper()
	for {
		sb, err := c.GetSandbox(ctx, id)
		if err == nil && sb.State == string(model.StateDeleted) {
			return
		}
		select {
		case <-ctx.Done():
			t.Errorf("sandbox %s was not deleted (last: %+v, %v)", id, sb, err)
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func squash(s string) string {
	for strings.Contains(s, "  ") {
		s = strings.ReplaceAll(s, "  ", " ")
	}
	return s
}
