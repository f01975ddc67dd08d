package server

import (
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/runtime/oci"
)

func TestCheckEnvironmentSet(t *testing.T) {
	for _, tc := range []struct {
		names []environment.Name
		err   string
	}{
		{[]environment.Name{environment.NameRunsc}, ""},
		{[]environment.Name{environment.NameRunc, environment.NameRunsc}, ""},
		{[]environment.Name{environment.NameCrun, environment.NameRunsc}, ""},
		{nil, "no execution environment"},
		{[]environment.Name{environment.NameRunsc, environment.NameRunsc}, "given twice"},
		{[]environment.Name{environment.NameRunc, environment.NameCrun}, "cannot be enabled together"},
	} {
		err := checkEnvironmentSet(tc.names)
		if (tc.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%v: %v, want %q", tc.names, err, tc.err)
		}
	}
}

func TestOCISnapshotFormat(t *testing.T) {
	for _, tc := range []struct {
		caps runtime.Capabilities
		want string
	}{
		{runtime.NewCapabilities(runtime.CapPause, runtime.CapCheckpoint), oci.FormatRunscCheckpoint},
		{runtime.NewCapabilities(runtime.CapFilesystemSnapshot), oci.FormatUpper},
		{runtime.NewCapabilities(runtime.CapPause), ""},
	} {
		if got := ociSnapshotFormat(runtime.Info{Capabilities: tc.caps}); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.caps, got, tc.want)
		}
	}
}
