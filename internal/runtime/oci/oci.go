// Package oci implements runtime.Runtime on an OCI runtime binary: runc,
// crun or gVisor's runsc. Each sandbox is one container, created detached
// (`create` + `start`) so it outlives the server process, whose root
// filesystem is an overlayfs over the template's read-only tree (runc and
// crun: over an idmapped view of it, the sandbox being in a user namespace
// whose root is a host id range of its own, see Config.IDPool) and whose
// first process is the guest agent listening on a Unix socket in a
// bind-mounted host directory.
//
// Per-sandbox state lives in StateRoot/<sandbox id>/:
//
//	bundle/config.json  the OCI spec
//	disk.img            with a disk limit: a sparse ext4 image of that size,
//	                    loop-mounted at fs/ (see rootfs.MakeImage)
//	fs/                 the sandbox's own filesystem (the image; without a
//	                    limit a directory on StateRoot's filesystem):
//	  upper/, work/     the overlay's upper and work directories
//	  meta/             without a limit a small tmpfs; the agent's files:
//	    run/            bind-mounted at /.airlock/run; the agent listens on run/agent.sock
//	lower/              runc, crun: where the template's idmapped view is attached while the overlay is mounted, on kernels that cannot use it detached
//	idrange             the sandbox's host uid/gid range (runc, crun): see Config.IDPool
//	userns              runc, crun: the sandbox's user namespace (owned by the range's first id), bind-mounted; the runtime joins it
//	rootfs/             the overlay mount (the container's root)
//	net/                with a network: the netns marker, the network
//	                    namespace's sysfs at sys/ (runc, crun), and files/,
//	                    a small tmpfs of the sandbox's own holding the
//	                    resolv.conf and CA files it bind-mounts (network.go)
//	agent.log           the agent's stdout and stderr
//	pid                 the runtime's --pid-file
//	stop-requested      written by Stop, so State can tell a requested stop from an OOM kill
//	suspending, checkpoint/, snapshot.json
//	                    a suspended sandbox's snapshot (suspend.go)
//
// and the runtime's shared agent filesystem (agentfs.go) in
// StateRoot/.agentfs/: a read-only tmpfs holding each agent version as
// <sha256 hex>, which every sandbox bind-mounts read-only at
// /.airlock/bin/airlock-agent (nothing is copied per sandbox).
//
// Nothing the guest can see names a host path: the overlay's layers are
// given as /proc/self/fd links, the agent's binary is bind-mounted from
// the shared tmpfs, the network files from the sandbox's net/files tmpfs
// and its run directory from the sandbox's own filesystem, so the mount
// table shows them as paths inside those (/<digest>, /resolv.conf,
// /meta/run), not in the data directory, and statfs on them shows those
// filesystems, not the host's disk.
package oci

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/airlockdev/airlock/internal/cgroups"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/rootfs"
	"github.com/airlockdev/airlock/internal/runtime"
)

// Flavor names a supported OCI runtime.
type Flavor string

// Supported flavors.
const (
	FlavorRunc  Flavor = "runc"
	FlavorCrun  Flavor = "crun"
	FlavorRunsc Flavor = "runsc"
)

// ParseFlavor parses "runc", "crun" or "runsc".
func ParseFlavor(s string) (Flavor, error) {
	switch f := Flavor(s); f {
	case FlavorRunc, FlavorCrun, FlavorRunsc:
		return f, nil
	}
	return "", fmt.Errorf("unknown OCI runtime %q (want runc, crun or runsc)", s)
}

// DefaultCgroupParent is the cgroup under which sandboxes are created.
const DefaultCgroupParent = "/airlock"

// Config configures a Runtime.
type Config struct {
	Flavor string // "runc", "crun" or "runsc"
	Binary string // the runtime binary; "" looks the flavor's name up in PATH
	// RootDir is the runtime's --root (its own state): absolute, without
	// symlinks. Give every flavor its own, e.g. DATA/runtime/runsc.
	RootDir string
	// StateRoot holds one directory per sandbox, StateRoot/<sandbox id>.
	StateRoot    string
	CgroupParent string // default DefaultCgroupParent
	// IDPool is where the host uid/gid ranges of runc and crun sandboxes'
	// user namespaces come from (zero value: the defaults). Unused by runsc.
	IDPool runtime.IDPool
	Logger *slog.Logger // default slog.Default()
}

