package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/rootfs"
)

// TestVolumesThroughCLI (runc, crun, runsc): a volume made with `airlock volume create` is
// written through the content API (`volume put`, before any sandbox) and
// read and written by the content API and a sandbox that mounts it at
// once (`volume cat`, `ls`, `rm`); it is written by one sandbox (as root and as an unprivileged user), outlives
// it, survives a suspend and wake and a crash of the server, and is read
// by the next sandbox that mounts it; it is bounded by its size (ENOSPC
// inside, the image no larger outside); it cannot be deleted while a
// sandbox mounts it, and once deleted no mount, loop device or file of it
// is left.
func TestVolumesThroughCLI(t *testing.T) {
	airtest.RequireRoot(t)
	for _, rt := range []string{"runc", "crun", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			airtest.RequireBinary(t, rt)
			sandboxDir := shortTempDir(t)
			s := newServer(t, build(t), serverConfig{runtime: rt, extraArgs: []string{"--sandbox-dir", sandboxDir}})
			s.start()
			ctx := ctxFor(t, 5*time.Minute)
			cli := func(args ...string) string {
				t.Helper()
				stdout, stderr, code := s.cli(ctx, args...)
				if code != 0 {
					t.Fatalf("airlock %s: exit %d\n%s\n%s", strings.Join(args, " "), code, stdout, stderr)
				}
				return stdout
			}
			create := func(args ...string) apiv1.Sandbox {
				t.Helper()
				var out apiv1.SandboxWithOperation
				if err := json.Unmarshal([]byte(cli(append([]string{"-o", "json", "sandbox", "create"}, args...)...)), &out); err != nil {
					t.Fatal(err)
				}
				return out.Sandbox
			}
			exec := func(id string, args ...string) string {
				t.Helper()
				return strings.TrimSpace(cli(append([]string{"exec", id, "--"}, args...)...))
			}

			var vol apiv1.Volume
			if err := json.Unmarshal([]byte(cli("-o", "json", "volume", "create", "data", "--size-mib", "32")), &vol); err != nil {
				t.Fatal(err)
			}
			// The content API writes it before any sandbox mounts it
			// (which binds it to this node and mounts it on the host).
			local := filepath.Join(t.TempDir(), "in.txt")
			if err := os.WriteFile(local, []byte("from-the-api\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			cli("volume", "put", "data:/api/in.txt", local, "--uid", "1000", "--gid", "1000")
			first := create("--volume", "data:/data")
			if len(first.VolumeMounts) != 1 || first.VolumeMounts[0].Volume != vol.ID {
				t.Fatalf("sandbox mounts %+v, want %s", first.VolumeMounts, vol.ID)
			}
			if got := exec(first.ID, "sh", "-c", "cat /data/api/in.txt && stat -c %u:%g /data/api/in.txt"); got != "from-the-api\n1000:1000" {
				t.Fatalf("the sandbox reads what the content API wrote: %q", got)
			}
			exec(first.ID, "sh", "-c", "echo from-root > /data/root.txt && mkdir -p /data/dir")
			// And the content API reads what the sandbox wrote, while it
			// mounts the volume.
			if got := cli("volume", "cat", "data:/root.txt"); got != "from-root\n" {
				t.Fatalf("volume cat = %q", got)
			}
			var l apiv1.VolumeFileList
			if err := json.Unmarshal([]byte(cli("-o", "json", "volume", "ls", "data", "--depth", "2")), &l); err != nil {
				t.Fatal(err)
			}
			var paths []string
			for _, e := range l.Entries {
				paths = append(paths, e.Path)
			}
			if !strings.Contains(strings.Join(paths, " "), "/api/in.txt") || !strings.Contains(strings.Join(paths, " "), "/root.txt") {
				t.Fatalf("volume ls = %v", paths)
			}
			cli("volume", "rm", "-r", "data:/api")
			if got := exec(first.ID, "sh", "-c", "test -e /data/api && echo left || echo gone"); got != "gone" {
				t.Fatalf("after volume rm: %s", got)
			}
			// An unprivileged guest user may write the volume's root too.
			cli("exec", "-u", "1000:1000", first.ID, "--", "sh", "-c", "echo from-user > /data/user.txt")
			if got := exec(first.ID, "stat", "-c", "%u:%g", "/data/root.txt", "/data/user.txt"); got != "0:0\n1000:1000" {
				t.Fatalf("owners inside = %q, want 0:0 and 1000:1000", got)
			}

			// The volume cannot go while the sandbox mounts it.
			_, stderr, code := s.cli(ctx, "volume", "delete", "data")
			if code == 0 || !strings.Contains(stderr, "volume_in_use") {
				t.Fatalf("volume delete while mounted: exit %d, %s; want volume_in_use", code, stderr)
			}

			// Suspend and wake keep the mount.
			cli("sandbox", "suspend", first.ID)
			cli("sandbox", "wake", first.ID)
			if got := exec(first.ID, "cat", "/data/root.txt"); got != "from-root" {
				t.Fatalf("after suspend and wake: %q", got)
			}
			// So does a crash of the server: the sandbox is adopted.
			s.kill()
			s.start()
			if got := exec(first.ID, "cat", "/data/user.txt"); got != "from-user" {
				t.Fatalf("after a server crash: %q", got)
			}
			cli("sandbox", "delete", first.ID)

			// The next sandbox (another user namespace under runc) sees
			// the same files, with the same owners, by the volume's ID.
			second := create("--volume", vol.ID+":/mnt/vol")
			if got := exec(second.ID, "cat", "/mnt/vol/root.txt", "/mnt/vol/user.txt"); got != "from-root\nfrom-user" {
				t.Fatalf("second sandbox reads %q", got)
			}
			if got := exec(second.ID, "stat", "-c", "%u:%g", "/mnt/vol/user.txt"); got != "1000:1000" {
				t.Fatalf("owner in the second sandbox = %q", got)
			}

			// The size is a hard limit: ENOSPC inside, no growth outside.
			_, stderr, code = s.cli(ctx, "exec", second.ID, "--", "dd", "if=/dev/zero", "of=/mnt/vol/big", "bs=1M", "count=64")
			if code == 0 || !strings.Contains(stderr, "No space left on device") {
				t.Fatalf("dd of 64 MiB into a 32 MiB volume: exit %d, %q; want ENOSPC", code, stderr)
			}
			image := filepath.Join(sandboxDir, "volumes", vol.ID, "disk.img")
			var st syscall.Stat_t
			if err := syscall.Stat(image, &st); err != nil {
				t.Fatal(err)
			}
			if st.Size > 32<<20 || st.Blocks*512 > 32<<20 {
				t.Fatalf("the volume's image is %d bytes, %d allocated: more than its 32 MiB", st.Size, st.Blocks*512)
			}
			var got apiv1.Volume
			if err := json.Unmarshal([]byte(cli("-o", "json", "volume", "get", "data")), &got); err != nil {
				t.Fatal(err)
			}
			if len(got.MountedBy) != 1 || got.MountedBy[0] != second.ID || got.NodeID == "" {
				t.Fatalf("volume get = %+v, want mounted by %s on a node", got, second.ID)
			}
			exec(second.ID, "rm", "/mnt/vol/big")
			cli("sandbox", "delete", second.ID)
			s.waitState(ctx, model.SandboxID(second.ID), model.StateDeleted)

			cli("volume", "delete", "data")
			if _, err := os.Stat(filepath.Join(sandboxDir, "volumes", vol.ID)); !os.IsNotExist(err) {
				t.Errorf("the volume's directory after delete: %v", err)
			}
			lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if devs, err := rootfs.LoopsReleased(lctx, sandboxDir); err != nil {
				t.Errorf("loop devices left: %+v (%v)", devs, err)
			}
			if mounts, err := rootfs.MountsUnder(sandboxDir); err != nil || len(mounts) > 0 {
				for _, m := range mounts {
					if !strings.Contains(m, ".agentfs") {
						t.Errorf("mount left: %s", m)
					}
				}
			}
		})
	}
}
