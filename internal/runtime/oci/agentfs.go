package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/retry"
	"github.com/airlockdev/airlock/internal/rootfs"
)

// The shared agent filesystem: one small tmpfs per Runtime, mounted at
// StateRoot/.agentfs the first time a sandbox (or the probe) needs it,
// holds each agent binary the runtime has been given under the hex sha256
// of its content, mode 0555, host root's. Every sandbox bind-mounts its
// agent's file read-only at GuestAgentPath, so nothing is copied per
// sandbox, and the sandbox's mount table shows the file as /<digest> on a
// tmpfs: no host path.
//
// Sandboxes outlive the server: a restarted server finds the tmpfs still
// mounted (mountinfo) and reuses it; a new agent version adds a file.
// Files are never unlinked while the runtime may have sandboxes (unlinking
// a file that is a mount point in other mount namespaces detaches those
// mounts), so old versions stay until ReleaseAgentFS unmounts the whole
// filesystem once the runtime has no sandboxes at all. The host's mount is
// read-only except while a file is being added.
const (
	agentFSName   = ".agentfs"      // under StateRoot; never a sandbox ID nor a probe's name
	agentFSSource = "airlock-agent" // the tmpfs's source in mount tables
	// agentFSSize bounds the tmpfs (memory is only used by its files: about
	// 10 MiB per agent version).
	agentFSSize   = 512 << 20
	agentFSInodes = 1024
)

// agentFS is a Runtime's shared agent filesystem.
type agentFS struct {
	dir string
	log *slog.Logger

	mu      sync.Mutex
	mounted bool                 // seen mounted by this process
	known   map[string]agentFile // agent binary path → its file here
}

// agentFile identifies an agent binary's version (the host file's identity
// and times) and the digest it was installed under.
type agentFile struct {
	dev, ino     uint64
	size         int64
	mtime, ctime syscall.Timespec
	digest       string
}

func newAgentFS(stateRoot string, log *slog.Logger) *agentFS {
	return &agentFS{dir: filepath.Join(stateRoot, agentFSName), log: log, known: map[string]agentFile{}}
}