// Runtime drives one OCI runtime binary. It is safe for concurrent use;
// operations on one sandbox are serialised.
type Runtime struct {
	flavor       Flavor
	binary       string
	version      string
	rootDir      string
	stateRoot    string
	cgroupParent cgroups.Path
	cgroups      cgroups.Host
	// unifiedToHide is the cgroup2 mount that crun must not see on a hybrid
	// host ("" when crun runs directly).
	unifiedToHide string
	// ids hands out the sandboxes' user namespace id ranges; nil for
	// runsc.
	ids *idAllocator
	// agent is the shared agent filesystem, mounted on first use.
	agent *agentFS
	// images makes the sandboxes' disk images (a blank per size, not a
	// mkfs.ext4 per create).
	images rootfs.Images
	log    *slog.Logger

	mu    sync.Mutex
	locks map[model.SandboxID]*idLock
	live  map[model.SandboxID]liveProc // see cachedPhase
}

type idLock struct {
	mu   sync.Mutex
	refs int
}

var _ runtime.Runtime = (*Runtime)(nil)

// New checks the configuration and the runtime binary (its version is read
// by running it) and returns a Runtime. It does not prove the runtime can
// start containers here; Probe does.
func New(cfg Config) (*Runtime, error) {
	flavor, err := ParseFlavor(cfg.Flavor)
	if err != nil {
		return nil, err
	}
	binary := cfg.Binary
	if binary == "" {
		binary = string(flavor)
	}
	binary, err = exec.LookPath(binary)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flavor, err)
	}
	if binary, err = filepath.Abs(binary); err != nil {
		return nil, err
	}
	for name, dir := range map[string]string{"RootDir": cfg.RootDir, "StateRoot": cfg.StateRoot} {
		if dir == "" || !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
			return nil, fmt.Errorf("oci: %s %q must be an absolute, clean path", name, dir)
		}
	}
	if err := os.MkdirAll(cfg.RootDir, 0o700); err != nil {
		return nil, fmt.Errorf("oci: create runtime root: %w", err)
	}
	if resolved, err := filepath.EvalSymlinks(cfg.RootDir); err != nil {
		return nil, fmt.Errorf("oci: runtime root: %w", err)
	} else if resolved != cfg.RootDir {
		return nil, fmt.Errorf("oci: runtime root %q must not contain symlinks (it resolves to %q)", cfg.RootDir, resolved)
	}
	stateMode := os.FileMode(0o700)
	if usesUserns(flavor) {
		stateMode = 0o711 // see stateRootSearchable
	}
	if err := os.MkdirAll(cfg.StateRoot, stateMode); err != nil {
		return nil, fmt.Errorf("oci: create state root: %w", err)
	}
	parent := cfg.CgroupParent
	if parent == "" {
		parent = DefaultCgroupParent
	}
	cgParent, err := cgroups.ParsePath(parent)
	if err != nil {
		return nil, fmt.Errorf("oci: cgroup parent: %w", err)
	}
	host, err := cgroups.Detect()
	if err != nil {
		return nil, fmt.Errorf("oci: %w", err)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	r := &Runtime{
		flavor:       flavor,
		binary:       binary,
		rootDir:      cfg.RootDir,
		stateRoot:    cfg.StateRoot,
		cgroupParent: cgParent,
		cgroups:      host,
		log:          logger.With("runtime", string(flavor)),
		agent:        newAgentFS(cfg.StateRoot, logger.With("runtime", string(flavor))),
		locks:        map[model.SandboxID]*idLock{},
		live:         map[model.SandboxID]liveProc{},
	}
	if flavor == FlavorCrun && host.Layout == cgroups.LayoutHybrid {
		unified, _ := host.Unified()
		r.unifiedToHide = unified.MountPoint
	}
	if usesUserns(flavor) {
		pool, err := cfg.IDPool.WithDefaults(idPoolRules)
		if err != nil {
			return nil, err
		}
		if err := stateRootSearchable(cfg.StateRoot); err != nil {
			return nil, err
		}
		r.ids = newIDAllocator(pool)
		if err := r.ids.load(cfg.StateRoot); err != nil {
			return nil, fmt.Errorf("oci: %w", err)
		}
	}
	if r.version, err = r.readVersion(context.Background()); err != nil {
		return nil, err
	}
	return r, nil
}

