package guestboot

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/model"
)

func TestLoadOrder(t *testing.T) {
	deps := map[string][]string{
		"virtio_ring": nil, "virtio": nil, "virtio_mmio": {"virtio", "virtio_ring"},
		"virtio_blk": {"virtio", "virtio_ring"}, "virtio_net": {"net_failover", "virtio", "virtio_ring"},
		"net_failover": {"failover"}, "failover": nil,
	}
	got, err := loadOrder([]string{"virtio_ring", "virtio", "virtio_mmio", "virtio-blk", "virtio_net"}, func(m string) ([]string, error) {
		d, ok := deps[m]
		if !ok {
			return nil, fmt.Errorf("no %s", m)
		}
		return d, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"virtio_ring", "virtio", "virtio_mmio", "virtio_blk", "failover", "net_failover", "virtio_net"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	deps["failover"] = []string{"virtio_net"}
	if _, err := loadOrder([]string{"virtio_net"}, func(m string) ([]string, error) { return deps[m], nil }); err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Fatalf("cycle not found: %v", err)
	}
}

func TestCPIONewc(t *testing.T) {
	var b bytes.Buffer
	c := &cpioWriter{w: &b}
	if err := c.dir("dev"); err != nil {
		t.Fatal(err)
	}
	if err := c.file("init", 0o755, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := c.close(); err != nil {
		t.Fatal(err)
	}
	if b.Len()%4 != 0 {
		t.Fatalf("archive length %d not 4-aligned", b.Len())
	}
	// Cross-check with cpio(1) when present.
	if _, err := exec.LookPath("cpio"); err != nil {
		return
	}
	cmd := exec.Command("cpio", "-t", "-v", "--quiet")
	cmd.Stdin = bytes.NewReader(b.Bytes())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cpio -t: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "init") || !strings.Contains(string(out), "drwxr-xr-x") || !strings.Contains(string(out), " 5 ") {
		t.Fatalf("cpio -t listing:\n%s", out)
	}
}

// cacheDir is where the boot test keeps its downloads between runs:
// AIRLOCK_GUESTBOOT_CACHE, else the user cache directory.
// cacheDir is the test suite's cache of boot inputs ($AIRLOCK_TEST_CACHE,
// default /var/cache/airlock-test, like the other expensive test inputs;
// the builds inside are keyed by their input digests).
func cacheDir(t *testing.T) string {
	if d := os.Getenv("AIRLOCK_GUESTBOOT_CACHE"); d != "" {
		return d
	}
	base, err := airtest.TestCache()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return filepath.Join(t.TempDir(), "guestboot")
	}
	return filepath.Join(base, "guestboot")
}

// skipUnlessCI skips t with msg, except in CI (CI set), which installs
// everything these tests need: there a missing piece fails the test.
func skipUnlessCI(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("CI must run this test: "+format, args...)
	}
	t.Skipf(format, args...)
}

