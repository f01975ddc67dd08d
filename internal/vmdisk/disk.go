// Package vmdisk makes the disks of QEMU microVM sandboxes: a read-only raw
// ext4 image per template, built once from the template's tree and cached
// (Images), and per sandbox a copy-on-write disk over it (Clone) that
// shares the image's bytes instead of copying them: a reflinked raw file
// where the host filesystem can share extents, else a qcow2 overlay. A clone
// of a frozen clone is a base snapshot; Info reads a disk's backing chain.
//
// It runs mkfs.ext4 (e2fsprogs) and qemu-img (qemu-utils).
package vmdisk

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/atomicfile"
	"github.com/airlockdev/airlock/internal/rootfs/treecopy"
)

// Format of a disk file.
type Format string

// Formats Clone makes and accepts.
const (
	Raw   Format = "raw"
	QCOW2 Format = "qcow2"
)

// toolTimeout bounds one qemu-img run when ctx has no earlier deadline.
const toolTimeout = 30 * time.Second

// toolEnv is the environment of the programs this package runs.
func toolEnv() []string {
	return []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
}

// run runs a program with a fixed environment and returns its stdout; the
// error holds its stderr.
func run(ctx context.Context, timeout time.Duration, prog string, args ...string) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = toolEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, ctx.Err())
		}
		return nil, fmt.Errorf("%s: %w: %s", prog, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// Clone makes dst, a copy-on-write disk over base, without copying base's
// bytes, and returns dst's format. base is an image from Images.Image or a
// disk made by Clone (a chain of clones is how base snapshots work: clone a
// frozen clone); baseFormat is its format, given rather than probed (so that
// a raw disk a guest wrote a qcow2 header into is never taken for qcow2).
//
//   - base raw, on a filesystem that shares extents (btrfs, XFS with
//     reflink=1) with dst's directory: dst is a reflink of base (FICLONE),
//     raw, independent of base once made.
//   - otherwise dst is a qcow2 overlay backed by base's absolute path, with
//     4 KiB subclusters (extended_l2) so a guest's 4 KiB write copies 4 KiB,
//     not a whole cluster. base must then stay where it is and unchanged for
//     as long as dst is used: the caller freezes it (Images already does).
//
// dst must not exist (else an error wrapping fs.ErrExist, and the existing
// file is left alone); it is made with mode 0600. On any failure nothing is
// left at dst. dst is synced (file and directory) before Clone returns.
func Clone(ctx context.Context, base string, baseFormat Format, dst string) (Format, error) {
	return clone(ctx, base, baseFormat, dst, true)
}

// clone is Clone; reflink false forces a qcow2 overlay (for tests).
func clone(ctx context.Context, base string, baseFormat Format, dst string, reflink bool) (_ Format, err error) {
	if baseFormat != Raw && baseFormat != QCOW2 {
		return "", fmt.Errorf("clone %s: base format %q is neither %q nor %q", base, baseFormat, Raw, QCOW2)
	}
	abs, err := filepath.Abs(base)
	if err != nil {
		return "", fmt.Errorf("clone %s: %w", base, err)
	}
	bst, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("clone: base: %w", err)
	}
	if !bst.Mode().IsRegular() {
		return "", fmt.Errorf("clone: base %s is not a regular file (mode %s)", abs, bst.Mode())
	}
	// Absolute, so that qemu-img never reads "proto:…" as a protocol.
	if dst, err = filepath.Abs(dst); err != nil {
		return "", fmt.Errorf("clone %s: %w", abs, err)
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("clone %s: %w", abs, err)
	}
	// Reserve dst: qemu-img create would overwrite an existing file.
	f, err := os.OpenFile(dst, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return "", fmt.Errorf("clone %s: %w", abs, err)
	}
	defer func() {
		if f != nil {
			f.Close()
		}
		if err != nil {
			_ = os.Remove(dst)
			err = fmt.Errorf("clone %s to %s: %w", abs, dst, err)
		}
	}()
	if reflink && baseFormat == Raw {
		ok, err := reflinkBase(ctx, f, abs, bst.Size())
		if err != nil {
			return "", err
		}
		if ok {
			return Raw, atomicfile.SyncFile(f.Name())
		}
	}
	if _, err := run(ctx, toolTimeout, "qemu-img", "create", "-q", "-f", string(QCOW2),
		"-F", string(baseFormat), "-b", abs,
		"-o", "extended_l2=on,cluster_size=128k", dst); err != nil {
		return "", err
	}
	return QCOW2, atomicfile.SyncFile(f.Name())
}

