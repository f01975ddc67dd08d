// Package guestboot builds the boot inputs of the QEMU microVM environment:
// the guest kernel, taken from a pinned Debian linux-image-cloud-amd64
// package, and an initramfs holding the virtio modules that kernel needs (in
// load order) and the static airlock-agent as its /init: started as PID 1
// under that name, the agent runs the guest init (package guestinit), which
// mounts the root disk, copies the agent into a tmpfs on its /run and
// executes it as PID 1 of the new root, listening on the virtio-serial
// ports. One binary: nothing but the agent runs in the guest before the
// workload.
//
// Builds are reproducible and cached under a directory by the digests of
// their inputs: the same package, module list and agent binary give the
// same bytes and the same paths, so a second Build is a few stat calls.
//
// Layout of the cache directory:
//
//	deb/<package>_<version>_amd64.deb         the downloaded package (sha256 checked)
//	kernel/<deb sha256>/vmlinuz               the kernel image from the package
//	kernel/<deb sha256>/modules/<name>.ko     the modules the initramfs needs
//	initrd/<input digest>.cpio.gz             the initramfs
//	init/<...>                                the agent, when built here with the go tool
package guestboot

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/airlockdev/airlock/internal/atomicfile"
	"github.com/airlockdev/airlock/internal/filelock"
	"github.com/airlockdev/airlock/internal/staticelf"
)

// Kernel pins a Debian kernel package.
type Kernel struct {
	Package string `json:"package"`    // e.g. linux-image-6.1.0-50-cloud-amd64
	Version string `json:"version"`    // Debian version, e.g. 6.1.176-1
	Release string `json:"release"`    // uname -r of the kernel, e.g. 6.1.0-50-cloud-amd64
	SHA256  string `json:"deb_sha256"` // of the .deb, as the archive's Packages index lists it
}

// DefaultKernel is the pinned guest kernel: the version of
// linux-image-cloud-amd64 in Debian 12 "bookworm" main (point release
// 12.13-era, also in bookworm-security), so it stays downloadable until the
// next point release replaces it. Bumping it is a one-line change here; the
// digest check refuses anything else.
var DefaultKernel = Kernel{
	Package: "linux-image-6.1.0-50-cloud-amd64",
	Version: "6.1.176-1",
	Release: "6.1.0-50-cloud-amd64",
	SHA256:  "efe19f605b6f54a8352e68d85a629abb2d30b72a085faef603a9152590baa791",
}

// DefaultModules are the modules the guest loads, in the order wanted;
// dependencies found in the modules' .modinfo (virtio_net needs
// net_failover and failover) are put before them.
var DefaultModules = []string{"virtio_ring", "virtio", "virtio_mmio", "virtio_blk", "virtio_console", "virtio_net"}

// Paths inside the initramfs; guestinit reads them.
const (
	InitPath       = "/init"
	ModuleListPath = "/etc/airlock/modules" // one absolute .ko path a line, load order
	moduleDir      = "/lib/modules"
)

// Options of a build.
type Options struct {
	Dir     string   // cache directory (created)
	Kernel  Kernel   // zero: DefaultKernel
	Modules []string // nil: DefaultModules
	// Agent is the path of the static airlock-agent binary, the
	// initramfs's /init: started as PID 1 under that name it runs the
	// guest init (package guestinit), which switches to the root disk and
	// executes it again as the agent. Empty: build ./cmd/airlock-agent
	// with the go tool (GoDir is the module root to build in; empty: found
	// from this source file's module).
	Agent string
	GoDir string
	// Uncompressed writes the cpio without gzip (.cpio): 2.3 MB instead of
	// 0.95 MB, and ~0.2-0.3 s less boot under TCG (no inflate in the guest).
	Uncompressed bool
}

// Artifacts are the boot inputs a build produced.
type Artifacts struct {
	Kernel        Kernel   `json:"kernel"`
	KernelPath    string   `json:"kernel_path"`
	KernelSHA256  string   `json:"kernel_sha256"`
	InitrdPath    string   `json:"initrd_path"`
	InitrdSHA256  string   `json:"initrd_sha256"`
	AgentSHA256   string   `json:"agent_sha256"`
	Modules       []string `json:"modules"`   // load order
	EnvReference  string   `json:"reference"` // Reference(), set by Build
	InitrdBuilt   bool     `json:"-"`         // false: taken from the cache
	KernelFetched bool     `json:"-"`
}

