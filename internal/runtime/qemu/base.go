package qemu

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/atomicfile"
	"github.com/airlockdev/airlock/internal/filelock"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/runtime/qemu/qmp"
	"github.com/airlockdev/airlock/internal/vmdisk"
)

// A base snapshot is a VM of one template × size (vCPUs, memory, disk,
// with or without a NIC) booted once until its agent answered, then saved:
// StateRoot/.base/<key>/ holds its frozen disk, its RAM file and its device
// state. A create restores it instead of booting: a new copy-on-write disk
// over the frozen one, the RAM file mapped private (copy-on-write: clones
// share every page they do not write, through the host's page cache) and
// the device state loaded; Start then gives the clone its own hostname,
// entropy, time and settings.
type base struct {
	dir  string
	meta baseRecord
}

// baseRecord is base.json, written last: a base without it is not used.
type baseRecord struct {
	Key       string        `json:"key"`
	Disk      string        `json:"disk"`
	Format    vmdisk.Format `json:"disk_format"`
	Chain     []diskLayer   `json:"chain,omitempty"` // Disk's backing chain
	Memory    string        `json:"memory"`
	State     string        `json:"state"`
	BootTime  time.Duration `json:"boot_ns"`
	CreatedAt time.Time     `json:"created_at"`
}

const baseMeta = "base.json"

// baseKey names the base snapshot a machine can be cloned from: everything
// a restore must match (the template, disk size, devices, memory, vCPUs,
// accelerator, boot inputs and QEMU itself).
func (r *Runtime) baseKey(spec runtime.Spec, m machine) string {
	h := sha256.New()
	// confined=1: bases made since QEMU runs unprivileged record their
	// disk's backing chain (older ones do not, and are not used).
	fmt.Fprintf(h, "confined=1\x00tree=%s\x00disk=%d\x00cpus=%d\x00mem=%d\x00nic=%t\x00accel=%s\x00kernel=%s\x00initrd=%s\x00cmdline=%s\x00qemu=%s %s\x00ports=%d\x00",
		spec.RootFS.Lower, diskBytes(spec), m.CPUs, m.MemoryMiB, m.NIC, m.Accel, m.Kernel, m.Initrd, r.boot.CommandLine, r.binary, r.version, agentPorts)
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// baseLock is the key's lock within this process: a one-slot channel, so
// a create whose context ends stops waiting for another's build.
func (r *Runtime) baseLock(key string) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	l, ok := r.bases[key]
	if !ok {
		l = make(chan struct{}, 1)
		r.bases[key] = l
	}
	return l
}

// baseFor returns the base snapshot of the spec's template × size, making
// it first when there is none (under the key's lock: concurrent creates
// wait for one build). A base that cannot be made is logged and reported
// as none: the create boots instead, it is never an error.
func (r *Runtime) baseFor(ctx context.Context, spec runtime.Spec, m machine) (base, bool) {
	if r.noBase {
		return base{}, false
	}
	key := r.baseKey(spec, m)
	dir := filepath.Join(r.stateRoot, baseDir, key)
	if b, err := readBase(dir); err == nil {
		return b, true // made: never replaced, clones name its files
	}
	l := r.baseLock(key)
	select {
	case l <- struct{}{}:
	case <-ctx.Done():
		return base{}, false
	}
	defer func() { <-l }()
	// Across processes (another server or runtime on this state root)
	// too: one builds, the others wait and take its base.
	lock, err := lockBase(ctx, filepath.Join(r.stateRoot, baseDir, key+".lock"))
	if err != nil {
		r.log.WarnContext(ctx, "no base snapshot; sandboxes of this template and size boot", "key", key, "err", err)
		return base{}, false
	}
	defer lock.Close()
	if b, err := readBase(dir); err == nil {
		return b, true
	}
	r.sweepBaseLeftovers(ctx, key)
	b, err := r.makeBase(ctx, key, spec, m)
	if err != nil {
		r.log.WarnContext(ctx, "no base snapshot; sandboxes of this template and size boot", "key", key, "err", err)
		return base{}, false
	}
	r.log.InfoContext(ctx, "base snapshot made", "key", key, "boot", b.meta.BootTime.Round(time.Millisecond))
	return b, true
}

func readBase(dir string) (base, error) {
	b, err := os.ReadFile(filepath.Join(dir, baseMeta))
	if err != nil {
		return base{}, err
	}
	var rec baseRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return base{}, fmt.Errorf("%s: %w", filepath.Join(dir, baseMeta), err)
	}
	return base{dir: dir, meta: rec}, nil
}

