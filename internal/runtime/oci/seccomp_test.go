package oci

import (
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

func TestSeccompProfile(t *testing.T) {
	for _, flavor := range allFlavors {
		t.Run(string(flavor), func(t *testing.T) {
			s, err := BaseSpec(flavor, BaseParams{Args: []string{"true"}, Rootfs: "/r", Hostname: "h", Cgroup: "/airlock/x"})
			if err != nil {
				t.Fatal(err)
			}
			p := s.Linux.Seccomp
			if flavor == FlavorRunsc {
				if p != nil {
					t.Fatalf("runsc got a seccomp profile; gVisor filters syscalls itself")
				}
				return
			}
			if p == nil {
				t.Fatal("no seccomp profile")
			}
			if p.DefaultAction != specs.ActErrno || p.DefaultErrnoRet == nil || *p.DefaultErrnoRet != uint(unix.EPERM) {
				t.Errorf("default action %s errno %v, want EPERM", p.DefaultAction, p.DefaultErrnoRet)
			}
			allowed := func(name string) []specs.LinuxSyscall {
				var out []specs.LinuxSyscall
				for _, r := range p.Syscalls {
					if r.Action == specs.ActAllow && slices.Contains(r.Names, name) {
						out = append(out, r)
					}
				}
				return out
			}
			denied := func(name string, args []specs.LinuxSeccompArg) bool {
				for _, r := range p.Syscalls {
					if r.Action == specs.ActErrno && r.ErrnoRet != nil && *r.ErrnoRet == uint(unix.EPERM) &&
						slices.Contains(r.Names, name) && slices.Equal(r.Args, args) {
						return true
					}
				}
				return false
			}
			for _, name := range deniedSyscalls {
				if a := allowed(name); len(a) > 0 {
					t.Errorf("%s is allowed: %+v", name, a)
				}
				if !denied(name, nil) {
					t.Errorf("%s has no EPERM rule", name)
				}
			}
			newUser := []specs.LinuxSeccompArg{{Index: 0, Value: unix.CLONE_NEWUSER, ValueTwo: unix.CLONE_NEWUSER, Op: specs.OpMaskedEqual}}
			for _, name := range []string{"clone", "unshare"} {
				if !denied(name, newUser) {
					t.Errorf("%s with CLONE_NEWUSER has no EPERM rule", name)
				}
				for _, r := range allowed(name) {
					if len(r.Args) == 0 {
						t.Errorf("%s is allowed unconditionally: %+v", name, r)
					}
				}
			}
			if a := allowed("clone3"); len(a) > 0 {
				t.Errorf("clone3 is allowed (its flags cannot be checked): %+v", a)
			}
			// What the agent needs.
			for _, name := range []string{"openat2", "prctl", "wait4", "setuid", "setgid", "inotify_init1", "pipe2", "socket", "ioctl", "execve", "clone"} {
				if len(allowed(name)) == 0 {
					t.Errorf("%s is not allowed", name)
				}
			}
		})
	}
}