// reflinkBase clones base (size bytes) into the empty dst if dst's
// filesystem can share base's extents, and reports whether it did. It never
// leaves a byte copy in dst: it probes with a small file first, and should
// the clone itself still fall back to copying, it empties dst and reports
// false.
func reflinkBase(ctx context.Context, dst *os.File, base string, size int64) (bool, error) {
	var bs, ds unix.Stat_t
	if err := unix.Stat(base, &bs); err != nil {
		return false, fmt.Errorf("stat: %w", err)
	}
	if err := unix.Fstat(int(dst.Fd()), &ds); err != nil {
		return false, fmt.Errorf("stat: %w", err)
	}
	if bs.Dev != ds.Dev || size == 0 {
		return false, nil
	}
	if ok, err := canReflink(ctx, filepath.Dir(dst.Name())); err != nil || !ok {
		return false, err
	}
	src, err := os.Open(base)
	if err != nil {
		return false, err
	}
	defer src.Close()
	m, err := treecopy.File(ctx, dst, src, size)
	if err != nil {
		return false, err
	}
	if m != treecopy.Reflink {
		if err := dst.Truncate(0); err != nil {
			return false, err
		}
		return false, nil
	}
	return true, nil
}

// canReflink reports whether files in dir can share extents, by cloning a
// 4 KiB probe file (should it be copied instead, that is 4 KiB).
func canReflink(ctx context.Context, dir string) (bool, error) {
	src, err := os.CreateTemp(dir, ".reflink-probe-*")
	if err != nil {
		return false, fmt.Errorf("reflink probe: %w", err)
	}
	defer os.Remove(src.Name())
	defer src.Close()
	dst, err := os.CreateTemp(dir, ".reflink-probe-*")
	if err != nil {
		return false, fmt.Errorf("reflink probe: %w", err)
	}
	defer os.Remove(dst.Name())
	defer dst.Close()
	if _, err := src.Write(make([]byte, 4096)); err != nil {
		return false, fmt.Errorf("reflink probe: %w", err)
	}
	m, err := treecopy.File(ctx, dst, src, 4096)
	if err != nil {
		return false, fmt.Errorf("reflink probe: %w", err)
	}
	return m == treecopy.Reflink, nil
}

// DiskInfo describes a disk file and, through Backing, its backing chain.
type DiskInfo struct {
	Path        string    // absolute for the disk asked about; a backing file's as recorded (Clone records absolute paths)
	Format      Format    // raw, qcow2, …
	VirtualSize int64     // bytes the guest sees
	ActualSize  int64     // bytes allocated on the host
	Backing     *DiskInfo // the backing file, nil at the chain's bottom
}

// Depth is the number of files in the chain: 1 for a disk without backing.
func (d DiskInfo) Depth() int {
	n := 0
	for p := &d; p != nil; p = p.Backing {
		n++
	}
	return n
}

// qemuImgInfo is one element of qemu-img info --output=json --backing-chain.
type qemuImgInfo struct {
	Filename    string `json:"filename"`
	Format      string `json:"format"`
	VirtualSize int64  `json:"virtual-size"`
	ActualSize  int64  `json:"actual-size"`
	BackingFile string `json:"full-backing-filename"`
}

// Info reads path's format, virtual size and backing chain with qemu-img
// info --backing-chain. It reads with shared locks off (-U), so it works on
// the disk of a running VM (the numbers may then be a moment old). path's
// own format is probed (backing files have theirs recorded): do not ask
// Info about a raw disk a guest has written, whose first bytes could make
// it look like another format. A missing file or a broken chain (a backing
// file gone) is an error.
func Info(ctx context.Context, path string) (DiskInfo, error) {
	path, err := filepath.Abs(path) // so that qemu-img never reads "proto:…" as a protocol
	if err != nil {
		return DiskInfo{}, fmt.Errorf("disk info: %w", err)
	}
	out, err := run(ctx, toolTimeout, "qemu-img", "info", "-U", "--output=json", "--backing-chain", "--", path)
	if err != nil {
		return DiskInfo{}, fmt.Errorf("disk info %s: %w", path, err)
	}
	var chain []qemuImgInfo
	if err := json.Unmarshal(out, &chain); err != nil {
		return DiskInfo{}, fmt.Errorf("disk info %s: parse qemu-img output: %w", path, err)
	}
	if len(chain) == 0 {
		return DiskInfo{}, fmt.Errorf("disk info %s: qemu-img reported no image", path)
	}
	var below *DiskInfo
	for i := len(chain) - 1; i >= 0; i-- {
		c := chain[i]
		if (c.BackingFile != "") != (below != nil) {
			return DiskInfo{}, fmt.Errorf("disk info %s: %s: inconsistent backing chain (backing %q)", path, c.Filename, c.BackingFile)
		}
		below = &DiskInfo{Path: c.Filename, Format: Format(c.Format), VirtualSize: c.VirtualSize, ActualSize: c.ActualSize, Backing: below}
	}
	return *below, nil
}
