package integration

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// TestFileUser: file operations as a sandbox user. The agent (root
// without CAP_DAC_OVERRIDE/CAP_CHOWN in a sandbox) cannot write into a
// user's 0700 directory; as the user, the API can, and what it creates
// belongs to the user.
func TestFileUser(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runc")
	s := newServer(t, build(t), serverConfig{runtime: "runc"})
	s.start()
	ctx := ctxFor(t, 3*time.Minute)
	c := s.client()
	sb := model.SandboxID(createSandbox(ctx, t, c, apiv1.CreateSandboxRequest{}).ID)
	user := &apiv1.User{UID: 1000, GID: 1000}
	as := client.AsUser(user)
	sh := func(u *apiv1.User, script string) string {
		t.Helper()
		res := execReq(ctx, t, c, sb, apiv1.CreateCommandRequest{Args: []string{"sh", "-c", script}, User: u})
		if res.exitCode != 0 {
			t.Fatalf("%q: exit %d, stderr %q", script, res.exitCode, res.stderr)
		}
		return strings.TrimSpace(res.stdout)
	}
	wantDenied := func(what string, err error) {
		t.Helper()
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusForbidden || ae.Code != apiv1.CodePermissionDenied {
			t.Fatalf("%s: err = %v, want 403 %s", what, err, apiv1.CodePermissionDenied)
		}
	}

	if _, err := c.Mkdir(ctx, sb, "/tmp/h", as); err != nil {
		t.Fatalf("mkdir as 1000: %v", err)
	}
	if got := sh(nil, "stat -c %u:%g /tmp/h"); got != "1000:1000" {
		t.Fatalf("/tmp/h is owned by %s, want 1000:1000", got)
	}
	sh(user, "chmod 0700 /tmp/h")

	fi, err := c.Upload(ctx, sb, "/tmp/h/a.txt", -1, strings.NewReader("hello\n"), as)
	if err != nil {
		t.Fatalf("upload as 1000: %v", err)
	}
	if fi.Size != 6 {
		t.Fatalf("upload → %+v", fi)
	}
	if got := sh(user, "stat -c %u:%g /tmp/h/a.txt; cat /tmp/h/a.txt"); got != "1000:1000\nhello" {
		t.Fatalf("as 1000: %q, want the file owned by 1000:1000 with its content", got)
	}
	body, _, err := c.Download(ctx, sb, "/tmp/h/a.txt", as)
	if err != nil {
		t.Fatalf("download as 1000: %v", err)
	}
	data, err := io.ReadAll(body)
	body.Close()
	if err != nil || string(data) != "hello\n" {
		t.Fatalf("download as 1000: %q, %v", data, err)
	}
	if l, err := c.ListFiles(ctx, sb, "/tmp/h", as); err != nil || len(l.Entries) != 1 {
		t.Fatalf("list as 1000: %+v, %v", l, err)
	}

	// The agent itself (root without CAP_DAC_OVERRIDE) and another user
	// are refused by the sandbox kernel.
	_, err = c.Upload(ctx, sb, "/tmp/h/b.txt", -1, strings.NewReader("x"))
	wantDenied("upload as the agent", err)
	_, err = c.Upload(ctx, sb, "/tmp/h/b.txt", -1, strings.NewReader("x"), client.AsUser(&apiv1.User{UID: 1001, GID: 1001}))
	wantDenied("upload as 1001", err)
	_, err = c.StatFile(ctx, sb, "/tmp/h/a.txt", client.AsUser(&apiv1.User{UID: 1001, GID: 1001}))
	wantDenied("stat as 1001", err)

	// Move and remove as the user.
	if _, err := c.MoveFile(ctx, sb, apiv1.MoveRequest{From: "/tmp/h/a.txt", To: "/tmp/h/c.txt"}, as); err != nil {
		t.Fatalf("move as 1000: %v", err)
	}
	if err := c.RemoveFile(ctx, sb, "/tmp/h", true, as); err != nil {
		t.Fatalf("remove as 1000: %v", err)
	}
	if got := sh(nil, "test -e /tmp/h && echo there || echo gone"); got != "gone" {
		t.Fatalf("/tmp/h: %s", got)
	}
}
