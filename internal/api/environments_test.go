package api

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/environment/registry"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

// testEnvironments are a node's detections over fake runtime binaries:
// runsc (the default) and runc enabled and working, crun installed but
// neither enabled nor working.
type testEnvironments struct {
	runsc, runc, crun registry.Local
}

func fakeEnvironment(t *testing.T, n environment.Name, iso environment.Isolation, caps runtime.Capabilities, enabled, available bool, reason string) registry.Local {
	t.Helper()
	bin := filepath.Join(t.TempDir(), string(n))
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n# "+string(n)+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := registry.Define(n, runtime.Info{Name: string(n), Version: string(n) + " 1.0", Binary: bin, Isolation: iso, OOMScope: environment.OOMKillsProcess, Capabilities: caps}, registry.Inputs{})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := d.Ref()
	if err != nil {
		t.Fatal(err)
	}
	return registry.Local{Detection: registry.Detection{Name: n, Definition: &d, Ref: ref, Available: available, Reason: reason}, Binary: bin, Enabled: enabled}
}

// runcCaps are what the fake runc declares: pause, no suspend.
func (te *testEnvironments) runcCaps() runtime.Capabilities {
	return runtime.NewCapabilities(runtime.CapPause)
}

func withEnvironments(t *testing.T, te *testEnvironments) envOption {
	te.runsc = fakeEnvironment(t, environment.NameRunsc, environment.IsolationUserSpaceKernel, runtime.NewCapabilities(runtime.CapCheckpoint), true, true, "")
	te.runc = fakeEnvironment(t, environment.NameRunc, environment.IsolationSharedKernel, te.runcCaps(), true, true, "")
	te.crun = fakeEnvironment(t, environment.NameCrun, environment.IsolationSharedKernel, runtime.Capabilities{}, false, false, "probe crun: run a container: exit status 1")
	return func(c *envConfig) {
		reg, err := registry.New(registry.Config{Store: c.Store, NodeID: testNode, Environments: []registry.Local{te.runsc, te.runc, te.crun}, Default: environment.NameRunsc})
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.Record(t.Context()); err != nil {
			t.Fatal(err)
		}
		c.Environments, c.svc.Environments = reg, reg
	}
}

func TestEnvironmentsList(t *testing.T) {
	var te testEnvironments
	e := newEnv(t, withEnvironments(t, &te))
	var list apiv1.EnvironmentList
	e.do("GET", "/v1/environments", e.keyA, "").want(t, http.StatusOK).decode(t, &list) // a member key may read
	got := map[string]apiv1.Environment{}
	for _, env := range list.Environments {
		got[env.Name] = env
	}
	if len(got) != 3 {
		t.Fatalf("listed %d environments, want 3: %+v", len(got), list)
	}
	for _, tc := range []struct {
		name                      string
		local                     registry.Local
		isolation, snapshot       string
		enabled, available, deflt bool
		reason                    string
	}{
		{"runsc", te.runsc, "user-space-kernel", "memory", true, true, true, ""},
		{"runc", te.runc, "shared-kernel", "none", true, true, false, ""},
		{"crun", te.crun, "shared-kernel", "none", false, false, false, te.crun.Reason},
	} {
		g := got[tc.name]
		if g.Ref != string(tc.local.Ref) || g.Isolation != tc.isolation || g.Snapshot != tc.snapshot ||
			g.Enabled != tc.enabled || g.Available != tc.available || g.Default != tc.deflt || g.Reason != tc.reason ||
			g.Runtime.BinaryDigest != string(tc.local.Definition.Runtime.BinaryDigest) || g.SchemaVersion != environment.SchemaVersion || g.CheckedAt == nil {
			t.Errorf("%s: %+v", tc.name, g)
		}
	}
}

func TestEnvironmentsListNotSupported(t *testing.T) {
	e := newEnv(t)
	e.do("GET", "/v1/environments", e.keyA, "").wantError(t, http.StatusNotImplemented, apiv1.CodeNotSupported)
	e.do("POST", "/v1/sandboxes", e.keyA, `{"environment": "runsc"}`).wantError(t, http.StatusNotImplemented, apiv1.CodeNotSupported)
	// Without a registry and without a name, the sandbox records none.
	out := e.createSandbox(e.keyA, `{}`)
	if out.Sandbox.Environment != "" {
		t.Fatalf("environment = %q, want none", out.Sandbox.Environment)
	}
}

func TestCreateInEnvironment(t *testing.T) {
	var te testEnvironments
	e := newEnv(t, withEnvironments(t, &te))
	unknownRef := "env:sha256:" + strings.Repeat("0", 64)
	for _, tc := range []struct {
		name, body string
		status     int
		code       string
		ref        model.EnvironmentRef
	}{
		{"default", `{}`, http.StatusAccepted, "", te.runsc.Ref},
		{"by name", `{"environment": "runc"}`, http.StatusAccepted, "", te.runc.Ref},
		{"by reference", `{"environment": "` + string(te.runc.Ref) + `"}`, http.StatusAccepted, "", te.runc.Ref},
		{"unknown name", `{"environment": "lxc"}`, http.StatusBadRequest, apiv1.CodeEnvironmentUnknown, ""},
		{"malformed reference", `{"environment": "env:sha256:12"}`, http.StatusBadRequest, apiv1.CodeEnvironmentUnknown, ""},
		{"unknown reference", `{"environment": "` + unknownRef + `"}`, http.StatusBadRequest, apiv1.CodeEnvironmentUnknown, ""},
		{"not enabled", `{"environment": "crun"}`, http.StatusConflict, apiv1.CodeEnvironmentUnavailable, ""},
		{"not enabled, by reference", `{"environment": "` + string(te.crun.Ref) + `"}`, http.StatusConflict, apiv1.CodeEnvironmentUnavailable, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("POST", "/v1/sandboxes", e.keyA, tc.body)
			if tc.code != "" {
				r.wantError(t, tc.status, tc.code)
				return
			}
			var out apiv1.SandboxWithOperation
			r.want(t, tc.status).decode(t, &out)
			if out.Sandbox.Environment != string(tc.ref) {
				t.Fatalf("environment = %s, want %s", out.Sandbox.Environment, tc.ref)
			}
			sb, err := e.st.GetSandbox(t.Context(), e.projA, model.SandboxID(out.Sandbox.ID))
			if err != nil {
				t.Fatal(err)
			}
			if sb.Environment != tc.ref {
				t.Fatalf("stored environment = %s, want %s", sb.Environment, tc.ref)
			}
		})
	}

	// runc's binary changes under the server: known, but its artifacts are
	// gone; nothing is created.
	if err := os.WriteFile(te.runc.Binary, []byte("an upgraded runc"), 0o755); err != nil {
		t.Fatal(err)
	}
	e.do("POST", "/v1/sandboxes", e.keyA, `{"environment": "runc"}`).wantError(t, http.StatusConflict, apiv1.CodeEnvironmentArtifactsMissing)
	e.do("POST", "/v1/sandboxes", e.keyA, `{"environment": "`+string(te.runc.Ref)+`"}`).wantError(t, http.StatusConflict, apiv1.CodeEnvironmentArtifactsMissing)
}
