package oci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/rootfs"
	"github.com/airlockdev/airlock/internal/runtime"
)

// Guest paths of the network's files.
const (
	guestResolvConf = "/etc/resolv.conf"
	// GuestCACert and GuestCABundle: see runtime.Network.
	GuestCACert   = runtime.GuestCACert
	GuestCABundle = runtime.GuestCABundle
)

// maxTemplateBundle bounds how much of the template's CA bundle is read
// (Debian's is about 200 KiB).
const maxTemplateBundle = 16 << 20

// netDir is where a sandbox's network state lives on the host: readable
// by everyone (it holds nothing secret), below the sandbox's state
// directory, which only its own mapped root may search. It holds the
// netns marker, the sysfs of the network namespace (runc, crun) and the
// network files' tmpfs (netFilesDir).
func (d sandboxDirs) netDir() string { return filepath.Join(d.state, "net") }

// netFilesDir is where the network files' tmpfs is mounted: a small tmpfs
// of the sandbox's own (source netFSSource), made afresh by every prepare,
// from which the files are bind-mounted. The guest's mount table then
// shows each file's mount root as /<name> on a tmpfs, and statfs on it
// that small tmpfs: nothing of the host's filesystems or of the data
// directory's path (a bind from a directory on the host's disk shows that
// directory's path, and df the host disk's size). unmountAll unmounts it
// with the state directory (Delete, and Suspend's releaseRunning).
func (d sandboxDirs) netFilesDir() string { return filepath.Join(d.netDir(), "files") }

// netFSSource is the source of the network files' tmpfs in mount tables.
const netFSSource = "airlock-net"

// netnsMarker, in a sandbox's net directory, records that the sandbox
// joins a prepared network namespace.
const netnsMarker = "netns"

// joinsNetns reports whether sandbox id was created in a prepared network
// namespace (runsc's start then needs --network=sandbox).
func (r *Runtime) joinsNetns(id model.SandboxID) bool {
	_, err := os.Stat(filepath.Join(r.dirs(id).netDir(), netnsMarker))
	return err == nil
}

// netFile is a file of the sandbox's network: written to the net directory
// as name and bind-mounted read-only at guest.
type netFile struct {
	name, guest string
	data        []byte
}

// applyNetwork puts the spec into the sandbox's prepared network namespace
// and bind-mounts its name server and trust store files read-only. Without
// a network, the sandbox keeps a new, empty network namespace (loopback).
func applyNetwork(flavor Flavor, s *specs.Spec, spec runtime.Spec, dirs sandboxDirs) error {
	n := spec.Network
	if n == nil {
		return nil
	}
	if !filepath.IsAbs(n.NetnsPath) {
		return fmt.Errorf("network namespace %q must be an absolute path", n.NetnsPath)
	}
	if !n.DNS.IsValid() {
		return errors.New("network without a DNS server")
	}
	joined := false
	for i, ns := range s.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace {
			s.Linux.Namespaces[i].Path = n.NetnsPath
			joined = true
		}
	}
	if !joined {
		return errors.New("spec has no network namespace to join")
	}
	dir := dirs.netDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	// The marker joinsNetns reads.
	if err := writeFileAtomic(filepath.Join(dir, netnsMarker), []byte(n.NetnsPath+"\n")); err != nil {
		return err
	}
	if flavor != FlavorRunsc {
		if err := netnsSysfs(s, n.NetnsPath, filepath.Join(dir, "sys")); err != nil {
			return err
		}
	}
	files := []netFile{{"resolv.conf", guestResolvConf, resolvConf(n)}}
	if len(n.CACertPEM) > 0 {
		bundle, err := templateBundle(spec.RootFS.Lower)
		if err != nil {
			return err
		}
		if len(bundle) > 0 && !bytes.HasSuffix(bundle, []byte("\n")) {
			bundle = append(bundle, '\n')
		}
		bundle = append(bundle, n.CACertPEM...)
		files = append(files, netFile{"ca.crt", GuestCACert, n.CACertPEM}, netFile{"ca-certificates.crt", GuestCABundle, bundle})
	}
	if err := writeNetFiles(dirs.netFilesDir(), files); err != nil {
		return err
	}
	for _, f := range files {
		s.Mounts = append(s.Mounts, specs.Mount{Destination: f.guest, Type: "bind", Source: filepath.Join(dirs.netFilesDir(), f.name),
			Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
	}
	return nil
}

// writeNetFiles mounts a fresh tmpfs at dir (unmounting whatever an
// earlier prepare left there) just large enough for files, and writes
// them into it, mode 0644, host root's. The tmpfs's root is 0755: runc and
// crun resolve the bind mounts' sources as the sandbox's mapped root.
func writeNetFiles(dir string, files []netFile) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for layers := 0; ; layers++ {
		mounted, err := rootfs.IsMounted(dir)
		if err != nil {
			return err
		}
		if !mounted {
			break
		}
		if layers == 16 {
			return fmt.Errorf("the network files' directory %s is still mounted after 16 unmounts", dir)
		}
		// Only a prepare without a container gets here (a retried create,
		// a restore): no sandbox uses these files, and a sandbox's bind
		// mount would keep its own reference to the filesystem anyway.
		if err := unix.Unmount(dir, unix.UMOUNT_NOFOLLOW); err != nil {
			return fmt.Errorf("unmount the network files' old tmpfs %s: %w", dir, err)
		}
	}
	size := int64(unix.Getpagesize()) // slack: tmpfs rounds each file up to pages
	for _, f := range files {
		size += pageRound(int64(len(f.data)))
	}
	opts := fmt.Sprintf("mode=0755,size=%d,nr_inodes=%d", size, len(files)+2)
	if err := unix.Mount(netFSSource, dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("mount the network files' tmpfs on %s: %w", dir, err)
	}
	for _, f := range files {
		path := filepath.Join(dir, f.name)
		if err := os.WriteFile(path, f.data, 0o644); err != nil {
			return err
		}
		if err := os.Chmod(path, 0o644); err != nil { // whatever the umask
			return err
		}
	}
	return nil
}

