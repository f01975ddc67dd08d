package sandboxes

import (
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// TestHostPidsCharge: a create is charged the host pids of its
// environment — named, or named by the recorded definition of the
// reference it gives — and memory; a pool its environment's.
func TestHostPidsCharge(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	def := environment.Definition{SchemaVersion: environment.SchemaVersion, Name: environment.NameRunsc,
		Host:    environment.Platform{OS: "linux", Arch: "amd64"},
		Runtime: environment.RuntimeBinding{Name: "runsc", Version: "test", BinaryDigest: environment.Digest("sha256:" + strings.Repeat("1", 64))},
		Guest:   environment.Platform{OS: "linux", Arch: "amd64"}, Isolation: environment.IsolationUserSpaceKernel,
		Snapshot: environment.Snapshot{Capability: environment.SnapshotNone}, OOMScope: environment.OOMKillsSandbox}
	canon, err := def.Canonical()
	must(t, err)
	ref, err := def.Ref()
	must(t, err)
	_, err = f.st.PutEnvironment(f.ctx, store.EnvironmentRecord{Ref: ref, Name: def.Name, SchemaVersion: def.SchemaVersion, Definition: canon, FirstSeen: t0})
	must(t, err)
	s := f.service(Config{}, false)
	for _, tt := range []struct {
		sel  environment.Selector
		mem  int
		want int
	}{
		{environment.Selector{Name: environment.NameRunc}, 256, 1088},
		{environment.Selector{Name: environment.NameCrun}, 32, 192},
		{environment.Selector{Name: environment.NameRunsc}, 512, 4352},
		{environment.Selector{Name: environment.NameRunsc}, 64, 1280},
		{environment.Selector{Name: environment.NameQEMU}, 4096, environment.QEMUHostPids},
		{environment.Selector{Ref: ref}, 32, 768},
		// Recorded nowhere: charged the most (placement refuses it).
		{environment.Selector{Ref: model.EnvironmentRef("env:sha256:" + strings.Repeat("0", 64))}, 32, 768},
		{environment.Selector{}, 256, 4352},
	} {
		got, err := s.hostPids(f.ctx, tt.sel, tt.mem)
		if err != nil || got != tt.want {
			t.Errorf("hostPids(%s, %d MiB) = %d, %v; want %d", tt.sel, tt.mem, got, err, tt.want)
		}
	}

	// One sandbox above the node's whole budget: refused, nothing stored.
	small := f.service(Config{Capacity: &model.NodeCapacity{Pids: 1000}}, false)
	_, err = f.create(small, func(r *CreateRequest) { r.Resources.MemoryMiB = 32 })
	must(t, err) // 768
	_, err = f.create(small, func(r *CreateRequest) { r.Resources.MemoryMiB = 64 })
	wantKind(t, err, ExceedsCapacity) // 1280
	if !strings.Contains(err.Error(), "pids") || !strings.Contains(err.Error(), "1280") || !strings.Contains(err.Error(), "1000") {
		t.Errorf("refusal %q does not give the pids numbers", err)
	}
	page, err := f.st.ListSandboxes(f.ctx, store.SandboxQuery{ProjectID: f.proj, Limit: 10})
	must(t, err)
	if len(page.Sandboxes) != 1 || page.Sandboxes[0].Resources.HostPids != 768 {
		t.Fatalf("stored %+v, want the one sandbox charged 768", page.Sandboxes)
	}
	// A pool whose sandboxes would each exceed it.
	_, err = small.PutPool(f.ctx, PutPoolRequest{Template: f.tpl, Resources: model.Resources{CPUs: 1, MemoryMiB: 512, DiskMiB: 1024}, Size: 1, Now: t0})
	wantKind(t, err, ExceedsCapacity)
}
