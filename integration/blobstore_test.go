package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// busyboxTree is airtest.BusyboxRootfs plus /srv/greeting, which carries a
// user xattr, and the agent's mount points.
func busyboxTree(t *testing.T, greeting string) string {
	t.Helper()
	dir := airtest.BusyboxRootfs(t)
	for _, d := range []string{".airlock/bin", ".airlock/run", "srv"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(dir, "srv/greeting")
	if err := os.WriteFile(p, []byte(greeting), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(p, "user.origin", []byte("node-a"), 0); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestTemplateThroughBlobStore: server A imports a template and pushes it
// to a file:// blob store; server B, with a data dir and database of its
// own and the same blob store, imports it by digest and runs a sandbox from
// it. Then B loses its local copy (as a node sharing A's database would
// never have had one), and creating a sandbox pulls it again.
func TestTemplateThroughBlobStore(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runc")
	bins := build(t)
	blobs := "file://" + shortTempDir(t)
	ctx := ctxFor(t, 5*time.Minute)

	a := newServer(t, bins, serverConfig{runtime: "runc", extraArgs: []string{"--blob-store", blobs}})
	a.start()
	tpl := importAndWait(ctx, t, a.client(), apiv1.ImportTemplateRequest{Source: busyboxTree(t, "hello from node A\n")})
	if tpl.State != "succeeded" {
		t.Fatalf("import on A: %+v", tpl)
	}
	digest := model.TemplateDigest(tpl.Digest)
	a.stop() // B must not need A

	b := newServer(t, bins, serverConfig{runtime: "runc", extraArgs: []string{
		"--blob-store", blobs, "--userns-base", "1342177280"}})
	b.start()
	cb := b.client()
	// Creating from a digest B's database does not know is refused.
	if _, err := cb.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: tpl.Digest}); err == nil {
		t.Fatal("create from a template B never imported succeeded")
	}
	missing := "sha256:" + strings.Repeat("0", 64)
	if failed := importAndWait(ctx, t, cb, apiv1.ImportTemplateRequest{Source: missing}); failed.State != "failed" ||
		failed.Error == nil || failed.Error.Code != apiv1.CodeTemplateNotFound {
		t.Fatalf("import of a digest the blob store lacks: %+v, want it failed with %s", failed, apiv1.CodeTemplateNotFound)
	}
	got := importAndWait(ctx, t, cb, apiv1.ImportTemplateRequest{Source: tpl.Digest, Name: "pulled"})
	if got.State != "succeeded" || got.Digest != tpl.Digest {
		t.Fatalf("pulled template %+v, pushed %+v", got, tpl)
	}
	run := func(template string) {
		t.Helper()
		cb := b.client() // the URL changes on restart
		sb := createSandbox(ctx, t, cb, apiv1.CreateSandboxRequest{Template: template})
		res := execIn(ctx, t, cb, model.SandboxID(sb.ID), "cat", "/srv/greeting")
		if res.exitCode != 0 || res.stdout != "hello from node A\n" {
			t.Fatalf("cat /srv/greeting: exit %d, stdout %q, stderr %q", res.exitCode, res.stdout, res.stderr)
		}
		if _, err := cb.DeleteSandbox(ctx, model.SandboxID(sb.ID)); err != nil {
			t.Fatal(err)
		}
		b.waitState(ctx, model.SandboxID(sb.ID), model.StateDeleted)
	}
	run("pulled")
	// The extended attribute travelled with the tree.
	if v, err := xattrOf(filepath.Join(b.dataDir, "templates", "blobs", "sha256-"+digest.Hex(), "rootfs", "srv", "greeting"), "user.origin"); err != nil || v != "node-a" {
		t.Errorf("user.origin on B: %q, %v", v, err)
	}

	// B loses its copy of the tree; the worker pulls it on create.
	b.stop()
	if err := os.RemoveAll(filepath.Join(b.dataDir, "templates", "blobs", "sha256-"+digest.Hex())); err != nil {
		t.Fatal(err)
	}
	b.start()
	run(tpl.Digest)
	if !strings.Contains(b.log.String(), "template pulled") {
		t.Error("B's log does not say it pulled the template")
	}
}

// importAndWait starts an import (POST /v1/templates) and follows its build
// to the end.
func importAndWait(ctx context.Context, t *testing.T, c *client.Client, req apiv1.ImportTemplateRequest) apiv1.Build {
	t.Helper()
	b, err := c.ImportTemplate(ctx, req)
	if err != nil {
		t.Fatalf("import %s: %v", req.Source, err)
	}
	done, err := c.FollowBuild(ctx, model.BuildID(b.ID), true, func(client.BuildEvent) error { return nil })
	if err != nil {
		t.Fatalf("follow build %s: %v", b.ID, err)
	}
	return done
}

func xattrOf(path, name string) (string, error) {
	buf := make([]byte, 256)
	n, err := unix.Getxattr(path, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}
