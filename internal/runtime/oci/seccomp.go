package oci

import (
	"fmt"
	goruntime "runtime"
	"slices"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// deniedSyscalls fail with EPERM in runc and crun sandboxes even where
// Docker's default profile would allow them (it does not for the sandbox's
// capabilities, but the denial must not depend on that): kernel attack
// surface that a sandbox has no need for, and the session keyring, which a
// container without a user namespace shares with the host.
var deniedSyscalls = []string{
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"keyctl", "add_key", "request_key",
	"perf_event_open", "bpf", "userfaultfd",
}

// seccompProfile returns the seccomp filter of a runc or crun sandbox whose
// spec (capabilities included) is s: Docker's default profile for those
// capabilities, with deniedSyscalls and new user namespaces (unshare or
// clone with CLONE_NEWUSER) refused with EPERM. clone3 stays as Docker has
// it without CAP_SYS_ADMIN: ENOSYS (its flags cannot be inspected), so
// callers fall back to clone.
func seccompProfile(s *specs.Spec) (*specs.LinuxSeccomp, error) {
	p, err := seccomp.GetDefaultProfile(s)
	if err != nil {
		return nil, fmt.Errorf("docker's default seccomp profile: %w", err)
	}
	if p == nil {
		return nil, fmt.Errorf("docker's default seccomp profile is empty")
	}
	// libseccomp does not let a conditional rule override an unconditional
	// one for the same syscall: the denied names leave every other rule, and
	// no rule may allow clone or unshare without looking at the flags.
	rules := make([]specs.LinuxSyscall, 0, len(p.Syscalls)+3)
	for _, r := range p.Syscalls {
		r.Names = slices.DeleteFunc(slices.Clone(r.Names), func(n string) bool { return slices.Contains(deniedSyscalls, n) })
		if len(r.Names) == 0 {
			continue
		}
		if r.Action == specs.ActAllow && len(r.Args) == 0 {
			for _, n := range []string{"clone", "unshare"} {
				if slices.Contains(r.Names, n) {
					return nil, fmt.Errorf("docker's default seccomp profile allows %s without conditions for capabilities %q: new user namespaces cannot be denied", n, s.Process.Capabilities.Bounding)
				}
			}
		}
		rules = append(rules, r)
	}
	eperm := uint(unix.EPERM)
	cloneFlags := uint(0) // the argument of clone that holds the flags
	if goruntime.GOARCH == "s390x" {
		cloneFlags = 1
	}
	newUser := func(name string, index uint) specs.LinuxSyscall {
		return specs.LinuxSyscall{
			Names: []string{name}, Action: specs.ActErrno, ErrnoRet: &eperm,
			Args: []specs.LinuxSeccompArg{{Index: index, Value: unix.CLONE_NEWUSER, ValueTwo: unix.CLONE_NEWUSER, Op: specs.OpMaskedEqual}},
		}
	}
	rules = append(rules,
		specs.LinuxSyscall{Names: slices.Clone(deniedSyscalls), Action: specs.ActErrno, ErrnoRet: &eperm},
		newUser("unshare", 0),
		newUser("clone", cloneFlags),
	)
	p.Syscalls = rules
	return p, nil
}