// pageRound rounds n up to a whole number of pages.
func pageRound(n int64) int64 {
	p := int64(unix.Getpagesize())
	return (n + p - 1) / p * p
}

// resolvConf is the guest's /etc/resolv.conf: Airlock's resolver only (the
// host redirects DNS to any address there anyway).
func resolvConf(n *runtime.Network) []byte {
	return []byte("# written by Airlock: the sandbox's only name server\nnameserver " + n.DNS.String() + "\noptions edns0\n")
}

// templateBundlePaths are where distributions keep their CA bundle: Debian,
// Ubuntu and Alpine; Fedora and RHEL; Alpine's and BSD-style cert.pem;
// openSUSE. The first one the template has is the base of the sandbox's
// trust store (mounted at GuestCABundle, which the environment variables
// name), so a template that is not Debian keeps its public roots.
var templateBundlePaths = []string{
	GuestCABundle,
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/cert.pem",
	"/etc/ssl/ca-bundle.pem",
}

// templateBundle reads the template's CA bundle (the first of
// templateBundlePaths it has), resolving each path inside the template (a
// symlink there cannot point at a host file); none: nil.
func templateBundle(template string) ([]byte, error) {
	root, err := os.Open(template)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	for _, p := range templateBundlePaths {
		data, err := readInRoot(root, p)
		if err != nil || data != nil {
			return data, err
		}
	}
	return nil, nil
}

// readInRoot reads the regular file at path inside root, at most
// maxTemplateBundle bytes; a path that does not lead to a regular file
// inside root: nil.
func readInRoot(root *os.File, path string) ([]byte, error) {
	fd, err := unix.Openat2(int(root.Fd()), path[1:], &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOCTTY | unix.O_NONBLOCK,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ELOOP) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open the template's CA bundle %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, nil
	}
	data, err := io.ReadAll(io.LimitReader(f, maxTemplateBundle+1))
	if err != nil {
		return nil, fmt.Errorf("read the template's CA bundle %s: %w", path, err)
	}
	if len(data) > maxTemplateBundle {
		return nil, fmt.Errorf("the template's CA bundle %s is larger than %d bytes", path, maxTemplateBundle)
	}
	return data, nil
}

// netnsSysfs mounts a sysfs of the sandbox's network namespace at dir on
// the host and replaces the spec's sysfs mount by a read-only bind of it.
// runc and crun cannot mount sysfs themselves: the sandbox's user namespace
// does not own the prepared network namespace it joins (the kernel refuses
// with EPERM; runc fails, crun falls back to the host's /sys, which lists
// the host's interfaces). Made from inside that namespace, the sysfs is the
// one the sandbox would have had. removeHostState unmounts it with the
// state directory.
func netnsSysfs(s *specs.Spec, netnsPath, dir string) error {
	i := slices.IndexFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == "/sys" && m.Type == "sysfs" })
	if i < 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return err
	}
	if st.Type != unix.SYSFS_MAGIC {
		if err := inNetns(netnsPath, func() error {
			return unix.Mount("sysfs", dir, "sysfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_RDONLY, "")
		}); err != nil {
			return fmt.Errorf("mount the sandbox's sysfs: %w", err)
		}
	}
	s.Mounts[i] = specs.Mount{Destination: "/sys", Type: "bind", Source: dir, Options: []string{"rbind", "ro", "nosuid", "noexec", "nodev"}}
	return nil
}

// inNetns runs fn on a locked OS thread that has joined the network
// namespace at path. The thread is not reused afterwards: its goroutine
// exits still locked, so the Go runtime ends the thread.
func inNetns(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread() // never unlocked: the thread dies with the goroutine
		f, err := os.Open(path)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("join %s: %w", path, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// nullNetnsName is the file in runsc's root directory on which runsc pins
// (bind-mounts) an empty network namespace for its gofers to join: one per
// root directory, made by the first container and never removed by runsc,
// so a data directory could not be removed after the server stopped.
const nullNetnsName = "null-netns"

// releaseNullNetns unmounts (every stacked layer of) runsc's null-netns
// pin and removes the file. Callers make sure no container exists: a
// container's gofer already holds the namespace, and the next create pins
// a fresh one.
func (r *Runtime) releaseNullNetns(ctx context.Context) error {
	if r.flavor != FlavorRunsc {
		return nil
	}
	path := filepath.Join(r.rootDir, nullNetnsName)
	for range 16 {
		var st unix.Statfs_t
		if err := unix.Statfs(path, &st); err != nil || st.Type != unix.NSFS_MAGIC {
			break
		}
		if err := rootfs.Unmount(ctx, r.log, path); err != nil {
			return err
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
