package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store/sqlite"
	"github.com/airlockdev/airlock/internal/template"
)

// TestTemplateConfigDefaults: a template imported from an OCI image (the
// busybox default template's tree plus its own /etc/passwd, /etc/group and
// /work) runs its sandboxes' commands with the image's Env, WorkingDir and
// User; the sandbox's env and the command's own env, cwd and user win.
func TestTemplateConfigDefaults(t *testing.T) {
	airtest.RequireRoot(t)
	bins := build(t)
	for _, rt := range runtimes() {
		t.Run(rt, func(t *testing.T) {
			airtest.RequireBinary(t, rt)
			testTemplateConfigDefaults(t, newServer(t, bins, serverConfig{runtime: rt}))
		})
	}
}

func testTemplateConfigDefaults(t *testing.T, s *server) {
	s.start() // builds the default template
	s.stop()
	ctx := ctxFor(t, 3*time.Minute)

	cfg := v1.Config{Env: []string{"PATH=/usr/bin:/bin", "A=tpl", "B=tpl", "C=tpl"}, WorkingDir: "/work", User: "app:staff",
		Entrypoint: []string{"/bin/sh"}, Cmd: []string{"-c", "echo from the image cmd; pwd; id -u"}}
	importImageTemplate(ctx, t, s.dataDir, "cfgtpl", cfg)
	cfg.User = "ghost"
	importImageTemplate(ctx, t, s.dataDir, "ghosttpl", cfg)
	s.start()
	c := s.client()

	sb := createSandbox(ctx, t, c, apiv1.CreateSandboxRequest{Template: "cfgtpl", Env: map[string]string{"B": "sb", "C": "sb"}})
	id := model.SandboxID(sb.ID)
	res := execReq(ctx, t, c, id, apiv1.CreateCommandRequest{
		Args: []string{"sh", "-c", `echo "$A $B $C $PATH"; pwd; id -u; id -g`},
		Env:  map[string]string{"C": "cmd"},
	})
	if want := "tpl sb cmd /usr/bin:/bin\n/work\n1234\n50\n"; res.exitCode != 0 || res.stdout != want {
		t.Errorf("command with the template's defaults: exit %d, stdout %q, stderr %q; want %q", res.exitCode, res.stdout, res.stderr, want)
	}
	res = execReq(ctx, t, c, id, apiv1.CreateCommandRequest{
		Args: []string{"sh", "-c", `pwd; id -u; id -g`}, Cwd: "/tmp", User: &apiv1.User{UID: 0, GID: 0},
	})
	if want := "/tmp\n0\n0\n"; res.exitCode != 0 || res.stdout != want {
		t.Errorf("command with its own cwd and user: exit %d, stdout %q, stderr %q; want %q", res.exitCode, res.stdout, res.stderr, want)
	}

	// No args: the image's entrypoint and cmd, in its working dir, as its user.
	res = execReq(ctx, t, c, id, apiv1.CreateCommandRequest{})
	if want := "from the image cmd\n/work\n1234\n"; res.exitCode != 0 || res.stdout != want {
		t.Errorf("command without args: exit %d, stdout %q, stderr %q; want %q", res.exitCode, res.stdout, res.stderr, want)
	}

	// The template's user is not in its /etc/passwd: the sandbox is
	// created, commands without a user are refused, with a user they run.
	sb = createSandbox(ctx, t, c, apiv1.CreateSandboxRequest{Template: "ghosttpl"})
	id = model.SandboxID(sb.ID)
	_, err := c.CreateCommand(ctx, id, apiv1.CreateCommandRequest{Args: []string{"true"}})
	if err == nil || !strings.Contains(err.Error(), apiv1.CodeExecFailed) || !strings.Contains(err.Error(), `"ghost"`) {
		t.Errorf("command as an unknown template user: err %v, want exec_failed naming the user", err)
	}
	res = execReq(ctx, t, c, id, apiv1.CreateCommandRequest{Args: []string{"sh", "-c", "pwd; id -u"}, User: &apiv1.User{UID: 7, GID: 7}})
	if want := "/work\n7\n"; res.exitCode != 0 || res.stdout != want {
		t.Errorf("command with its own user on ghosttpl: exit %d, stdout %q, stderr %q; want %q", res.exitCode, res.stdout, res.stderr, want)
	}
}

// importImageTemplate imports, with the server stopped, an image made of the
// default template's tree with the test's /etc/passwd, /etc/group and /work
// into the server's template store, and records it under name.
func importImageTemplate(ctx context.Context, t *testing.T, dataDir, name string, cfg v1.Config) {
	t.Helper()
	ts, err := template.Open(filepath.Join(dataDir, "templates"), nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(ctx, filepath.Join(dataDir, "airlock.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	def, err := st.ResolveTemplate(ctx, model.RefByName(model.DefaultTemplate))
	if err != nil {
		t.Fatalf("no default template (is a static busybox installed?): %v", err)
	}
	layer := tarTree(t, ts.RootfsDir(def.Digest), map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\napp:x:1234:2345::/work:/bin/sh\n",
		"etc/group":  "root:x:0:\nstaff:x:50:app\n",
	}, "work")
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img := linuxImage(t, cfg, l)
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	ref, err := template.ParseImageRef("oci-layout:" + dir)
	if err != nil {
		t.Fatal(err)
	}
	imp, err := ts.ImportImage(ctx, ref, template.ImageOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := st.PutTemplate(ctx, model.Template{Digest: imp.Digest, SizeBytes: imp.SizeBytes, Manifest: imp.Manifest, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetTemplateName(ctx, model.TaggedName{Name: model.TemplateName(name), Tag: model.DefaultTemplateTag}, imp.Digest, now); err != nil {
		t.Fatal(err)
	}
}

// tarTree archives the tree at root, with replace's contents in place of
// those files and the extra directories (mode 0755) added.
func tarTree(t *testing.T, root string, replace map[string]string, dirs ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name, hdr.Uname, hdr.Gname = rel, "", ""
		if fi.IsDir() {
			hdr.Name += "/"
		}
		content, replaced := replace[rel]
		seen[rel] = true
		var data []byte
		switch {
		case replaced:
			data = []byte(content)
		case fi.Mode().IsRegular():
			if data, err = os.ReadFile(p); err != nil {
				return err
			}
		}
		hdr.Size = int64(len(data))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range replace {
		if seen[name] {
			continue
		}
		hdr := &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(content)), ModTime: time.Unix(0, 0)}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