// install returns the path of the shared file holding the content of the
// agent binary src, adding it first if needed. A binary already installed
// and unchanged since (same inode, size and times) costs one fstat.
func (a *agentFS) install(src string) (string, error) {
	f, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("agent binary: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("agent binary: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || !ok {
		return "", fmt.Errorf("agent binary %q: not a regular file", src)
	}
	id := agentFile{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}

	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.ensureMounted(); err != nil {
		return "", err
	}
	if k, ok := a.known[src]; ok {
		id.digest = k.digest
		if k == id && a.present(k.digest, k.size) == nil {
			return filepath.Join(a.dir, k.digest), nil
		}
	}
	// Not known yet, changed, or its file gone: look at the mount table
	// afresh (someone may have unmounted the tmpfs), then hash.
	a.mounted = false
	if err := a.ensureMounted(); err != nil {
		return "", err
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("agent binary %s: %w", src, err)
	}
	id.digest = hex.EncodeToString(h.Sum(nil))
	switch err := a.present(id.digest, id.size); {
	case errors.Is(err, os.ErrNotExist):
		if err := a.add(f, id.digest); err != nil {
			return "", err
		}
		a.log.Info("added an agent version to the shared agent filesystem", "digest", id.digest, "binary", src)
	case err != nil:
		return "", err
	}
	a.known[src] = id
	return filepath.Join(a.dir, id.digest), nil
}

// present checks that the file of digest is there, a regular file of size
// bytes; a missing one is os.ErrNotExist.
func (a *agentFS) present(digest string, size int64) error {
	fi, err := os.Lstat(filepath.Join(a.dir, digest))
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Size() != size {
		return fmt.Errorf("shared agent file %s: not a regular file of %d bytes (%v, %d bytes)", filepath.Join(a.dir, digest), size, fi.Mode(), fi.Size())
	}
	return nil
}

// ensureMounted mounts the tmpfs unless it is mounted already (by this
// process, or by an earlier server whose sandboxes may use it).
func (a *agentFS) ensureMounted() error {
	if a.mounted {
		return nil
	}
	mounts, err := rootfs.MountsAt(a.dir)
	if err != nil {
		return fmt.Errorf("shared agent filesystem: %w", err)
	}
	if n := len(mounts); n > 0 {
		if top := mounts[n-1]; top.FSType != "tmpfs" || top.Source != agentFSSource {
			return fmt.Errorf("shared agent filesystem: %s has a %s mount of %q, not Airlock's tmpfs", a.dir, top.FSType, top.Source)
		}
		a.mounted = true
		return nil
	}
	if err := os.Mkdir(a.dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("shared agent filesystem: %w", err)
	}
	// mode=0711: runc and crun resolve the bind mount's source as the
	// sandbox's mapped root, an unprivileged host user (see
	// stateRootSearchable for StateRoot and its ancestors).
	opts := fmt.Sprintf("mode=0711,size=%d,nr_inodes=%d", agentFSSize, agentFSInodes)
	if err := unix.Mount(agentFSSource, a.dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("shared agent filesystem: mount tmpfs on %s: %w", a.dir, err)
	}
	if err := a.setWritable(false); err != nil {
		return err
	}
	a.mounted = true
	return nil
}

// setWritable makes the host's mount of the tmpfs read-write or read-only
// (the mount's flag only: sandboxes' bind mounts are read-only regardless).
func (a *agentFS) setWritable(rw bool) error {
	flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND | unix.MS_NOSUID | unix.MS_NODEV)
	if !rw {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount("", a.dir, "", flags, ""); err != nil {
		return fmt.Errorf("shared agent filesystem: remount %s (writable %v): %w", a.dir, rw, err)
	}
	return nil
}

// makeReadOnly makes the host's mount read-only again after add. The
// kernel refuses (EBUSY) while a file opened for writing on it is open:
// the new file's descriptor may live on for a moment in a child another
// goroutine is forking (until it execs), so it retries for a while, then
// leaves the mount writable with a warning (the files are host root's and
// 0555 regardless; the next add tries again).
func (a *agentFS) makeReadOnly() {
	wait := retry.Policy{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond, Jitter: 0.2, MaxElapsed: 2 * time.Second}.Start(nil)
	for {
		err := a.setWritable(false)
		if err == nil {
			return
		}
		if !errors.Is(err, unix.EBUSY) || wait.Wait(context.Background()) != nil {
			a.log.Warn("the shared agent filesystem stays writable", "err", err)
			return
		}
	}
}

// add writes the content of src, which must hash to digest, as the file
// digest: into a temporary file first, renamed without replacing, so a
// file under a digest's name is always complete and never replaced.
func (a *agentFS) add(src *os.File, digest string) error {
	if err := a.setWritable(true); err != nil {
		return err
	}
	defer a.makeReadOnly()
	tmp := filepath.Join(a.dir, ".new-"+digest)
	// A leftover of a crash: never bind-mounted, safe to unlink.
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o555)
	if err != nil {
		return fmt.Errorf("shared agent filesystem: %w", err)
	}
	h := sha256.New()
	_, err = src.Seek(0, io.SeekStart)
	if err == nil {
		_, err = io.Copy(io.MultiWriter(out, h), src)
	}
	if err == nil {
		err = out.Chmod(0o555) // whatever the umask
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if got := hex.EncodeToString(h.Sum(nil)); err == nil && got != digest {
		err = fmt.Errorf("the agent binary changed while it was being copied (sha256 %s, then %s)", digest, got)
	}
	if err == nil {
		err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, filepath.Join(a.dir, digest), unix.RENAME_NOREPLACE)
		if errors.Is(err, unix.EEXIST) {
			err = nil
		}
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("shared agent filesystem: add %s: %w", digest, err)
	}
	return nil
}

// ReleaseAgentFS unmounts the runtime's shared agent filesystem (and
// removes its directory) and runsc's null-netns pin (releaseNullNetns) if
// the runtime has no sandbox at all: no state
// directory under StateRoot (a probe's included) and no container in its
// RootDir. A server calls it as it stops (with sandboxes, which outlive
// it, the filesystem stays), and so do tests and the benchmark, to leave
// no mount behind. Without the filesystem it is a no-op.
func (r *Runtime) ReleaseAgentFS(ctx context.Context) error {
	a := r.agent
	a.mu.Lock()
	defer a.mu.Unlock()
	entries, err := os.ReadDir(r.stateRoot)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("release the shared agent filesystem: %w", err)
	}
	var left []string
	for _, e := range entries {
		if e.Name() != agentFSName {
			left = append(left, e.Name())
		}
	}
	ids, err := r.runtimeIDs()
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("release the shared agent filesystem: %w", err)
	}
	for _, id := range ids {
		if !slices.Contains(left, id.String()) {
			left = append(left, id.String())
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("release the shared agent filesystem: the runtime still has sandboxes %q", left)
	}
	if err := r.releaseNullNetns(ctx); err != nil {
		return fmt.Errorf("release runsc's null network namespace: %w", err)
	}
	if err := rootfs.Unmount(ctx, r.log, a.dir); err != nil {
		return fmt.Errorf("release the shared agent filesystem: %w", err)
	}
	if err := os.Remove(a.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("release the shared agent filesystem: %w", err)
	}
	a.mounted = false
	clear(a.known)
	return nil
}
