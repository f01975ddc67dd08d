package environment

// Host tasks a sandbox may hold, per environment: the one place that says
// how a sandbox's guest pids limit becomes the host's. The runtimes apply
// it (internal/runtime/oci's host cgroup pids.max) and admission charges
// it against the node's pids budget (model.Resources.HostPids), so what
// admission counts is what the host lets the sandbox take.

// AgentPidsReserve is the room the host pids limit of a runc or crun
// sandbox keeps beside its workload's limit for the agent's threads and
// its short-lived helpers: a full workload cannot starve the agent of
// threads (a Go program dies when it cannot create one).
const AgentPidsReserve = 64

// RunscPids are runsc's host pids limit of a guest limit n: 4n+RunscPidsBase.
// Under runsc the host cgroup counts the sentry's threads, the gofer and
// the systrap stub processes, and exceeding it kills the whole sandbox
// instead of failing one fork: there it is only a backstop with headroom.
const (
	RunscPidsPerGuestTask = 4
	RunscPidsBase         = 256
)

// QEMUHostPids is what a qemu sandbox is charged: the threads of its QEMU
// process (one per vCPU, up to model.MaxCPUs, the block layer's worker
// pool of at most 64, the main loop, RCU and I/O threads), whatever its
// guest runs (guest processes are the VM kernel's, not the host's). The
// runtime that puts QEMU into a pids-limited cgroup uses this limit.
const QEMUHostPids = 256

// HostPids is the host pids limit of a sandbox of environment name whose
// guest (workload) pids limit is guest: runc and crun guest+AgentPidsReserve,
// runsc 4·guest+RunscPidsBase, qemu QEMUHostPids. A name this binary does
// not know gets the largest of them (runsc's), so admission never charges
// less than a runtime may allow.
func HostPids(name Name, guest int) int {
	switch name {
	case NameRunc, NameCrun:
		return guest + AgentPidsReserve
	case NameQEMU:
		return QEMUHostPids
	}
	return max(RunscPidsPerGuestTask*guest+RunscPidsBase, QEMUHostPids, guest+AgentPidsReserve)
}
