package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// TestTemplateTagDeleteGC: import and tag a template, use it in a sandbox;
// deletes are refused while the sandbox lives and allowed after, and the
// tree leaves the disk; an untagged template is collected by `template gc`.
func TestTemplateTagDeleteGC(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runc")
	src := busyboxTree(t, "gc test\n")
	s := newServer(t, build(t), serverConfig{runtime: "runc", extraArgs: []string{"--template-gc-interval", "0"}})
	s.start()
	ctx := ctxFor(t, 3*time.Minute)
	cli := func(args ...string) string {
		t.Helper()
		stdout, stderr, code := s.cli(ctx, append([]string{"-o", "json"}, args...)...)
		if code != 0 {
			t.Fatalf("airlock %s: exit %d\n%s\n%s", strings.Join(args, " "), code, stdout, stderr)
		}
		return stdout
	}
	refused := func(want string, args ...string) string {
		t.Helper()
		stdout, stderr, code := s.cli(ctx, args...)
		if code == 0 || !strings.Contains(stderr, want) {
			t.Fatalf("airlock %s: exit %d, stderr %q; want a failure with %q (%s)", strings.Join(args, " "), code, stderr, want, stdout)
		}
		return stderr
	}
	var tpl apiv1.Template
	decode := func(out string, v any) {
		t.Helper()
		if err := json.Unmarshal([]byte(out), v); err != nil {
			t.Fatalf("%v: %q", err, out)
		}
	}
	decode(cli("template", "import", src, "--name", "gctest:v1"), &tpl)
	digest := tpl.Digest
	tree := filepath.Join(s.dataDir, "templates", "blobs", "sha256-"+strings.TrimPrefix(digest, "sha256:"))
	if _, err := os.Stat(tree); err != nil {
		t.Fatalf("imported tree: %v", err)
	}
	decode(cli("template", "tag", "gctest:v1", "gctest:stable"), &tpl)
	if tpl.Digest != digest || !reflect.DeepEqual(tpl.Names, []string{"gctest:stable", "gctest:v1"}) {
		t.Fatalf("template tag: %+v", tpl)
	}

	sb := createSandbox(ctx, t, s.client(), apiv1.CreateSandboxRequest{Template: "gctest:stable"})
	if r := execIn(ctx, t, s.client(), model.SandboxID(sb.ID), "cat", "/srv/greeting"); r.stdout != "gc test\n" {
		t.Fatalf("exec: %+v", r)
	}
	refused("template_not_found", "template", "inspect", "gctest") // gctest:latest does not exist
	decode(cli("template", "inspect", "gctest:v1"), &tpl)
	if tpl.InUse == nil || *tpl.InUse != 1 || tpl.Config == nil {
		t.Fatalf("inspect: %+v", tpl)
	}
	if msg := refused("template_in_use", "template", "rm", digest); !strings.Contains(msg, sb.ID) {
		t.Fatalf("in use error does not name the sandbox: %q", msg)
	}
	refused("template_in_use", "template", "rm", "gctest:stable")
	cli("template", "gc")
	if _, err := os.Stat(tree); err != nil {
		t.Fatalf("gc removed a template in use: %v", err)
	}

	if _, stderr, code := s.cli(ctx, "sandbox", "delete", sb.ID); code != 0 {
		t.Fatalf("sandbox delete: exit %d %s", code, stderr)
	}
	var del apiv1.TemplateDeleted
	decode(cli("template", "rm", "gctest:stable"), &del)
	if del.Deleted || !reflect.DeepEqual(del.RemovedTags, []string{"gctest:stable"}) {
		t.Fatalf("rm tag: %+v", del)
	}
	decode(cli("template", "rm", digest), &del)
	if !del.Deleted || !reflect.DeepEqual(del.RemovedTags, []string{"gctest:v1"}) {
		t.Fatalf("rm digest: %+v", del)
	}
	if _, err := os.Stat(tree); !os.IsNotExist(err) {
		t.Fatalf("deleted template's tree: %v", err)
	}
	refused("template_not_found", "sandbox", "create", "--template", digest)

	// Imported again without a tag: the collector takes it, tree and all.
	var again apiv1.Build
	decode(cli("template", "import", src), &again)
	if again.State != "succeeded" || again.Digest != digest || again.Name != "" {
		t.Fatalf("re-import: %+v", again)
	}
	var gc apiv1.TemplateGCResult
	decode(cli("template", "gc"), &gc)
	if !reflect.DeepEqual(gc.Collected, []string{digest}) || !reflect.DeepEqual(gc.TreesRemoved, []string{digest}) {
		t.Fatalf("gc: %+v", gc)
	}
	if _, err := os.Stat(tree); !os.IsNotExist(err) {
		t.Fatalf("collected template's tree: %v", err)
	}
	var list apiv1.TemplateList
	decode(cli("template", "list"), &list)
	for _, l := range list.Templates {
		if l.Digest == digest {
			t.Fatalf("collected template still listed: %+v", list)
		}
	}
}
