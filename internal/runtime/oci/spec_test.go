package oci

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlockdev/airlock/internal/cgroups"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/rootfs"
	"github.com/airlockdev/airlock/internal/runtime"
)

func TestBundleSpec(t *testing.T) {
	res := runtime.Resources{CPUs: 2, MemoryBytes: 512 << 20, PidsLimit: 100}
	for _, flavor := range allFlavors {
		t.Run(string(flavor), func(t *testing.T) {
			r := &Runtime{flavor: flavor, cgroupParent: "/airlock", stateRoot: "/state"}
			id := model.NewSandboxID()
			spec := runtime.Spec{ID: id, RootFS: runtime.RootFS{Lower: "/t"}, Env: model.Env{"B": "2", "A": "1", "PATH": "/custom"},
				Resources: res, AgentBinary: "/usr/lib/airlock/airlock-agent"}
			var ids *rootfs.IDRange
			if usesUserns(flavor) {
				ids = &rootfs.IDRange{Host: 1 << 30, Size: IDRangeSize}
			}
			s, err := r.bundleSpec(spec, r.dirs(id), ids, "/state/.agentfs/0123abcd")
			if err != nil {
				t.Fatal(err)
			}
			wantArgs := []string{GuestAgentPath, "--listen", "unix:/.airlock/run/agent.sock", "--log-to-memory", "--host-peers-only", "--pids-max", "100", "--seal"}
			wantPids := int64(100 + agentPidsReserve)
			if flavor == FlavorRunsc {
				wantPids = 4*100 + 256
			}
			if !slices.Equal(s.Process.Args, wantArgs) {
				t.Errorf("args = %q, want %q", s.Process.Args, wantArgs)
			}
			if want := []string{"A=1", "B=2", "HOME=/root", "PATH=/custom"}; !slices.Equal(s.Process.Env, want) {
				t.Errorf("env = %q, want %q", s.Process.Env, want)
			}
			// No no_new_privs: sudo works; it reaches no more than root has.
			if s.Hostname != id.String() || s.Process.Cwd != "/" || s.Process.User.UID != 0 || s.Process.NoNewPrivileges {
				t.Errorf("hostname %q cwd %q uid %d nnp %v", s.Hostname, s.Process.Cwd, s.Process.User.UID, s.Process.NoNewPrivileges)
			}
			// The agent gets CAP_SYS_ADMIN and CAP_SETPCAP to seal the
			// sandbox and drops them itself; never as ambient capabilities.
			caps := s.Process.Capabilities
			wantCaps := []string{"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE", "CAP_SETGID", "CAP_SETUID", "CAP_SYS_ADMIN", "CAP_SETPCAP"}
			for name, set := range map[string][]string{"bounding": caps.Bounding, "effective": caps.Effective, "permitted": caps.Permitted} {
				if !slices.Equal(set, wantCaps) {
					t.Errorf("%s capabilities = %v, want %v", name, set, wantCaps)
				}
			}
			if !slices.Equal(caps.Ambient, defaultCaps()) {
				t.Errorf("ambient capabilities = %v, want %v", caps.Ambient, defaultCaps())
			}
			if seccomp := s.Linux.Seccomp; seccomp != nil {
				allowsMount := slices.ContainsFunc(seccomp.Syscalls, func(r specs.LinuxSyscall) bool {
					return r.Action == specs.ActAllow && slices.Contains(r.Names, "mount")
				})
				if !allowsMount {
					t.Error("the seccomp filter refuses mount(2), which the agent needs to seal the sandbox")
				}
			}
			if rl := s.Process.Rlimits; flavor == FlavorRunc && !haveCapSysResource() {
				if len(rl) != 0 {
					t.Errorf("rlimits = %+v, want none: runc cannot set them without CAP_SYS_RESOURCE in a namespace host root does not own", rl)
				}
			} else if len(rl) != 1 || rl[0].Type != "RLIMIT_NOFILE" || rl[0].Hard == 0 || rl[0].Soft != rl[0].Hard {
				t.Errorf("rlimits = %+v", rl)
			}
			var ns []specs.LinuxNamespaceType
			for _, n := range s.Linux.Namespaces {
				// The sandbox's own user namespace (sandboxUserns) is joined;
				// every other one is new.
				if want := ""; n.Type == specs.UserNamespace {
					want = filepath.Join("/state", id.String(), usernsFile)
					if n.Path != want {
						t.Errorf("user namespace path %q, want the sandbox's own %q", n.Path, want)
					}
				} else if n.Path != want {
					t.Errorf("namespace %s joins %s instead of being new", n.Type, n.Path)
				}
				ns = append(ns, n.Type)
			}
			for _, want := range []specs.LinuxNamespaceType{specs.PIDNamespace, specs.NetworkNamespace, specs.IPCNamespace, specs.UTSNamespace, specs.MountNamespace} {
				if !slices.Contains(ns, want) {
					t.Errorf("namespace %s missing from %v", want, ns)
				}
			}
			wantMap := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 1 << 30, Size: IDRangeSize}}
			if ids == nil {
				wantMap = nil
			}
			if got := slices.Contains(ns, specs.UserNamespace); got != (ids != nil) {
				t.Errorf("user namespace in %v: %v, want %v", ns, got, ids != nil)
			}
			if !slices.Equal(s.Linux.UIDMappings, wantMap) || !slices.Equal(s.Linux.GIDMappings, wantMap) {
				t.Errorf("uid map %+v, gid map %+v, want %+v for both", s.Linux.UIDMappings, s.Linux.GIDMappings, wantMap)
			}
			if s.Linux.CgroupsPath != string(cgroups.Path("/airlock/"+id.String())) {
				t.Errorf("cgroupsPath = %q", s.Linux.CgroupsPath)
			}
			rs := s.Linux.Resources
			if *rs.CPU.Quota != 200000 || *rs.CPU.Period != 100000 {
				t.Errorf("cpu = %d/%d", *rs.CPU.Quota, *rs.CPU.Period)
			}
			if *rs.Memory.Limit != 512<<20 || *rs.Memory.Swap != 512<<20 {
				t.Errorf("memory = %d swap %d", *rs.Memory.Limit, *rs.Memory.Swap)
			}
			if *rs.Pids.Limit != wantPids {
				t.Errorf("pids = %d, want %d", *rs.Pids.Limit, wantPids)
			}
			mounts := map[string]specs.Mount{}
			for _, m := range s.Mounts {
				mounts[m.Destination] = m
			}
			// The shared agent filesystem's file: no host path in its mount table.
			if m := mounts[GuestAgentPath]; m.Source != "/state/.agentfs/0123abcd" || !slices.Contains(m.Options, "ro") {
				t.Errorf("agent mount = %+v", m)
			}
			if m := mounts[GuestRunDir]; m.Source != r.dirs(id).run || !slices.Contains(m.Options, "rw") {
				t.Errorf("run dir mount = %+v", m)
			}
			if s.Root.Path != r.dirs(id).rootfs || s.Root.Readonly {
				t.Errorf("root = %+v", s.Root)
			}
			if !slices.Contains(s.Linux.MaskedPaths, "/proc/kcore") || !slices.Contains(s.Linux.ReadonlyPaths, "/proc/sys") {
				t.Errorf("masked %v readonly %v", s.Linux.MaskedPaths, s.Linux.ReadonlyPaths)
			}
		})
	}
}

