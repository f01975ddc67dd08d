package bench

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlockdev/airlock/internal/cgroups"
	"github.com/airlockdev/airlock/internal/rootfs"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/runtime/oci"
)

// The limits an Airlock sandbox gets by default (the API's 1 CPU and
// 512 MiB, the worker's 1024 tasks); raw peers get the same, so that both
// pay for the same cgroup setup.
const (
	peerCPUs      = 1
	peerMemoryMiB = 512
	peerPids      = 1024
)

// guestPath is the PATH of the command in a raw peer (the same as the guest
// agent's default).
const guestPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// peerArgs returns the command every subject runs.
func peerArgs() []string { return []string{"echo", "hello"} }

// peerOutput is what it must print.
const peerOutput = "hello\n"

// peerSpec builds the config.json of a raw peer's bundle: Airlock's own
// sandbox spec (oci.BaseSpec: namespaces, mounts, capabilities, rlimits and
// resource limits; for runc and crun the user namespace of ids) without the
// guest agent, running echo directly.
func peerSpec(flavor oci.Flavor, rootfsDir, hostname string, cg cgroups.Path, ids *rootfs.IDRange) (*specs.Spec, error) {
	return oci.BaseSpec(flavor, oci.BaseParams{
		IDs:      ids,
		Args:     peerArgs(),
		Env:      []string{"HOME=/root", "PATH=" + guestPath},
		Rootfs:   rootfsDir,
		Hostname: hostname,
		Cgroup:   cg,
		Resources: runtime.Resources{
			CPUs: peerCPUs, MemoryBytes: int64(peerMemoryMiB) << 20, PidsLimit: peerPids,
		},
	})
}

// peerIDs is the user namespace id range of the runc and crun peers, as an
// Airlock sandbox has one: just below the default pool of Airlock's
// sandboxes (oci.IDPool), so the in-process servers never use it.
func peerIDs(peer string) *rootfs.IDRange {
	if peer != PeerRunc && peer != PeerCrun {
		return nil
	}
	return &rootfs.IDRange{Host: oci.DefaultIDBase - oci.IDRangeSize, Size: oci.IDRangeSize}
}
