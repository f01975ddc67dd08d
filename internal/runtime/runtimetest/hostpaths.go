package runtimetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/egress/sandboxnet"
	"github.com/airlockdev/airlock/internal/rootfs/mountinfo"
	"github.com/airlockdev/airlock/internal/runtime"
)

// testHostPathsHidden reads the guest's views of its mounts and of its
// agent's descriptors — /proc/self/mountinfo, `mount`, /proc/1/mountinfo,
// `ls -l /proc/1/fd` and /proc/cmdline — in a sandbox with a network made
// as a server makes it (its own netns, resolv.conf and the CA files), with
// and without a disk limit (the sandbox's filesystem differs), and checks
// that the guest sees nothing of the host's filesystems:
//
//   - no view names a host path of the sandbox: its state directory, the
//     runtime's state root, the template, the agent binary, the network
//     namespace's file, nor a mount root with the sandbox's ID as a
//     directory (the state directory seen from a filesystem mounted
//     elsewhere on the host);
//   - no guest mount is on a host block device that holds those paths (a
//     bind mount from the host's disk shows its path inside that disk,
//     whatever the disk's mount point); not checked in a VM, whose device
//     numbers are its own kernel's;
//   - statfs of every file the guest has bind-mounted (resolv.conf, the CA
//     files, the agent binary, ...) shows none of those host filesystems'
//     sizes (`df /etc/resolv.conf` showing the host's disk). gVisor
//     forwards statfs of a bind mount to the host file, so this holds it
//     too.
func testHostPathsHidden(t *testing.T, s *suite, newRuntime newRuntimeFunc) {
	for _, disk := range []int64{0, 64 << 20} {
		t.Run("DiskBytes="+strconv.FormatInt(disk, 10), func(t *testing.T) {
			t.Parallel()
			s.slots.acquire(t, 1)
			rt := newRuntime(t)
			if !rt.Info().Capabilities.Has(runtime.CapNetwork) {
				t.Skipf("%s does not claim %s", rt.Info().Name, runtime.CapNetwork)
			}
			res := defaultResources
			res.DiskBytes = disk
			spec := s.spec(res, nil)
			netnsPath := attachNetwork(t, &spec).NetnsPath
			s.started(t, rt, spec)
			c := client(t, rt, spec.ID)
			a := inspector(t, rt).Artifacts(spec.ID)
			hostPaths := []string{a.StateDir, filepath.Dir(a.StateDir), s.template, s.agent, filepath.Dir(s.agent), netnsPath, filepath.Dir(netnsPath)}
			// The agent opens and closes descriptors (the pipes of the very
			// command that lists them) while ls reads them: ls then fails on
			// those that vanished, after listing the others.
			for _, view := range []string{"cat /proc/self/mountinfo", "mount", "cat /proc/1/mountinfo", "ls -l /proc/1/fd/ 2>/dev/null || true", "cat /proc/cmdline"} {
				out := sh(t, c, view)
				for _, p := range hostPaths {
					if strings.Contains(out, p) {
						t.Errorf("%s inside the sandbox shows the host path %s:\n%s", view, p, out)
					}
				}
			}

			host := hostFilesystems(t, hostPaths)
			guest, err := mountinfo.Parse(strings.NewReader(sh(t, c, "cat /proc/self/mountinfo")))
			if err != nil {
				t.Fatalf("the guest's mountinfo: %v", err)
			}
			idDir := "/" + spec.ID.String() + "/"
			for _, m := range guest {
				if strings.Contains(m.Root+"/", idDir) {
					t.Errorf("the guest's mount at %s has the root %s (a path of the sandbox's state directory) on %s %s", m.MountPoint, m.Root, m.FSType, m.Source)
				}
				if isVM(rt) {
					continue
				}
				if fs, ok := host.byDev[[2]int{m.Major, m.Minor}]; ok {
					t.Errorf("the guest's mount at %s (root %s) is on the host filesystem of %s (device %d:%d)", m.MountPoint, m.Root, fs, m.Major, m.Minor)
				}
			}

			// statfs of each file the guest has mounted, and of the network
			// files wherever they are: busybox stat -f's %b (total blocks)
			// and %S (their size).
			candidates := []string{"/etc/resolv.conf", runtime.GuestCACert, runtime.GuestCABundle}
			for _, m := range guest {
				if !slices.Contains(candidates, m.MountPoint) {
					candidates = append(candidates, m.MountPoint)
				}
			}
			script := "for p in " + strings.Join(candidates, " ") + `; do if [ -f "$p" ]; then echo "$p $(stat -f -c '%b %S %T' "$p")"; fi; done`
			seen := map[string]bool{}
			for _, line := range lines(sh(t, c, script)) {
				f := strings.Fields(line)
				if len(f) < 3 {
					t.Fatalf("stat -f: %q", line)
				}
				blocks, err1 := strconv.ParseInt(f[1], 10, 64)
				bsize, err2 := strconv.ParseInt(f[2], 10, 64)
				if err1 != nil || err2 != nil {
					t.Fatalf("stat -f: %q", line)
				}
				seen[f[0]] = true
				if fs, ok := host.bySize[blocks*bsize]; ok && blocks > 0 {
					t.Errorf("statfs of %s inside the sandbox shows the size of the host filesystem of %s (%d bytes): %q", f[0], fs, blocks*bsize, line)
				}
			}
			for _, p := range candidates[:3] {
				if !seen[p] {
					t.Errorf("the sandbox's network file %s is missing", p)
				}
			}
			if !isVM(rt) {
				mounted := false
				for _, m := range guest {
					mounted = mounted || m.MountPoint == "/etc/resolv.conf"
				}
				if !mounted {
					t.Errorf("/etc/resolv.conf is not a mount in the guest's mount table: the check above saw no bind mount of it")
				}
			}
		})
	}
}