// baseBootTimeout bounds a base VM's boot until its agent answers.
const baseBootTimeout = 2 * time.Minute

// makeBase boots the base VM in a temporary directory, waits for its
// agent, saves it and moves the directory into place.
func (r *Runtime) makeBase(ctx context.Context, key string, spec runtime.Spec, m machine) (base, error) {
	root := filepath.Join(r.stateRoot, baseDir)
	if err := os.MkdirAll(root, 0o700); err != nil {
		return base{}, err
	}
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return base{}, err
	}
	// The builder's pid in the name: sweepBaseLeftovers removes only
	// the builds of processes that no longer run.
	tmp := filepath.Join(root, fmt.Sprintf("%s.tmp-%d-%s", key, os.Getpid(), hex.EncodeToString(rnd[:])))
	final := filepath.Join(root, key)
	name := "base-" + key + "-" + hex.EncodeToString(rnd[:])
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return base{}, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = r.removeVM(context.WithoutCancel(ctx), tmp, name)
		}
	}()
	image, err := r.templateImage(ctx, spec)
	if err != nil {
		return base{}, err
	}
	// The base VM runs in the temporary directory; base.json names the
	// files by their final paths, which clones' disks and RAM use.
	bm := m
	bm.Netns, bm.TAP, bm.MAC = "", "", "" // a NIC joined to nothing
	bm.Guest = guestSettings{}
	bm.Disk = filepath.Join(tmp, diskFile)
	if bm.DiskFormat, err = vmdisk.Clone(ctx, image, vmdisk.Raw, bm.Disk); err != nil {
		return base{}, err
	}
	bm.Chain = chainOver(bm.DiskFormat, diskLayer{image, vmdisk.Raw}, nil)
	bm.Memory, bm.MemoryShared = filepath.Join(tmp, memoryFile), true
	start := time.Now()
	if _, err := r.launch(ctx, tmp, name, bm, false); err != nil {
		return base{}, err
	}
	if err := withQMP(ctx, tmp, func(c *qmp.Client) error { return c.Cont(ctx) }); err != nil {
		return base{}, err
	}
	if err := waitAgent(ctx, tmp, baseBootTimeout, r, true); err != nil {
		return base{}, fmt.Errorf("base VM: %w (console: %s)", err, consoleTail(tmp))
	}
	boot := time.Since(start)
	if err := saveVM(ctx, tmp, filepath.Join(tmp, stateFile), true); err != nil {
		return base{}, err
	}
	// The RAM is in the memory file's page cache: every clone maps it,
	// for as long as the base exists, across host restarts too.
	if err := atomicfile.SyncFile(bm.Memory); err != nil {
		return base{}, err
	}
	pid, err := readPid(tmp)
	if err == nil {
		err = killVM(ctx, pid, name)
	}
	if err != nil {
		return base{}, err
	}
	r.closeLog(tmp)
	if err := r.removeCgroup(ctx, name); err != nil {
		return base{}, err
	}
	uid := readUID(tmp)
	for _, f := range []string{qmpSocket, pidFile, qemuLog, logFIFO, uidFile} {
		_ = os.Remove(filepath.Join(tmp, f))
	}
	if uid != 0 {
		if err := r.releaseUID(ctx, tmp, uid); err != nil {
			return base{}, err
		}
	}
	// The frozen disk and RAM stay root's (clones get descriptors).
	if err := os.Chown(bm.Memory, 0, 0); err != nil {
		return base{}, err
	}
	for i := range agentPorts {
		_ = os.Remove(filepath.Join(tmp, agentSocketName(i)))
	}
	// The disk's and memory's final paths: rebase nothing, the names
	// inside the directory stay.
	rec := baseRecord{
		Key:       key,
		Disk:      filepath.Join(final, diskFile),
		Format:    bm.DiskFormat,
		Chain:     bm.Chain,
		Memory:    filepath.Join(final, memoryFile),
		State:     filepath.Join(final, stateFile),
		BootTime:  boot,
		CreatedAt: time.Now().UTC(),
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return base{}, err
	}
	if err := atomicfile.Write(filepath.Join(tmp, baseMeta), b, 0o600); err != nil {
		return base{}, err
	}
	// final has no base.json (checked under the lock): at most a crash's
	// half-removed leftover.
	if err := os.RemoveAll(final); err != nil {
		return base{}, err
	}
	if err := os.Rename(tmp, final); err != nil {
		return base{}, err
	}
	ok = true
	return base{dir: final, meta: rec}, nil
}