// Reference is the environment reference of the boot inputs: a digest over
// the kernel's and the initramfs's digests.
func (a *Artifacts) Reference() string {
	h := sha256.Sum256([]byte("airlock-guestboot/v1\nkernel " + a.KernelSHA256 + "\ninitrd " + a.InitrdSHA256 + "\n"))
	return "sha256:" + hex.EncodeToString(h[:])
}

// Build produces (or finds in the cache) the kernel and initramfs.
func Build(ctx context.Context, o Options) (*Artifacts, error) {
	if o.Dir == "" {
		return nil, errors.New("guestboot: no cache directory")
	}
	if o.Kernel == (Kernel{}) {
		o.Kernel = DefaultKernel
	}
	if o.Modules == nil {
		o.Modules = DefaultModules
	}
	a := &Artifacts{Kernel: o.Kernel}
	kdir := kernelDir(o.Dir, o.Kernel)
	a.KernelPath = filepath.Join(kdir, "vmlinuz")
	var err error
	if a.KernelFetched, err = FetchKernel(ctx, o.Dir, o.Kernel); err != nil {
		return nil, err
	}
	if a.KernelSHA256, err = fileSHA256(a.KernelPath); err != nil {
		return nil, err
	}
	order, err := loadOrder(o.Modules, func(m string) ([]string, error) {
		ko, err := os.ReadFile(filepath.Join(kdir, "modules", m+".ko"))
		if err != nil {
			return nil, fmt.Errorf("guestboot: module %s not in %s: %w", m, o.Kernel.Package, err)
		}
		mi, err := parseModinfo(ko)
		if err != nil {
			return nil, fmt.Errorf("guestboot: module %s: %w", m, err)
		}
		return mi.depends, nil
	})
	if err != nil {
		return nil, err
	}
	a.Modules = order

	agentData, err := staticBinary(ctx, o, o.Agent, "./cmd/airlock-agent", "airlock-agent", "agent")
	if err != nil {
		return nil, err
	}
	a.AgentSHA256 = sha256hex(agentData)

	// The initramfs's key: everything that goes into it.
	key := sha256.New()
	fmt.Fprintf(key, "airlock-initrd/v3\nkernel-deb %s\nrelease %s\nagent %s\n", o.Kernel.SHA256, o.Kernel.Release, a.AgentSHA256)
	for _, m := range order {
		fmt.Fprintf(key, "module %s\n", m)
	}
	ext := ".cpio.gz"
	if o.Uncompressed {
		ext = ".cpio"
	}
	a.InitrdPath = filepath.Join(o.Dir, "initrd", hex.EncodeToString(key.Sum(nil))+ext)
	if _, err := os.Stat(a.InitrdPath); err != nil {
		data, err := buildInitramfs(kdir, o.Kernel.Release, order, agentData, !o.Uncompressed)
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(a.InitrdPath), 0o755); err != nil {
			return nil, err
		}
		if err := atomicfile.Write(a.InitrdPath, data, 0o644); err != nil {
			return nil, err
		}
		a.InitrdBuilt = true
	}
	if a.InitrdSHA256, err = fileSHA256(a.InitrdPath); err != nil {
		return nil, err
	}
	a.EnvReference = a.Reference()
	if j, err := json.MarshalIndent(a, "", "  "); err == nil {
		_ = atomicfile.Write(filepath.Join(o.Dir, "artifacts.json"), append(j, '\n'), 0o644)
	}
	return a, nil
}

// kernelDir is where the kernel k is unpacked in the cache dir.
func kernelDir(dir string, k Kernel) string { return filepath.Join(dir, "kernel", k.SHA256) }

