package registry

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/store/sqlite"
)

func openStore(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// detected makes the Local of an installed environment whose binary is a
// file of its own.
func detected(t *testing.T, n environment.Name, iso environment.Isolation, enabled, available bool, reason string) Local {
	t.Helper()
	bin := filepath.Join(t.TempDir(), string(n))
	if err := os.WriteFile(bin, []byte("binary of "+string(n)+" at "+bin), 0o755); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(bin) // as the server does: the stat before the digest
	if err != nil {
		t.Fatal(err)
	}
	d, err := Define(n, runtime.Info{Name: string(n), Version: "1.0", Binary: bin, Isolation: iso, OOMScope: environment.OOMKillsProcess}, Inputs{})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := d.Ref()
	if err != nil {
		t.Fatal(err)
	}
	return Local{Detection: Detection{Name: n, Definition: &d, Ref: ref, Available: available, Reason: reason}, Binary: bin, Enabled: enabled, BinaryInfo: fi}
}

func TestRegistry(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	node := model.NewNodeID()
	runsc := detected(t, environment.NameRunsc, environment.IsolationUserSpaceKernel, true, true, "")
	runc := detected(t, environment.NameRunc, environment.IsolationSharedKernel, true, true, "")
	crun := detected(t, environment.NameCrun, environment.IsolationSharedKernel, false, false, "probe crun: boom")
	if _, err := New(Config{Store: st, NodeID: node, Environments: []Local{crun}, Default: environment.NameCrun}); err == nil {
		t.Fatal("New accepted a default that is not enabled")
	}
	reg, err := New(Config{Store: st, NodeID: node, Environments: []Local{runc, runsc, crun}, Default: environment.NameRunsc, Now: func() time.Time { return time.Unix(1e9, 0) }})
	if err != nil {
		t.Fatal(err)
	}
	if got := reg.Enabled(); len(got) != 2 || got[0].Name != environment.NameRunsc || got[1].Name != environment.NameRunc {
		t.Fatalf("Enabled = %+v, want runsc (the default) then runc", got)
	}
	if err := reg.Record(ctx); err != nil {
		t.Fatal(err)
	}
	if err := reg.Verify(); err != nil {
		t.Fatal(err)
	}
	list, err := reg.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[environment.Name]Status{}
	for _, s := range list {
		byName[s.Definition.Name] = s
	}
	if s := byName[environment.NameRunsc]; !s.Enabled || !s.Available || !s.Default || s.Ref != runsc.Ref || !s.CheckedAt.Equal(time.Unix(1e9, 0)) {
		t.Fatalf("runsc: %+v", s)
	}
	if s := byName[environment.NameRunc]; !s.Enabled || !s.Available || s.Default {
		t.Fatalf("runc: %+v", s)
	}
	if s := byName[environment.NameCrun]; s.Enabled || s.Available || s.Reason != "probe crun: boom" {
		t.Fatalf("crun: %+v", s)
	}

	unknownRef := model.EnvironmentRef("env:sha256:" + strings.Repeat("0", 64))
	for _, tc := range []struct {
		name string
		sel  environment.Selector
		want error
		ref  model.EnvironmentRef
	}{
		{"runsc by name", environment.Selector{Name: environment.NameRunsc}, nil, runsc.Ref},
		{"runc by ref", environment.Selector{Ref: runc.Ref}, nil, runc.Ref},
		{"unknown ref", environment.Selector{Ref: unknownRef}, environment.ErrUnknown, ""},
		{"not enabled", environment.Selector{Name: environment.NameCrun}, environment.ErrUnavailable, ""},
		{"not enabled by ref", environment.Selector{Ref: crun.Ref}, environment.ErrUnavailable, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref, err := reg.Resolve(ctx, tc.sel)
			if !errors.Is(err, tc.want) || ref != tc.ref {
				t.Fatalf("Resolve = %s, %v; want %s, %v", ref, err, tc.ref, tc.want)
			}
		})
	}

	// The runc binary changes under the server: its artifacts are missing.
	if err := os.WriteFile(runc.Binary, []byte("an upgraded runc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Resolve(ctx, environment.Selector{Name: environment.NameRunc}); !errors.Is(err, environment.ErrArtifactsMissing) {
		t.Fatalf("Resolve after the binary changed = %v, want ErrArtifactsMissing", err)
	}
	if err := reg.Verify(); !errors.Is(err, environment.ErrArtifactsMissing) {
		t.Fatalf("Verify after the binary changed = %v, want ErrArtifactsMissing", err)
	}
	if err := os.Remove(runsc.Binary); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Resolve(ctx, environment.Selector{Ref: runsc.Ref}); !errors.Is(err, environment.ErrArtifactsMissing) {
		t.Fatalf("Resolve after the binary went = %v, want ErrArtifactsMissing", err)
	}

	// A restart with a new runc: the old reference is known but gone here.
	runc2 := detected(t, environment.NameRunc, environment.IsolationSharedKernel, true, true, "")
	runsc2 := detected(t, environment.NameRunsc, environment.IsolationUserSpaceKernel, true, true, "")
	reg2, err := New(Config{Store: st, NodeID: node, Environments: []Local{runsc2, runc2}, Default: environment.NameRunsc})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg2.Record(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := reg2.Resolve(ctx, environment.Selector{Ref: runc.Ref}); !errors.Is(err, environment.ErrArtifactsMissing) {
		t.Fatalf("Resolve of the old runc reference = %v, want ErrArtifactsMissing", err)
	}
	list, err = reg2.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if s.Ref == runc.Ref && (s.Enabled || s.Available || !strings.Contains(s.Reason, "does not have it")) {
			t.Fatalf("the old runc after the restart: %+v", s)
		}
	}

	// A later detection of an environment that is not enabled is recorded.
	crun2 := crun
	crun2.Available, crun2.Reason = true, ""
	if err := reg2.Update(ctx, crun2); err != nil {
		t.Fatal(err)
	}
	if _, err := reg2.Resolve(ctx, environment.Selector{Name: environment.NameCrun}); !errors.Is(err, environment.ErrUnavailable) {
		t.Fatalf("Resolve of available but not enabled crun = %v, want ErrUnavailable", err)
	}
	if err := reg2.Update(ctx, runc2); err == nil {
		t.Fatal("Update of an enabled environment succeeded")
	}
	rows, err := st.ListNodeEnvironments(ctx, store.NodeEnvironmentQuery{NodeID: node, Ref: crun.Ref})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || !rows[0].Available || rows[0].Enabled {
		t.Fatalf("crun's row after Update: %+v", rows)
	}
}