func TestBundleSpecWithoutLimits(t *testing.T) {
	r := &Runtime{flavor: FlavorRunsc, cgroupParent: "/airlock", stateRoot: "/state"}
	id := model.NewSandboxID()
	s, err := r.bundleSpec(runtime.Spec{ID: id, AgentBinary: "/agent", Hostname: "h"}, r.dirs(id), nil, "/agent")
	if err != nil {
		t.Fatal(err)
	}
	if rs := s.Linux.Resources; rs.CPU != nil || rs.Memory != nil || rs.Pids != nil {
		t.Errorf("resources without limits = %+v", rs)
	}
	if strings.Contains(strings.Join(s.Process.Args, " "), "--pids-max") || s.Hostname != "h" {
		t.Errorf("args %q hostname %q", s.Process.Args, s.Hostname)
	}
	if _, err := r.ociSpec(specParams{agentBinary: "relative/agent"}); err == nil {
		t.Error("relative agent path accepted")
	}
	if _, err := r.bundleSpec(runtime.Spec{ID: id, AgentBinary: "/agent"}, r.dirs(id), &rootfs.IDRange{Host: 1 << 30, Size: IDRangeSize}, "/agent"); err == nil {
		t.Error("runsc accepted a user namespace of Airlock's making")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink(dir, dir+"/link"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  Config
	}{
		{"unknown flavor", Config{Flavor: "docker", RootDir: dir + "/r", StateRoot: dir + "/s"}},
		{"relative root", Config{Flavor: "runc", RootDir: "r", StateRoot: dir + "/s"}},
		{"unclean state root", Config{Flavor: "runc", RootDir: dir + "/r", StateRoot: dir + "/s/../s"}},
		{"missing binary", Config{Flavor: "runc", Binary: "/nonexistent/runc", RootDir: dir + "/r", StateRoot: dir + "/s"}},
		{"symlinked root", Config{Flavor: "runc", RootDir: dir + "/link/r", StateRoot: dir + "/s"}},
		{"bad cgroup parent", Config{Flavor: "runc", RootDir: dir + "/r", StateRoot: dir + "/s", CgroupParent: "airlock"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.cfg); err == nil {
				t.Fatal("New accepted it")
			}
		})
	}
}

// A template build's sandbox (Spec.Build) gives root the capabilities a
// package manager needs, in every set the workload has; another sandbox
// does not get them.
func TestBundleSpecBuildCaps(t *testing.T) {
	for _, flavor := range allFlavors {
		t.Run(string(flavor), func(t *testing.T) {
			r := &Runtime{flavor: flavor, cgroupParent: "/airlock", stateRoot: "/state"}
			id := model.NewSandboxID()
			var ids *rootfs.IDRange
			if usesUserns(flavor) {
				ids = &rootfs.IDRange{Host: 1 << 30, Size: IDRangeSize}
			}
			for _, build := range []bool{false, true} {
				spec := runtime.Spec{ID: id, RootFS: runtime.RootFS{Lower: "/t"}, AgentBinary: "/usr/lib/airlock/airlock-agent", Build: build}
				s, err := r.bundleSpec(spec, r.dirs(id), ids, "/state/.agentfs/0123abcd")
				if err != nil {
					t.Fatal(err)
				}
				c := s.Process.Capabilities
				for name, set := range map[string][]string{"bounding": c.Bounding, "effective": c.Effective, "permitted": c.Permitted, "ambient": c.Ambient} {
					for _, cp := range buildCaps {
						if slices.Contains(set, cp) != build {
							t.Errorf("build %v: %s capabilities %v: %s", build, name, set, cp)
						}
					}
				}
			}
		})
	}
}