// FetchKernel makes sure the cache dir holds the kernel k unpacked (its
// vmlinuz and modules), downloading its package with apt-get download when
// missing; fetched says whether it did. Build calls it; tests call it first
// where the network is (a test's own network namespace has no route out).
// Processes sharing dir fetch one at a time (a lock file beside the
// kernel's directory): on a new machine several test processes start at
// once, and each unpacking into the same place broke the others' unpack.
func FetchKernel(ctx context.Context, dir string, k Kernel) (fetched bool, err error) {
	kdir := kernelDir(dir, k)
	done := filepath.Join(kdir, "done")
	if _, err := os.Stat(done); err == nil {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(kdir), 0o755); err != nil {
		return false, fmt.Errorf("guestboot: kernel cache: %w", err)
	}
	lock, err := filelock.Lock(ctx, kdir+".lock")
	if err != nil {
		return false, fmt.Errorf("guestboot: kernel cache: %w", err)
	}
	defer lock.Close()
	if _, err := os.Stat(done); err == nil {
		return false, nil // another process fetched it meanwhile
	}
	deb, err := fetchDeb(ctx, dir, k)
	if err != nil {
		return false, err
	}
	if err := extractKernel(ctx, deb, kdir, k); err != nil {
		return false, err
	}
	return true, nil
}

// buildInitramfs writes the cpio (newc) archive, gzip-compressed with a
// fixed header, so equal inputs give equal bytes.
func buildInitramfs(kdir, release string, order []string, agentData []byte, compress bool) ([]byte, error) {
	var raw bytes.Buffer
	c := &cpioWriter{w: &raw}
	mdir := path.Join(moduleDir, release)
	steps := []func() error{
		func() error { return c.dir("dev") },
		func() error { return c.chr("dev/console", 0o600, 5, 1) },
		func() error { return c.chr("dev/null", 0o666, 1, 3) },
		func() error { return c.dir("etc") },
		func() error { return c.dir("etc/airlock") },
		func() error { return c.dir("lib") },
		func() error { return c.dir("lib/modules") },
		func() error { return c.dir(strings.TrimPrefix(mdir, "/")) },
		func() error { return c.dir("newroot") },
		func() error { return c.dir("proc") },
		func() error { return c.dir("sys") },
		func() error { return c.dir("tmp") },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return nil, err
		}
	}
	var list strings.Builder
	for _, m := range order {
		ko, err := os.ReadFile(filepath.Join(kdir, "modules", m+".ko"))
		if err != nil {
			return nil, err
		}
		p := path.Join(mdir, m+".ko")
		if err := c.file(strings.TrimPrefix(p, "/"), 0o644, ko); err != nil {
			return nil, err
		}
		list.WriteString(p + "\n")
	}
	if err := c.file(strings.TrimPrefix(ModuleListPath, "/"), 0o644, []byte(list.String())); err != nil {
		return nil, err
	}
	if err := c.file(strings.TrimPrefix(InitPath, "/"), 0o700, agentData); err != nil {
		return nil, err
	}
	if err := c.close(); err != nil {
		return nil, err
	}
	if !compress {
		return raw.Bytes(), nil
	}
	var out bytes.Buffer
	zw, err := gzip.NewWriterLevel(&out, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	// Header left zero (no name, no mtime, OS "unknown"): reproducible.
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// fetchDeb returns the path of the pinned package in the cache, downloading
// it with apt-get download when missing. Its sha256 is checked either way.
func fetchDeb(ctx context.Context, dir string, k Kernel) (string, error) {
	ddir := filepath.Join(dir, "deb")
	if err := os.MkdirAll(ddir, 0o755); err != nil {
		return "", err
	}
	name := fmt.Sprintf("%s_%s_amd64.deb", k.Package, k.Version)
	p := filepath.Join(ddir, name)
	if _, err := os.Stat(p); err != nil {
		tmp, err := os.MkdirTemp(ddir, ".dl-")
		if err != nil {
			return "", err
		}
		defer os.RemoveAll(tmp)
		cmd := exec.CommandContext(ctx, "apt-get", "download", k.Package+"="+k.Version)
		cmd.Dir = tmp
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("guestboot: apt-get download %s=%s: %w: %s (run apt-get update first?)", k.Package, k.Version, err, bytes.TrimSpace(out))
		}
		// apt-get names the file with the version's epoch escaped; take what it wrote.
		ents, err := os.ReadDir(tmp)
		if err != nil || len(ents) != 1 {
			return "", fmt.Errorf("guestboot: apt-get download left %d files", len(ents))
		}
		if err := os.Rename(filepath.Join(tmp, ents[0].Name()), p); err != nil {
			return "", err
		}
	}
	sum, err := fileSHA256(p)
	if err != nil {
		return "", err
	}
	if sum != k.SHA256 {
		return "", fmt.Errorf("guestboot: %s has sha256 %s, pinned %s", name, sum, k.SHA256)
	}
	return p, nil
}