// waitAgent waits until the agent of the VM in dir answers on its first
// port, then closes the connection and gives the guest a moment to see it
// go (a base snapshot must not hold a host connection: its clones' hosts
// are others). warm: first take the paths every clone takes at once (a
// guest configuration, a process start), so the snapshot holds them in the
// guest's page cache and its clones do not read them from disk again.
func waitAgent(ctx context.Context, dir string, limit time.Duration, r *Runtime, warm bool) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) { return dialPort(ctx, dir, agentSocket) }, r.log)
	err := retryConfigure(ctx, r.log, func() error {
		_, err := c.Info(ctx)
		return err
	})
	if err == nil && warm {
		warmGuest(ctx, c, r.log)
	}
	c.Close()
	if err != nil {
		return err
	}
	select {
	case <-time.After(200 * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// warmGuest runs what a clone's first moments run. Failures only cost
// the clones that warmth: they are logged, not returned.
func warmGuest(ctx context.Context, c *agentclient.Client, log *slog.Logger) {
	if err := c.ConfigureGuest(ctx, agentproto.GuestConfig{Hostname: "airlock"}); err != nil {
		log.DebugContext(ctx, "warming the base VM: guest configuration", "err", err)
	}
	for _, args := range [][]string{{"/bin/sh", "-c", "true"}, {"/bin/true"}} {
		res, err := c.Run(ctx, agentproto.StartRequest{ID: model.NewProcessID().String(), Args: args})
		if err == nil && res.ExitCode == 0 {
			return
		}
		log.DebugContext(ctx, "warming the base VM: a process", "args", args, "err", err)
	}
}

// createFromBase makes the sandbox's VM by restoring base: a new disk over
// the base's frozen one, the base's RAM mapped private, its state loaded.
func (r *Runtime) createFromBase(ctx context.Context, dir string, spec runtime.Spec, m machine, b base) error {
	t0 := time.Now()
	m.Disk = filepath.Join(dir, diskFile)
	var err error
	if m.DiskFormat, err = vmdisk.Clone(ctx, b.meta.Disk, b.meta.Format, m.Disk); err != nil {
		return err
	}
	m.Chain = chainOver(m.DiskFormat, diskLayer{b.meta.Disk, b.meta.Format}, b.meta.Chain)
	tDisk := time.Since(t0)
	m.Memory, m.MemoryShared = b.meta.Memory, false
	m.Base = b.dir
	m.MAC = "" // the device's MAC is the base's (its state is restored)
	if err := writeMachine(dir, m); err != nil {
		return err
	}
	if _, err := r.launch(ctx, dir, spec.ID.String(), m, true); err != nil {
		return err
	}
	tLaunch := time.Since(t0)
	if err := loadVM(ctx, dir, b.meta.State, true); err != nil {
		return fmt.Errorf("%w (console: %s)", err, consoleTail(dir))
	}
	r.log.DebugContext(ctx, "restored the base snapshot", "sandbox", spec.ID, "disk", tDisk, "launch", tLaunch-tDisk, "load", time.Since(t0)-tLaunch)
	return nil
}

// lockBase takes the flock of a base snapshot's key at path, making its
// directory first.
func lockBase(ctx context.Context, path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	return filelock.Lock(ctx, path)
}

// sweepBaseLeftovers ends the QEMU and removes the directory of base
// builds of key whose process no longer runs (a server that crashed
// mid-build). Called under the key's locks.
func (r *Runtime) sweepBaseLeftovers(ctx context.Context, key string) {
	root := filepath.Join(r.stateRoot, baseDir)
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), key+".tmp-")
		if !ok || !e.IsDir() {
			continue
		}
		var owner int
		if _, err := fmt.Sscanf(rest, "%d-", &owner); err == nil && owner != os.Getpid() && unix.Kill(owner, 0) == nil {
			continue // another live process builds it
		}
		dir := filepath.Join(root, e.Name())
		if _, rnd, ok := strings.Cut(rest, "-"); ok {
			// That build's QEMU (not a reused pid), cgroup and uid.
			if err := r.removeVM(ctx, dir, "base-"+key+"-"+rnd); err != nil {
				r.log.WarnContext(ctx, "leftover of a base snapshot build stays", "dir", dir, "err", err)
			}
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			r.log.WarnContext(ctx, "leftover of a base snapshot build stays", "dir", dir, "err", err)
		}
	}
}