func buildOrSkip(t *testing.T, uncompressed bool) *Artifacts {
	t.Helper()
	airtest.SkipShort(t, "the guest kernel and a build of the boot inputs")
	if _, err := exec.LookPath("go"); err != nil {
		skipUnlessCI(t, "no go tool to build the guest init and agent")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t0 := time.Now()
	// Build builds the guest init and the agent itself (static, reproducible,
	// cached by digest), as `airlock env boot-inputs` would with --init and
	// --agent binaries built the same way.
	a, err := Build(ctx, Options{Dir: cacheDir(t), Uncompressed: uncompressed})
	if err != nil {
		if strings.Contains(err.Error(), "apt-get download") {
			skipUnlessCI(t, "guest kernel %s=%s unavailable (needs Debian's archive and apt-get update): %v", DefaultKernel.Package, DefaultKernel.Version, err)
		}
		t.Fatal(err)
	}
	t.Logf("boot inputs in %v (kernel fetched %v, initrd built %v): kernel %s sha256 %s, initrd sha256 %s, modules %v, reference %s",
		time.Since(t0).Round(time.Millisecond), a.KernelFetched, a.InitrdBuilt, a.Kernel.Package+"="+a.Kernel.Version, a.KernelSHA256, a.InitrdSHA256, a.Modules, a.Reference())
	return a
}

func TestBuildReproducible(t *testing.T) {
	a := buildOrSkip(t, false)
	// Rebuild the initramfs from scratch in another directory (the kernel
	// extracted anew from the cached .deb): the same bytes.
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "deb"), 0o755); err != nil {
		t.Fatal(err)
	}
	deb := fmt.Sprintf("%s_%s_amd64.deb", a.Kernel.Package, a.Kernel.Version)
	if err := os.Link(filepath.Join(cacheDir(t), "deb", deb), filepath.Join(dir, "deb", deb)); err != nil {
		t.Skipf("cannot link the cached .deb: %v", err)
	}
	b, err := Build(context.Background(), Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !b.InitrdBuilt || !b.KernelFetched {
		t.Fatalf("fresh directory, yet taken from cache: %+v", b)
	}
	if a.AgentSHA256 == "" || a.AgentSHA256 != b.AgentSHA256 || a.KernelSHA256 != b.KernelSHA256 || a.InitrdSHA256 != b.InitrdSHA256 || a.Reference() != b.Reference() {
		t.Fatalf("not reproducible:\n%+v\n%+v", a, b)
	}
	c, err := Build(context.Background(), Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if c.InitrdBuilt || c.KernelFetched || c.InitrdSHA256 != b.InitrdSHA256 {
		t.Fatalf("second build not from cache: %+v", c)
	}
}

// TestBootTCG boots the inputs in a QEMU microvm under TCG with a busybox
// root disk: the init switches to the disk and starts the agent as PID 1 on
// the virtio-serial port; the host talks agentproto to it over QEMU's
// chardev socket, configures the guest, runs commands, and reconnects.
func TestBootTCG(t *testing.T) {
	airtest.SkipShort(t, "QEMU")
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		skipUnlessCI(t, "qemu-system-x86_64 not installed (Debian package qemu-system-x86)")
	}
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		skipUnlessCI(t, "mkfs.ext4 not installed (Debian package e2fsprogs)")
	}
	if _, err := os.Stat("/bin/busybox"); err != nil {
		skipUnlessCI(t, "no static busybox (Debian package busybox-static)")
	}
	a := buildOrSkip(t, true) // uncompressed: faster under TCG
	khz, err := HostTSCkHz()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "guestboot-") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	img := filepath.Join(dir, "root.ext4")
	if out, err := exec.Command(mkfs, "-q", "-F", "-d", airtest.BusyboxRootfs(t), img, "64M").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	sock := filepath.Join(dir, "agent.sock")
	serial := filepath.Join(dir, "serial.log")
	args := []string{"-M", "microvm", "-nodefaults", "-no-user-config", "-nographic", "-accel", "tcg",
		"-m", "256", "-kernel", a.KernelPath, "-initrd", a.InitrdPath,
		"-append", KernelCmdline(khz),
		"-serial", "file:" + serial,
		"-drive", "id=root,file=" + img + ",format=raw,if=none",
		"-device", "virtio-blk-device,drive=root",
		"-device", "virtio-serial-device",
		"-chardev", "socket,id=agent,path=" + sock + ",server=on,wait=off",
		"-device", "virtserialport,chardev=agent,name=airlock.agent",
		"-no-reboot"}
	// A NIC for the network part of the guest config, when QEMU has
	// user-mode networking (no host changes; nothing is reached through it).
	withNet := false
	if out, err := exec.Command(qemu, "-netdev", "help").CombinedOutput(); err == nil && strings.Contains(string(out), "user") {
		args = append(args, "-netdev", "user,id=n0,restrict=on", "-device", "virtio-net-device,netdev=n0")
		withNet = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu, args...)
	var qout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &qout, &qout
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() || os.Getenv("AIRLOCK_GUESTBOOT_SERIAL") != "" {
			log, _ := os.ReadFile(serial)
			t.Logf("qemu: %s\nserial console:\n%s", qout.Bytes(), log)
		}
	}()
	dial := func(ctx context.Context) (net.Conn, error) {
		select {
		case err := <-exited:
			exited <- err
			return nil, fmt.Errorf("qemu exited: %v", err)
		default:
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", sock)
		if err != nil {
			return nil, err
		}
		if err := agentclient.SyncSerial(ctx, conn); err != nil {
			conn.Close()
			return nil, err
		}
		return conn, nil
	}
	newClient := func() *agentclient.Client {
		c := agentclient.New(dial, nil)
		t.Cleanup(func() { c.Close() })
		return c
	}

	// Until the agent answers: QEMU may not have made its socket yet, and
	// the guest may not run the agent yet (the handshake then fails).
	waitInfo := func(c *agentclient.Client) (agentproto.Info, int) {
		for attempt := 1; ; attempt++ {
			ictx, icancel := context.WithTimeout(ctx, 5*time.Second)
			ts := time.Now()
			info, err := c.Info(ictx)
			icancel()
			if err == nil {
				return info, attempt
			}
			if testing.Verbose() && !strings.Contains(err.Error(), "dial agent") {
				t.Logf("attempt %d: %v after %v", attempt, err, time.Since(ts).Round(time.Millisecond))
			}
			if ctx.Err() != nil || strings.Contains(err.Error(), "qemu exited") {
				t.Fatalf("agent never answered: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	c := newClient()
	info, _ := waitInfo(c)
	ready := time.Since(t0)
	t.Logf("qemu start → agent Info answered over virtio-serial: %v (agent %s, protocol %d, pid %d, tsc_early_khz=%d)",
		ready.Round(time.Millisecond), info.AgentVersion, info.Protocol, info.Pid, khz)
	if info.Pid != 1 || !info.HasFeature(agentproto.FeatureGuestConfig) {
		t.Fatalf("info %+v: want the agent as PID 1 with %q", info, agentproto.FeatureGuestConfig)
	}

	entropy := make([]byte, 64)
	if _, err := rand.Read(entropy); err != nil {
		t.Fatal(err)
	}
	cfg := agentproto.GuestConfig{Hostname: "clone-a", Env: []string{"FOO=bar"}, Entropy: entropy, TimeUnixNano: time.Now().UnixNano()}
	if withNet {
		cfg.Network = &agentproto.GuestNetwork{Address: "10.0.2.15/24", Gateway: "10.0.2.2", DNS: []string{"10.0.2.3"}}
	}
	if err := c.ConfigureGuest(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigureGuest(ctx, cfg); err != nil { // idempotent
		t.Fatalf("second ConfigureGuest: %v", err)
	}
	out := bootRun(ctx, t, c, `uname -r; hostname; echo $FOO; date +%s`)
	lines := strings.Fields(out)
	if len(lines) != 4 || lines[0] != a.Kernel.Release || lines[1] != "clone-a" || lines[2] != "bar" {
		t.Fatalf("guest said %q, want %s, clone-a, bar and the time", out, a.Kernel.Release)
	}
	var guestTime int64
	fmt.Sscan(lines[3], &guestTime)
	if d := time.Since(time.Unix(guestTime, 0)); d < -time.Minute || d > time.Minute {
		t.Errorf("guest clock %d is %v off the host's", guestTime, d)
	}
	if withNet {
		out := bootRun(ctx, t, c, `ip -4 addr show dev eth0; ip route; cat /etc/resolv.conf`)
		for _, want := range []string{"inet 10.0.2.15/24", "default via 10.0.2.2 dev eth0", "nameserver 10.0.2.3", "UP"} {
			if !strings.Contains(out, want) {
				t.Errorf("guest network lacks %q:\n%s", want, out)
			}
		}
	}

	// A new client (a restarted host) reconnects to the same agent.
	c.Close()
	t1 := time.Now()
	c2 := newClient()
	_, attempts := waitInfo(c2)
	out = bootRun(ctx, t, c2, `hostname; cat /proc/1/comm`)
	if f := strings.Fields(out); len(f) == 0 || f[0] != "clone-a" || !strings.Contains(out, "airlock-agent") {
		t.Fatalf("after reconnecting: %q", out)
	}
	t.Logf("reconnect (%d handshake attempts) + command: %v", attempts, time.Since(t1).Round(time.Millisecond))

	log, _ := os.ReadFile(serial)
	if want := "airlock-guest ready " + a.Kernel.Release; !strings.Contains(string(log), want) {
		t.Errorf("the console lacks %q:\n%s", want, log)
	}

	// Signals from the guest's processes to PID 1 do nothing (the agent
	// ignores them as PID 1); the guest powering itself off ends QEMU.
	if out := bootRun(ctx, t, c2, `for s in TERM INT HUP USR1 USR2; do kill -$s 1; done; sleep 1; echo alive`); strings.TrimSpace(out) != "alive" {
		t.Fatalf("after signals to PID 1: %q", out)
	}
	if _, attempts := waitInfo(c2); attempts != 1 {
		t.Errorf("the agent took %d handshake attempts after signals to PID 1", attempts)
	}
	if _, err := c2.Start(ctx, agentproto.StartRequest{ID: model.NewProcessID().String(), Args: []string{"/bin/poweroff", "-f"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Errorf("qemu exited with %v after the guest powered off", err)
		}
	case <-time.After(60 * time.Second):
		t.Error("the VM is still running a minute after the guest powered off")
	}
}

// bootRun runs a shell script through the agent and returns its stdout.
func bootRun(ctx context.Context, t *testing.T, c *agentclient.Client, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := c.Run(ctx, agentproto.StartRequest{ID: model.NewProcessID().String(), Args: []string{"/bin/sh", "-c", script}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("sh -c %q: %v, exit %d, stdout %q, stderr %q", script, err, res.ExitCode, res.Stdout, res.Stderr)
	}
	return string(res.Stdout)
}

// TestFetchKernelConcurrently: test processes that start together on a new
// machine fetch the kernel into one cache at once; each must find it whole
// (a fresh CI run failed with a module missing from another's unpack).
func TestFetchKernelConcurrently(t *testing.T) {
	buildOrSkip(t, false) // the pinned package is in the suite's cache now
	name := fmt.Sprintf("%s_%s_amd64.deb", DefaultKernel.Package, DefaultKernel.Version)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "deb"), 0o755); err != nil {
		t.Fatal(err)
	}
	src, dst := filepath.Join(cacheDir(t), "deb", name), filepath.Join(dir, "deb", name)
	if err := os.Link(src, dst); err != nil {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const n = 4
	errs := make(chan error, n)
	fetched := make(chan bool, n)
	for range n {
		go func() {
			f, err := FetchKernel(t.Context(), dir, DefaultKernel)
			fetched <- f
			errs <- err
		}()
	}
	unpacked := 0
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
		if <-fetched {
			unpacked++
		}
	}
	if unpacked != 1 {
		t.Errorf("the kernel was unpacked %d times, want once", unpacked)
	}
	// The same files as the suite's own unpack.
	list := func(d string) []string {
		var names []string
		err := filepath.WalkDir(d, func(p string, _ fs.DirEntry, err error) error {
			rel, _ := filepath.Rel(d, p)
			names = append(names, rel)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	got, want := list(kernelDir(dir, DefaultKernel)), list(kernelDir(cacheDir(t), DefaultKernel))
	if !slices.Equal(got, want) {
		t.Errorf("unpacked %d files, the suite's cache has %d", len(got), len(want))
	}
}
