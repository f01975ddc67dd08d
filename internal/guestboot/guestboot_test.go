package guestboot

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
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
	base := os.Getenv("AIRLOCK_TEST_CACHE")
	if base == "" {
		base = "/var/cache/airlock-test"
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
	if _, err := exec.LookPath("go"); err != nil {
		skipUnlessCI(t, "no go tool to build the guest init")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t0 := time.Now()
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
	if a.KernelSHA256 != b.KernelSHA256 || a.InitrdSHA256 != b.InitrdSHA256 || a.Reference() != b.Reference() {
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

// TestBootTCG boots the inputs in a QEMU microvm under TCG and waits for the
// guest init's ready line on the virtio-serial port.
func TestBootTCG(t *testing.T) {
	t.Run("gzip", func(t *testing.T) { testBootTCG(t, false) })
	t.Run("uncompressed", func(t *testing.T) { testBootTCG(t, true) })
}

func testBootTCG(t *testing.T, uncompressed bool) {
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		skipUnlessCI(t, "qemu-system-x86_64 not installed (Debian package qemu-system-x86)")
	}
	a := buildOrSkip(t, uncompressed)
	khz, err := HostTSCkHz()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "guestboot-") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "agent.sock")
	serial := filepath.Join(dir, "serial.log")
	args := []string{"-M", "microvm", "-nodefaults", "-no-user-config", "-nographic", "-accel", "tcg",
		"-m", "256", "-kernel", a.KernelPath, "-initrd", a.InitrdPath,
		"-append", KernelCmdline(khz),
		"-serial", "file:" + serial,
		"-device", "virtio-serial-device",
		"-chardev", "socket,id=agent,path=" + sock + ",server=on,wait=off",
		"-device", "virtserialport,chardev=agent,name=airlock.agent",
		"-no-reboot"}
	// A root disk, when mkfs.ext4 can make one: the guest mounts it.
	withRoot := false
	if mkfs, err := exec.LookPath("mkfs.ext4"); err == nil {
		tree := filepath.Join(dir, "tree")
		os.MkdirAll(filepath.Join(tree, "marker-dir"), 0o755)
		img := filepath.Join(dir, "root.ext4")
		if out, err := exec.Command(mkfs, "-q", "-F", "-d", tree, img, "16M").CombinedOutput(); err != nil {
			t.Logf("no root disk: mkfs.ext4: %v: %s", err, out)
		} else {
			args = append(args, "-drive", "id=root,file="+img+",format=raw,if=none",
				"-device", "virtio-blk-device,drive=root")
			withRoot = true
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
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

	var conn net.Conn
	for conn == nil {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("qemu exited: %v", err)
		case <-ctx.Done():
			t.Fatal("no agent socket")
		case <-time.After(5 * time.Millisecond):
		}
		conn, _ = net.Dial("unix", sock)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the port: %v", err)
	}
	ready := time.Since(t0)
	line = strings.TrimSpace(line)
	want := "airlock-guest ready " + a.Kernel.Release
	if line != want {
		t.Fatalf("port said %q, want %q", line, want)
	}
	t.Logf("qemu start → ready line on virtio-serial: %v (tsc_early_khz=%d)", ready.Round(time.Millisecond), khz)
	if withRoot {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the port: %v", err)
		}
		if !strings.HasPrefix(line, "airlock-guest root /dev/vda ext4 ") || !strings.Contains(line, "marker-dir") {
			t.Fatalf("root line %q", line)
		}
	}
	// The port carries bytes both ways.
	if _, err := conn.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || strings.TrimSpace(line) != "echo ping" {
		t.Fatalf("echo: %q, %v", line, err)
	}
	log, _ := os.ReadFile(serial)
	if !strings.Contains(string(log), want) {
		t.Errorf("the console lacks the ready line:\n%s", log)
	}
}
