package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/airlockdev/airlock/internal/model"
)

func TestCapabilities(t *testing.T) {
	for _, tc := range []struct {
		name     string
		set      Capabilities
		want     []Capability
		wantJSON string
	}{
		{"empty", Capabilities{}, []Capability{}, `[]`},
		{"one", NewCapabilities(CapNetwork), []Capability{CapNetwork}, `["network"]`},
		{"order and duplicates", NewCapabilities(CapNetwork, CapPause, CapNetwork), []Capability{CapPause, CapNetwork}, `["pause","network"]`},
		{"with", NewCapabilities(CapPause).With(CapCheckpoint), []Capability{CapPause, CapCheckpoint}, `["pause","checkpoint"]`},
		{"without", NewCapabilities(CapPause, CapCheckpoint).Without(CapPause), []Capability{CapCheckpoint}, `["checkpoint"]`},
		{"all", NewCapabilities(AllCapabilities...), AllCapabilities, `["pause","checkpoint","filesystem-snapshot","network","live-snapshot"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.set.List(); !slices.Equal(got, tc.want) {
				t.Fatalf("List = %q, want %q", got, tc.want)
			}
			for _, c := range AllCapabilities {
				if got, want := tc.set.Has(c), slices.Contains(tc.want, c); got != want {
					t.Errorf("Has(%s) = %v, want %v", c, got, want)
				}
			}
			if tc.set.Has("no-such-capability") {
				t.Error("Has of an unknown capability")
			}
			data, err := json.Marshal(tc.set)
			if err != nil || string(data) != tc.wantJSON {
				t.Fatalf("Marshal = %s, %v; want %s", data, err, tc.wantJSON)
			}
			var back Capabilities
			if err := json.Unmarshal(data, &back); err != nil || back != tc.set {
				t.Fatalf("Unmarshal(%s) = %v, %v; want %v", data, back, err, tc.set)
			}
		})
	}
}

func TestCapabilitiesRejectUnknown(t *testing.T) {
	var s Capabilities
	if err := json.Unmarshal([]byte(`["pause","teleport"]`), &s); err == nil {
		t.Fatal("decoded an unknown capability")
	}
	if _, err := ParseCapability("teleport"); err == nil {
		t.Fatal("parsed an unknown capability")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("NewCapabilities accepted an unknown capability")
		}
	}()
	NewCapabilities("teleport")
}

func TestPhaseAlive(t *testing.T) {
	for _, tc := range []struct {
		phase Phase
		alive bool
	}{
		{PhaseCreated, false},
		{PhaseRunning, true},
		{PhasePaused, true},
		{PhaseStopped, false},
	} {
		if got := tc.phase.Alive(); got != tc.alive {
			t.Errorf("%s.Alive() = %v, want %v", tc.phase, got, tc.alive)
		}
	}
}

// infoRuntime is a Runtime that only answers Info.
type infoRuntime struct {
	Runtime
	caps Capabilities
}

func (r infoRuntime) Info() Info { return Info{Name: "fake", Capabilities: r.caps} }

type pausingRuntime struct{ infoRuntime }

func (pausingRuntime) Pause(context.Context, model.SandboxID) error  { return nil }
func (pausingRuntime) Resume(context.Context, model.SandboxID) error { return nil }

// AsPauser goes by the claimed capability, not by the methods a value has:
// one *oci.Runtime has them for every flavor.
func TestAsPauser(t *testing.T) {
	pause := NewCapabilities(CapPause)
	for _, tc := range []struct {
		name string
		rt   Runtime
		ok   bool
	}{
		{"claimed and implemented", pausingRuntime{infoRuntime{caps: pause}}, true},
		{"implemented, not claimed", pausingRuntime{infoRuntime{}}, false},
		{"claimed, not implemented", infoRuntime{caps: pause}, false},
		{"neither", infoRuntime{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := AsPauser(tc.rt)
			if tc.ok != (err == nil) || (p != nil) != tc.ok {
				t.Fatalf("AsPauser = %v, %v; want ok %v", p, err, tc.ok)
			}
			if !tc.ok && !errors.Is(err, ErrNotSupported) {
				t.Fatalf("AsPauser error %v does not wrap ErrNotSupported", err)
			}
		})
	}
}
