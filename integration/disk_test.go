package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/rootfs"
)

// TestDiskLimitThroughCLI plays a tenant that fills its disk: a sandbox
// created with `--disk-mib 256` (its storage under --sandbox-dir, apart
// from the data dir) tries to write 512 MiB. The guest gets ENOSPC, the
// host holds at most the limit for it, the sandbox keeps answering, `df /`
// inside shows its own size, and after delete nothing of it is left.
func TestDiskLimitThroughCLI(t *testing.T) {
	airtest.RequireRoot(t)
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			airtest.RequireBinary(t, rt)
			sandboxDir := shortTempDir(t)
			s := newServer(t, build(t), serverConfig{runtime: rt, extraArgs: []string{"--sandbox-dir", sandboxDir}})
			s.start()
			ctx := ctxFor(t, 4*time.Minute)

			stdout, stderr, code := s.cli(ctx, "-o", "json", "sandbox", "create", "--disk-mib", "256")
			var created apiv1.SandboxWithOperation
			if code != 0 || json.Unmarshal([]byte(stdout), &created) != nil {
				t.Fatalf("sandbox create --disk-mib 256: exit %d\n%s\n%s", code, stdout, stderr)
			}
			sb := created.Sandbox
			if sb.DiskMiB != 256 {
				t.Fatalf("disk_mib = %d, want 256", sb.DiskMiB)
			}
			id := model.SandboxID(sb.ID)
			s.waitState(ctx, id, model.StateRunning)

			_, stderr, code = s.cli(ctx, "exec", sb.ID, "--", "dd", "if=/dev/zero", "of=/big", "bs=1M", "count=512")
			if code == 0 || !strings.Contains(stderr, "No space left on device") {
				t.Fatalf("dd of 512 MiB into a 256 MiB sandbox: exit %d, stderr %q; want ENOSPC", code, stderr)
			}

			// The host: the sandbox's image holds at most its limit (plus
			// the agent's files), on the sandbox dir's filesystem.
			images, _ := filepath.Glob(filepath.Join(sandboxDir, rt, sb.ID, "*.img"))
			if len(images) != 1 {
				t.Fatalf("want one disk image under %s, found %q", filepath.Join(sandboxDir, rt, sb.ID), images)
			}
			var st syscall.Stat_t
			if err := syscall.Stat(images[0], &st); err != nil {
				t.Fatal(err)
			}
			if used := st.Blocks * 512; used > (256+32)<<20 {
				t.Errorf("the host holds %d MiB for a 256 MiB sandbox", used>>20)
			}

			// The guest: still answering, and df shows its own size.
			stdout, stderr, code = s.cli(ctx, "exec", sb.ID, "--", "df", "-m", "/")
			if code != 0 {
				t.Fatalf("df after the full disk: exit %d\n%s", code, stderr)
			}
			fields := strings.Fields(lastLine(stdout))
			if len(fields) < 2 {
				t.Fatalf("df output: %q", stdout)
			}
			if size, err := strconv.Atoi(fields[1]); err != nil || size < 200 || size > 300 {
				t.Errorf("df / inside shows %s MiB, want ≈256:\n%s", fields[1], stdout)
			}

			if _, stderr, code = s.cli(ctx, "sandbox", "delete", sb.ID); code != 0 {
				t.Fatalf("delete: exit %d\n%s", code, stderr)
			}
			entries, _ := os.ReadDir(filepath.Join(sandboxDir, rt))
			for _, e := range entries {
				if e.Name() != ".agentfs" { // the runtime's shared agent filesystem stays
					t.Errorf("left in the sandbox dir after delete: %s", e.Name())
				}
			}
			lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if devs, err := rootfs.LoopsReleased(lctx, sandboxDir); err != nil {
				t.Errorf("loop devices left after delete: %+v (%v)", devs, err)
			}
		})
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
