package registry

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/runtime"
)

func TestFromInfo(t *testing.T) {
	info := runtime.Info{
		Name: "runc", Version: "runc version 1.1.5", Binary: "/usr/sbin/runc",
		Isolation: environment.IsolationSharedKernel, OOMScope: environment.OOMKillsProcess,
		Capabilities: runtime.NewCapabilities(runtime.CapPause, runtime.CapFilesystemSnapshot),
	}
	d, err := FromInfo(environment.NameRunc, info, Inputs{BinaryDigest: environment.Digest("sha256:" + strings.Repeat("11", 32))})
	if err != nil {
		t.Fatal(err)
	}
	if d.Host != environment.HostPlatform() || d.Guest != environment.HostPlatform() {
		t.Fatalf("platforms = %+v, %+v; want the host's", d.Host, d.Guest)
	}
	if d.Snapshot.Capability != environment.SnapshotFilesystem || d.Isolation != environment.IsolationSharedKernel || d.OOMScope != environment.OOMKillsProcess {
		t.Fatalf("definition = %+v", d)
	}
	if _, err := FromInfo(environment.NameRunc, info, Inputs{}); err == nil {
		t.Fatal("FromInfo without a binary digest succeeded")
	}
}

func fakeBinary(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "rt")
	if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDetect(t *testing.T) {
	bin := fakeBinary(t, "binary one")
	infoOf := func(n environment.Name) runtime.Info {
		return runtime.Info{Name: string(n), Version: "1.0", Binary: bin, Isolation: environment.IsolationSharedKernel, OOMScope: environment.OOMKillsProcess}
	}
	probe := func(_ context.Context, n environment.Name) (runtime.Info, Inputs, error) {
		switch n {
		case environment.NameRunc:
			return infoOf(n), Inputs{}, nil
		case environment.NameCrun:
			return infoOf(n), Inputs{}, errors.New("probe crun: run a container: boom")
		}
		return runtime.Info{}, Inputs{}, errors.New("runsc: executable file not found in $PATH")
	}
	dets, err := Detect(context.Background(), environment.Names(), probe)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[environment.Name]Detection{}
	for _, d := range dets {
		byName[d.Name] = d
	}
	if d := byName[environment.NameRunc]; !d.Available || d.Definition == nil || d.Ref == "" || d.Reason != "" {
		t.Fatalf("runc: %+v", d)
	}
	if d := byName[environment.NameCrun]; d.Available || d.Definition == nil || !strings.Contains(d.Reason, "boom") {
		t.Fatalf("crun (installed, probe fails): %+v", d)
	}
	if d := byName[environment.NameRunsc]; d.Available || d.Definition != nil || !strings.Contains(d.Reason, "not found") {
		t.Fatalf("runsc (not installed): %+v", d)
	}
	// The definition is of the binary the probe named: it verifies.
	if err := environment.Verify(*byName[environment.NameRunc].Definition, bin); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Detect(ctx, environment.Names(), probe); !errors.Is(err, context.Canceled) {
		t.Fatalf("Detect with an ended context = %v", err)
	}
}