// hostFS are the host filesystems that hold the given host paths, by device
// number (block devices only: anonymous device numbers are per kernel, and
// gVisor has its own) and by size in bytes.
type hostFS struct {
	byDev  map[[2]int]string
	bySize map[int64]string
}

func hostFilesystems(t *testing.T, paths []string) hostFS {
	t.Helper()
	h := hostFS{byDev: map[[2]int]string{}, bySize: map[int64]string{}}
	for _, p := range append(paths, "/") {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatalf("stat %s: %v", p, err)
		}
		if maj := int(unix.Major(st.Dev)); maj != 0 {
			h.byDev[[2]int{maj, int(unix.Minor(st.Dev))}] = p
		}
		var fs unix.Statfs_t
		if err := unix.Statfs(p, &fs); err != nil {
			t.Fatalf("statfs %s: %v", p, err)
		}
		frsize := fs.Frsize
		if frsize == 0 {
			frsize = fs.Bsize
		}
		if size := int64(fs.Blocks) * frsize; size > 0 {
			h.bySize[size] = p
		}
	}
	return h
}

// attachNetwork gives spec a network as a server does (a netns of its own
// from a test pool, with resolv.conf naming the gateway and the deployment
// CA) and returns its attachment. The network is detached when
// the test ends, after the sandbox's Delete (cleanups run last-in
// first-out), and nothing of it may remain.
func attachNetwork(t *testing.T, spec *runtime.Spec) sandboxnet.Attachment {
	t.Helper()
	pool, _ := testPool(t)
	att, err := pool.Attach(ctxFor(t), spec.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pool.Detach(context.Background(), spec.ID); err != nil {
			t.Errorf("Detach: %v", err)
		}
		assertNoNetwork(t, att)
	})
	gw := att.HostAddr.Addr()
	spec.Network = &runtime.Network{NetnsPath: att.NetnsPath, GuestAddr: att.GuestAddr, Gateway: gw, DNS: gw, CACertPEM: []byte(testCACert)}
	if _, err := os.Stat(att.NetnsPath); err != nil {
		t.Fatal(fmt.Errorf("the network's netns file: %w", err))
	}
	return att
}
