// Package runtimetest is the conformance suite that every runtime.Runtime
// implementation passes. It drives real sandboxes with the real guest agent
// (built from cmd/airlock-agent) through internal/agentclient, and checks
// the host side too: mounts, cgroups and state directories left behind.
package runtimetest

import (
	"context"
	"testing"

	"github.com/airlockdev/airlock/internal/cgroups"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

// Inspector must be implemented by the runtime values given to Run (usually
// by a test-only wrapper): it tells the suite where a sandbox lives on the
// host so it can check writes and leaks.
type Inspector interface {
	Artifacts(id model.SandboxID) Artifacts
}

// Artifacts are the host-side traces of one sandbox.
type Artifacts struct {
	// StateDir is the sandbox's state directory; it must not exist after Delete.
	StateDir string
	// UpperDir is where writes to the sandbox's root filesystem land on the host.
	UpperDir string
	// MountPoints must not be mount points after Delete (nor may anything
	// below StateDir be mounted).
	MountPoints []string
	// Cgroup is the sandbox's cgroup; it must exist in no hierarchy after
	// Delete. "" if the runtime uses none.
	Cgroup cgroups.Path
	// DiskFiles, if set, are the host files that hold the sandbox's
	// writes to its disk (a VM's disk image), when StateDir holds more
	// than those (a VM's RAM file): DiskLimitGivesENOSPC counts these
	// instead of everything under StateDir.
	DiskFiles []string
	// AgentSocket is the host path of the agent's Unix socket, if it has
	// one in a host directory the guest shares.
	AgentSocket string
}

// CrashSimulator may be implemented by the runtime values given to Run: it
// puts a sandbox into the partial states a crash (of the server or the
// runtime) can leave, so the suite can check that Delete and Create clean
// them up.
type CrashSimulator interface {
	CrashStates() []CrashState
}

// CrashState is one partial state.
type CrashState struct {
	Name string
	// Make leaves the sandbox spec.ID in the partial state.
	Make func(ctx context.Context, spec runtime.Spec) error
	// CreateRefuses is set when Create must fail on this state rather than
	// replace it (e.g. the runtime cannot read its own state: Create cannot
	// tell a broken sandbox from a transient failure); Delete still cleans it.
	CreateRefuses bool
}

// Isolation may be implemented by the runtime values given to Run: it says
// which of the suite's isolation checks apply. Without it they are skipped.
type Isolation interface {
	// SeccompFiltered reports whether the guest runs under a seccomp filter
	// of the host kernel (runc, crun); false for a runtime that filters
	// the guest's system calls by its own means (gVisor's sentry).
	SeccompFiltered() bool
	// UserNamespaced reports whether each sandbox runs in a user namespace
	// of its own in which its root is an unprivileged host user, and no two
	// sandboxes share host ids (runc, crun).
	UserNamespaced() bool
}

// Run runs the conformance suite. newRuntime must return a new Runtime
// value on every call; all values returned for the same *testing.T share one
// configuration (state directories), so a second call models a restarted
// server. The values must implement Inspector and may implement
// CrashSimulator, Isolation and Profile (which may skip cases that do not
// apply, lengthen the timeouts and bound the sandboxes alive at once). The test needs root, the agent and busybox; it skips
// without them.
func Run(t *testing.T, newRuntime func(t *testing.T) runtime.Runtime) {
	s := newSuite(t)
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s *suite, newRuntime func(t *testing.T) runtime.Runtime)
		// sandboxes is how many sandboxes the case runs at once (a
		// case whose subtests run sandboxes takes their slots in them).
		sandboxes int
	}{
		{"Lifecycle", testLifecycle, 1},
		{"CreateStarted", testCreateStarted, 1},
		{"CapabilitiesConsistent", testCapabilitiesConsistent, 0},
		{"PauseResume", testPauseResume, 1},
		{"DeletePaused", testDeletePaused, 1},
		{"SuspendWake", testSuspendWake, 1},
		{"SuspendPaused", testSuspendPaused, 1},
		{"SuspendWakeNetwork", testSuspendWakeNetwork, 1},
		{"LiveSnapshotFork", testLiveSnapshotFork, 3},
		{"UnknownSandbox", testUnknownSandbox, 0},
		{"EchoAndEnv", testEchoAndEnv, 1},
		{"WritableCopyOnWriteRoot", testWritableRoot, 1},
		{"SandboxesDoNotShareWrites", testIsolatedWrites, 2},
		{"LoopbackOnlyNetwork", testLoopbackOnly, 1},
		{"PreparedNetwork", testPreparedNetwork, 1},
		{"AgentSocketSymlinkRefused", testAgentSocketSymlinkRefused, 1},
		{"AgentLogOutOfGuestReach", testAgentLogOutOfReach, 1},
		{"AgentOutOfWorkloadReach", testAgentOutOfWorkloadReach, 1},
		{"PidsLimitCannotBeLifted", testPidsLimitCannotBeLifted, 1},
		{"AgentChannelHostOnly", testAgentChannelHostOnly, 1},
		{"KernelMemoryOOMSparesAgent", testKernelMemoryOOMSparesAgent, 1},
		{"SeccompFilter", testSeccomp, 1},
		{"DiskLimitGivesENOSPC", testDiskLimit, 1},
		{"HostPathsHidden", testHostPathsHidden, 0},
		{"DevIsBounded", testDevIsBounded, 1},
		{"UserNamespace", testUserNamespace, 1},
		{"UserNamespacesDistinct", testUserNamespacesDistinct, 2},
		{"UserKeyringNotShared", testUserKeyringNotShared, 1},
		{"InotifyBudgetIsPerSandbox", testInotifyBudget, 2},
		{"ResourceLimitsOnHost", testLimitsOnHost, 1},
		{"MemoryHogIsOOMKilled", testMemoryHog, 1},
		{"ForkBombIsContained", testForkBomb, 1},
		{"SurvivesRuntimeRestart", testSurvivesRestart, 1},
		{"ListFindsOrphanStateDirs", testOrphanStateDir, 0},
		{"DeleteCleansCrashLeftovers", testCrashLeftovers, 0},
		{"CreateReplacesCrashLeftovers", testCreateOverLeftovers, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s.prepareCase(t, tc.name, newRuntime(t), tc.sandboxes)
			tc.fn(t, s, newRuntime)
		})
	}
}
