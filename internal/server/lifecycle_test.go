package server

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/sandboxes"
	"github.com/airlockdev/airlock/internal/store/sqlite"
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
		{"runc", sandboxes.LifecycleSupport{Pause: true, Suspends: []model.SnapshotKind{model.SnapshotFilesystem}}, true},
		{"runsc", sandboxes.LifecycleSupport{Pause: true, Suspends: []model.SnapshotKind{model.SnapshotMemory, model.SnapshotFilesystem}}, true},
		{"qemu-like", sandboxes.LifecycleSupport{Pause: true, Suspends: []model.SnapshotKind{model.SnapshotMemory}}, true},
		{"plain", sandboxes.LifecycleSupport{}, true},
		{"qemu", sandboxes.LifecycleSupport{}, false}, // not driven here
		{"", sandboxes.LifecycleSupport{}, false},     // not placed yet
	} {
		got, known := sup(model.Sandbox{Runtime: tc.runtime})
		if !reflect.DeepEqual(got, tc.want) || known != tc.known {
			t.Errorf("%q: %+v, %v; want %+v, %v", tc.runtime, got, known, tc.want, tc.known)
		}
	}
}

// TestSuspendKindOfEveryRuntime: which suspend a sandbox may ask for (a
// suspend's keep_memory, a deadline's timeout_keep_memory) is what each
// runtime's declared capabilities say, through the one check
// (sandboxes.Service.CheckSuspendKind) that both the suspend and the
// create-time check use; a refusal names the runtime and what its suspend
// keeps.
func TestSuspendKindOfEveryRuntime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "airlock.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var h *host // an api replica's view: every runtime this binary knows
	svc, err := sandboxes.New(sandboxes.Config{Store: st, LifecycleSupport: lifecycleSupport(h.runtimeInfos()...)})
	if err != nil {
		t.Fatal(err)
	}
	mem, fs := model.SnapshotMemory, model.SnapshotFilesystem
	tests := []struct {
		runtime string
		kind    model.SnapshotKind
		ok      bool
	}{
		{"runc", fs, true}, {"runc", mem, false}, {"runc", "", true},
		{"crun", fs, true}, {"crun", mem, false}, {"crun", "", true},
		{"runsc", fs, true}, {"runsc", mem, true}, {"runsc", "", true},
		{"qemu", fs, true}, {"qemu", mem, true}, {"qemu", "", true},
		{"no-such-runtime", fs, true}, // not known here: checked where it runs
	}
	seen := map[string]bool{}
	for _, in := range h.runtimeInfos() {
		seen[in.Info().Name] = false
	}
	for _, tc := range tests {
		seen[tc.runtime] = true
		err := svc.CheckSuspendKind("sandbox sbx_x", tc.runtime, tc.kind)
		if (err == nil) != tc.ok {
			t.Errorf("%s, %q: %v; want ok %v", tc.runtime, tc.kind, err, tc.ok)
			continue
		}
		var se *sandboxes.Error
		if err != nil && (!errors.As(err, &se) || se.Kind != sandboxes.NotSupported || !strings.Contains(se.Message, tc.runtime)) {
			t.Errorf("%s, %q: %v; want NotSupported naming the runtime", tc.runtime, tc.kind, err)
		}
	}
	for name, tested := range seen {
		if !tested {
			t.Errorf("runtime %s is not in the table", name)
		}
	}
}
