package server

import (
	"testing"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/sandboxes"
)

type infoOnly runtime.Info

func (i infoOnly) Info() runtime.Info { return runtime.Info(i) }

func TestLifecycleSupport(t *testing.T) {
	t.Parallel()
	sup := lifecycleSupport(
		infoOnly{Name: "runc", Capabilities: runtime.NewCapabilities(runtime.CapPause, runtime.CapFilesystemSnapshot)},
		infoOnly{Name: "runsc", Capabilities: runtime.NewCapabilities(runtime.CapPause, runtime.CapCheckpoint, runtime.CapFilesystemSnapshot)},
		infoOnly{Name: "qemu-like", Capabilities: runtime.NewCapabilities(runtime.CapPause, runtime.CapCheckpoint)},
		infoOnly{Name: "plain"},
	)
	for _, tc := range []struct {
		runtime string
		want    sandboxes.LifecycleSupport
		known   bool
	}{
		{"runc", sandboxes.LifecycleSupport{Pause: true, Snapshot: model.SnapshotFilesystem, FilesystemSuspend: true}, true},
		{"runsc", sandboxes.LifecycleSupport{Pause: true, Snapshot: model.SnapshotMemory, FilesystemSuspend: true}, true},
		{"qemu-like", sandboxes.LifecycleSupport{Pause: true, Snapshot: model.SnapshotMemory}, true},
		{"plain", sandboxes.LifecycleSupport{}, true},
		{"qemu", sandboxes.LifecycleSupport{}, false}, // not driven here
		{"", sandboxes.LifecycleSupport{}, false},     // not placed yet
	} {
		got, known := sup(model.Sandbox{Runtime: tc.runtime})
		if got != tc.want || known != tc.known {
			t.Errorf("%q: %+v, %v; want %+v, %v", tc.runtime, got, known, tc.want, tc.known)
		}
	}
}