// extractKernel takes vmlinuz and every module (flattened by name) out of
// the package's data tarball (dpkg-deb --fsys-tarfile decompresses it) into
// kdir, marking it done last.
func extractKernel(ctx context.Context, deb, kdir string, k Kernel) error {
	if err := os.RemoveAll(kdir); err != nil {
		return err
	}
	tmp := kdir + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(filepath.Join(tmp, "modules"), 0o755); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", deb)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("guestboot: dpkg-deb: %w", err)
	}
	tr := tar.NewReader(stdout)
	vmlinuz := "./boot/vmlinuz-" + k.Release
	modPrefix := "./lib/modules/" + k.Release + "/kernel/"
	var found bool
	var terr error
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			terr = err
			break
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		var dst string
		switch {
		case h.Name == vmlinuz:
			dst, found = filepath.Join(tmp, "vmlinuz"), true
		case strings.HasPrefix(h.Name, modPrefix) && strings.HasSuffix(h.Name, ".ko"):
			// Debian 12 ships modules uncompressed (CONFIG_MODULE_COMPRESS_NONE);
			// a .ko.xz would need decompressing here, which this does not do.
			dst = filepath.Join(tmp, "modules", modName(strings.TrimSuffix(path.Base(h.Name), ".ko"))+".ko")
		default:
			continue
		}
		if err := writeFrom(dst, tr); err != nil {
			terr = err
			break
		}
	}
	_, _ = io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil && terr == nil {
		terr = fmt.Errorf("guestboot: dpkg-deb --fsys-tarfile: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	if terr != nil {
		return terr
	}
	if !found {
		return fmt.Errorf("guestboot: %s has no %s", deb, vmlinuz)
	}
	if err := os.WriteFile(filepath.Join(tmp, "done"), []byte(k.Package+" "+k.Version+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, kdir)
}

func writeFrom(dst string, r io.Reader) error {
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// staticBinary reads the binary at path (building pkg into the cache as
// name when path is empty) and checks that it is static.
func staticBinary(ctx context.Context, o Options, path, pkg, name, what string) ([]byte, error) {
	if path == "" {
		var err error
		if path, err = buildStatic(ctx, o, pkg, name); err != nil {
			return nil, err
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("guestboot: %s: %w", what, err)
	}
	if err := staticelf.Check(data); err != nil {
		return nil, fmt.Errorf("guestboot: %s %s: %w (build it with CGO_ENABLED=0)", what, path, err)
	}
	return data, nil
}

// buildStatic builds the main package pkg, static and reproducible
// (-trimpath, no build id, no VCS stamp), into the cache as name-<digest>.
func buildStatic(ctx context.Context, o Options, pkg, name string) (string, error) {
	dir := o.GoDir
	if dir == "" {
		out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
		if err != nil || strings.TrimSpace(string(out)) == "" || strings.TrimSpace(string(out)) == os.DevNull {
			return "", fmt.Errorf("guestboot: no Go module to build %s in (set Options.GoDir, or Options.Init and Options.Agent)", pkg)
		}
		dir = filepath.Dir(strings.TrimSpace(string(out)))
	}
	idir := filepath.Join(o.Dir, "init")
	if err := os.MkdirAll(idir, 0o755); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(idir, "."+name+"-")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	f.Close()
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid=",
		"-o", tmp, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("guestboot: building %s: %w: %s", pkg, err, out)
	}
	sum, err := fileSHA256(tmp)
	if err != nil {
		return "", err
	}
	p := filepath.Join(idir, name+"-"+sum[:16])
	if err := os.Rename(tmp, p); err != nil {
		return "", err
	}
	return p, nil
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func sha256hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
