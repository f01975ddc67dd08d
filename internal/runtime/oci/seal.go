package oci

import (
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// agentSetupCaps are granted to the agent process on top of defaultCaps so
// that it can seal the sandbox (`--seal`: read-only mounts of its run
// directory and, under gVisor, of the cgroup filesystems). The agent drops
// them from every set, the bounding set included, before it serves its
// first request, so no workload process ever holds them. Only the
// bounding, effective and permitted sets get them: the ambient set, which
// processes would keep across exec, never does.
var agentSetupCaps = []string{"CAP_SYS_ADMIN", "CAP_SETPCAP"}

// sealArgs are the agent's arguments that ask it to seal the sandbox.
var sealArgs = []string{"--seal"}

// grantSealing gives the agent process of s what `--seal` needs: the set-up
// capabilities and, under the seccomp filter of runc and crun (computed for
// the workload's capabilities, where mount(2) is refused), mount(2). A
// workload calling mount still fails: the kernel asks for CAP_SYS_ADMIN,
// which it no longer has. The cgroup filesystem is mounted writable: the
// agent creates its workload cgroup there (--pids-max) and then seals it
// read-only itself before any workload runs.
func grantSealing(s *specs.Spec) {
	for i, m := range s.Mounts {
		if m.Destination == "/sys/fs/cgroup" {
			s.Mounts[i].Options = slices.DeleteFunc(slices.Clone(m.Options), func(o string) bool { return o == "ro" })
		}
	}
	c := s.Process.Capabilities
	c.Bounding = append(c.Bounding, agentSetupCaps...)
	c.Effective = append(c.Effective, agentSetupCaps...)
	c.Permitted = append(c.Permitted, agentSetupCaps...)
	if s.Linux.Seccomp != nil {
		s.Linux.Seccomp.Syscalls = append(s.Linux.Seccomp.Syscalls, specs.LinuxSyscall{Names: []string{"mount"}, Action: specs.ActAllow})
	}
}
