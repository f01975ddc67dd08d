package integration

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// TestFileMetadataAndOwnedMkdir: on every execution environment this
// machine has, a file's metadata (its user.e2b.* extended attributes) is
// set and read back through the API and cleared by an overwrite, file info
// names the owner's IDs, and a mkdir with an owner creates directories
// under "/" (only root may write there) that belong to the owner, leaving
// no staging directory.
func TestFileMetadataAndOwnedMkdir(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runsc")
	bins := build(t)
	// runc and crun cannot share a server (their user namespace ranges);
	// QEMU where this machine (or CI) has it.
	groups := [][]string{{"runsc"}}
	if _, err := exec.LookPath("runc"); err == nil {
		groups[0] = append(groups[0], "runc")
	}
	if _, err := exec.LookPath("crun"); err == nil {
		groups = append(groups, []string{"crun"})
	}
	if qemuAvailable() {
		groups = append(groups, []string{"qemu"})
	}
	for _, envs := range groups {
		var args []string
		if envs[0] == "qemu" {
			args = qemuServerArgs(t)
		} else {
			for _, e := range envs {
				args = append(args, "--env", e)
			}
		}
		s := newServer(t, bins, serverConfig{extraArgs: args})
		s.start()
		for _, env := range envs {
			fileMetadataOn(t, s, env)
		}
		s.stop()
	}
}

// qemuAvailable is requireQEMU as a question: CI, which installs QEMU,
// fails without it.
func qemuAvailable() bool {
	for _, b := range []string{"qemu-system-x86_64", "qemu-img", "mkfs.ext4", "apt-get"} {
		if _, err := exec.LookPath(b); err != nil {
			return false
		}
	}
	return true
}

func fileMetadataOn(t *testing.T, s *server, env string) {
	c := s.client()
	t.Run(env, func(t *testing.T) {
		ctx := ctxFor(t, 4*time.Minute)
		sb := model.SandboxID(createSandbox(ctx, t, c, apiv1.CreateSandboxRequest{Environment: env}).ID)
		defer func() {
			if _, err := c.DeleteSandbox(ctx, sb); err != nil {
				t.Errorf("delete %s: %v", sb, err)
			}
		}()
		sh := func(script string) string {
			t.Helper()
			res := execReq(ctx, t, c, sb, apiv1.CreateCommandRequest{Args: []string{"sh", "-c", script}})
			if res.exitCode != 0 {
				t.Fatalf("%q: exit %d, stderr %q", script, res.exitCode, res.stderr)
			}
			return strings.TrimSpace(res.stdout)
		}
		if _, err := c.Upload(ctx, sb, "/tmp/m.txt", -1, strings.NewReader("x")); err != nil {
			t.Fatal(err)
		}
		fi, err := c.SetFileMetadata(ctx, sb, "/tmp/m.txt", map[string]string{"Author": "mish", "purpose": "upload"})
		if err != nil {
			t.Fatalf("set metadata: %v", err)
		}
		if fi.Metadata["author"] != "mish" || fi.Metadata["purpose"] != "upload" || len(fi.Metadata) != 2 || fi.UID != 0 {
			t.Fatalf("set metadata → %+v", fi)
		}
		if fi, err = c.StatFile(ctx, sb, "/tmp/m.txt"); err != nil || fi.Metadata["author"] != "mish" {
			t.Fatalf("stat: %+v, %v", fi, err)
		}
		if _, err := c.Upload(ctx, sb, "/tmp/m.txt", -1, strings.NewReader("y")); err != nil {
			t.Fatal(err)
		}
		if fi, err = c.StatFile(ctx, sb, "/tmp/m.txt"); err != nil || fi.Metadata != nil {
			t.Fatalf("after an overwrite: %+v, %v", fi, err)
		}
		if _, err := c.SetFileMetadata(ctx, sb, "/tmp/m.txt", map[string]string{"bad key": "v"}); err == nil {
			t.Fatal("a bad key was accepted")
		}

		fi, err = c.MkdirOwned(ctx, sb, "/owned/sub", apiv1.User{UID: 1000, GID: 1000})
		if err != nil {
			t.Fatalf("mkdir with an owner: %v", err)
		}
		if fi.UID != 1000 || fi.GID != 1000 || fi.Mode != 0o755 {
			t.Fatalf("mkdir with an owner → %+v", fi)
		}
		if got := sh("stat -c %u:%g:%a /owned /owned/sub; ls -a / | grep -c airlock-mkdir || true"); got != "1000:1000:755\n1000:1000:755\n0" {
			t.Fatalf("in the sandbox: %q", got)
		}
	})
}
