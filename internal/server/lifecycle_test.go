package server

import (
	"testing"

	"github.com/airlockdev/airlock/internal/api"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

type infoOnly runtime.Info

func (i infoOnly) Info() runtime.Info { return runtime.Info(i) }

func TestLifecycleSupport(t *testing.T) {
	t.Parallel()
	sup := lifecycleSupport(
		infoOnly{Name: "runc", Capabilities: runtime.NewCapabilities(runtime.CapPause, runtime.CapFilesystemSnapshot)},
		infoOnly{Name: "runsc", Capabilities: runtime.NewCapabilities(runtime.CapPause, runtime.CapCheckpoint, runtime.CapFilesystemSnapshot)},
		infoOnly{Name: "plain"},
	)
	for _, tc := range []struct {
		runtime string
		want    api.LifecycleSupport
		known   bool
	}{
		{"runc", api.LifecycleSupport{Pause: true, Snapshot: model.SnapshotFilesystem}, true},
		{"runsc", api.LifecycleSupport{Pause: true, Snapshot: model.SnapshotMemory}, true},
		{"plain", api.LifecycleSupport{}, true},
		{"qemu", api.LifecycleSupport{}, false}, // not driven here
		{"", api.LifecycleSupport{}, false},     // not placed yet
	} {
		got, known := sup(model.Sandbox{Runtime: tc.runtime})
		if got != tc.want || known != tc.known {
			t.Errorf("%q: %+v, %v; want %+v, %v", tc.runtime, got, known, tc.want, tc.known)
		}
	}
}
