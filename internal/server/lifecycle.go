package server

import (
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/runtime/oci"
	"github.com/airlockdev/airlock/internal/sandboxes"
)

// lifecycleSupport tells the API what the runtimes this server drives can
// do, from each runtime instance's declared capabilities, so that a pause
// or suspend a sandbox's runtime cannot do is refused when it is asked for.
// A sandbox on a runtime not among rts is not known here.
func lifecycleSupport(rts ...infoer) func(model.Sandbox) (sandboxes.LifecycleSupport, bool) {
	return func(sb model.Sandbox) (sandboxes.LifecycleSupport, bool) {
		for _, rt := range rts {
			info := rt.Info()
			if sb.Runtime == "" || info.Name != sb.Runtime {
				continue
			}
			return sandboxes.LifecycleSupport{
				Pause:    info.Capabilities.Has(runtime.CapPause),
				Suspends: runtime.SuspendKinds(info.Capabilities),
				// A live snapshot's kind is the suspend's.
				LiveSnapshot: info.Capabilities.Has(runtime.CapLiveSnapshot),
			}, true
		}
		return sandboxes.LifecycleSupport{}, false
	}
}

// infoer is the part of runtime.Runtime that lifecycleSupport asks.
type infoer interface{ Info() runtime.Info }

// environmentRuntimes are the runtimes of the enabled environments.
func environmentRuntimes(environments []enabledEnvironment) []infoer {
	out := make([]infoer, 0, len(environments))
	for _, e := range environments {
		out = append(out, e.rt)
	}
	return out
}

// flavorInfo is an OCI flavor's declared capabilities, for an api replica
// that runs no runtime but answers what each can do.
type flavorInfo oci.Flavor

func (f flavorInfo) Info() runtime.Info {
	return runtime.Info{Name: string(f), Capabilities: oci.CapabilitiesOf(oci.Flavor(f))}
}

// staticInfo is a runtime's declared capabilities, for an api replica.
type staticInfo runtime.Info

func (s staticInfo) Info() runtime.Info { return runtime.Info(s) }
