package worker

import (
	"context"
	"errors"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/template"
)

// The start command's process ID is a process ID, the same for a sandbox
// every time (a repeated step finds it), another for another sandbox.
func TestStartProcessID(t *testing.T) {
	a, b := model.NewSandboxID(), model.NewSandboxID()
	id := startProcessID(a)
	if _, err := model.ParseProcessID(id.String()); err != nil {
		t.Fatal(err)
	}
	if startProcessID(a) != id || startProcessID(b) == id {
		t.Fatal("not one ID per sandbox")
	}
}

// Which sandboxes start their template's commands: none without a start
// or ready command (no agent call), none in a build sandbox; a template
// whose user cannot be resolved fails with template_not_ready, for good.
func TestStartTemplateWhen(t *testing.T) {
	defs := map[model.TemplateDigest]template.Defaults{
		"sha256:none":    {Config: template.DefaultConfig()},
		"sha256:badUser": {Config: template.Config{StartCmd: "sleep 1000"}, UserErr: errors.New("no user \"bob\"")},
	}
	w, err := New(Config{Runtime: &fakeRuntime{}, TemplateDir: func(model.TemplateDigest) (string, error) { return "", nil }, AgentBinary: "/bin/true",
		TemplateDefaults: func(d model.TemplateDigest) (template.Defaults, error) { return defs[d], nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The fake runtime has no agent: any call to it would fail.
	if err := w.startTemplate(ctx, model.Sandbox{ID: model.NewSandboxID(), Template: "sha256:none"}); err != nil {
		t.Fatalf("no start command: %v", err)
	}
	build := model.Sandbox{ID: model.NewSandboxID(), Template: "sha256:badUser", Metadata: model.Metadata{model.BuildSandboxMetadata: "bld_x"}}
	if err := w.startTemplate(ctx, build); err != nil {
		t.Fatalf("build sandbox: %v", err)
	}
	err = w.startTemplate(ctx, model.Sandbox{ID: model.NewSandboxID(), Template: "sha256:badUser"})
	var ce *CodedError
	if !errors.As(err, &ce) || ce.Code != apiv1.CodeTemplateNotReady || !errors.Is(err, ErrPermanent) {
		t.Fatalf("bad user: %v", err)
	}
}

// Forks and creates from a saved snapshot start afresh on runtimes whose
// snapshots keep files only.
func TestStartsAfresh(t *testing.T) {
	for _, c := range []struct {
		caps runtime.Capabilities
		want bool
	}{
		{runtime.NewCapabilities(runtime.CapCheckpoint, runtime.CapLiveSnapshot), false},
		{runtime.NewCapabilities(runtime.CapFilesystemSnapshot, runtime.CapLiveSnapshot), true},
	} {
		w, err := New(Config{Runtime: &fakeRuntime{caps: c.caps}, TemplateDir: func(model.TemplateDigest) (string, error) { return "", nil }, AgentBinary: "/bin/true"})
		if err != nil {
			t.Fatal(err)
		}
		if got := w.startsAfresh(); got != c.want {
			t.Errorf("%v: startsAfresh %v", c.caps, got)
		}
	}
}