// Info describes the runtime.
func (r *Runtime) Info() runtime.Info {
	info := runtime.Info{
		Name:         string(r.flavor),
		Version:      r.version,
		Binary:       r.binary,
		Isolation:    environment.IsolationSharedKernel,
		OOMScope:     environment.OOMKillsProcess,
		Capabilities: CapabilitiesOf(r.flavor),
	}
	if r.flavor == FlavorRunsc {
		info.Isolation = environment.IsolationUserSpaceKernel
		info.OOMScope = environment.OOMKillsSandbox
	}
	return info
}

// CapabilitiesOf says what a flavor can do on this host. Every flavor
// pauses (runc and crun with the cgroup freezer, runsc by stopping its
// sentry's tasks) and joins a prepared network. Only runsc checkpoints
// memory (runsc checkpoint/restore, in-tree; its snapshot keeps the root
// filesystem's changes too, which are in our overlay's upper layer): runc
// and crun would need CRIU, and Debian's does not work on the kernels
// Airlock runs on, so they claim only the filesystem snapshot (suspend.go).
func CapabilitiesOf(f Flavor) runtime.Capabilities {
	caps := runtime.NewCapabilities(runtime.CapPause, runtime.CapNetwork, runtime.CapLiveSnapshot)
	if f == FlavorRunsc {
		// A checkpoint by default, the filesystem only on request
		// (SuspendFilesystem).
		return caps.With(runtime.CapCheckpoint).With(runtime.CapFilesystemSnapshot)
	}
	return caps.With(runtime.CapFilesystemSnapshot)
}

// sandboxDirs are the host paths of one sandbox.
type sandboxDirs struct {
	state, bundle, image, fs, upper, work, meta, run, rootfs, agentLog, pidFile, stopMarker string
	// lower is where the idmapped view of the template is attached while
	// the overlay is being mounted, on kernels that cannot use it
	// detached (runc and crun).
	lower string
	// usernsPath is where the sandbox's user namespace is bind-mounted
	// (runc and crun, see sandboxUserns).
	usernsPath string
}

func (r *Runtime) dirs(id model.SandboxID) sandboxDirs {
	return dirsAt(filepath.Join(r.stateRoot, id.String()))
}

// dirsAt lays out the sandbox (or probe) directories below the state
// directory s.
func dirsAt(s string) sandboxDirs {
	fs := filepath.Join(s, "fs")
	meta := filepath.Join(fs, "meta")
	d := sandboxDirs{
		state:      s,
		bundle:     filepath.Join(s, "bundle"),
		image:      filepath.Join(s, "disk.img"),
		fs:         fs,
		upper:      filepath.Join(fs, "upper"),
		work:       filepath.Join(fs, "work"),
		meta:       meta,
		run:        filepath.Join(meta, "run"),
		lower:      filepath.Join(s, "lower"),
		usernsPath: filepath.Join(s, usernsFile),
		rootfs:     filepath.Join(s, "rootfs"),
		agentLog:   filepath.Join(s, "agent.log"),
		pidFile:    filepath.Join(s, "pid"),
		stopMarker: filepath.Join(s, "stop-requested"),
	}
	return d
}

// agentRunDir is the run directory that holds a running agent's socket. A
// sandbox created before the sandbox filesystem existed keeps it at the top
// of its state directory; a new (or re-created) one has it at d.run.
func (d sandboxDirs) agentRunDir() string {
	if legacy := filepath.Join(d.state, "run"); dirExists(legacy) {
		return legacy
	}
	return d.run
}

func (r *Runtime) cgroupPath(id model.SandboxID) (cgroups.Path, error) {
	return r.cgroupParent.Join(id.String())
}

// lock serialises operations on one sandbox; the returned func unlocks.
func (r *Runtime) lock(id model.SandboxID) func() {
	r.mu.Lock()
	l := r.locks[id]
	if l == nil {
		l = &idLock{}
		r.locks[id] = l
	}
	l.refs++
	r.mu.Unlock()
	l.mu.Lock()
	// The live cache stays: what it says is checked against the process,
	// the runtime's state files and the freezer before it is believed
	// (cachedPhase), so a mutation may start from it; it is dropped when
	// the mutation ends.
	return func() {
		l.mu.Unlock()
		r.mu.Lock()
		delete(r.live, id)
		if l.refs--; l.refs == 0 {
			delete(r.locks, id)
		}
		r.mu.Unlock()
	}
}

// errorTail returns the last lines of a log file for error messages.
func errorTail(file string) string {
	data, err := os.ReadFile(file)
	if err != nil || len(data) == 0 {
		return ""
	}
	const max = 2048
	if len(data) > max {
		data = data[len(data)-max:]
	}
	return strings.TrimSpace(string(data))
}
