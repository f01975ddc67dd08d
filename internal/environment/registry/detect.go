package registry

import (
	"context"
	"fmt"

	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

// Inputs are what a Definition is built from besides the runtime's Info.
type Inputs struct {
	// BinaryDigest is the SHA-256 of the runtime binary (environment.DigestFile
	// of Info.Binary).
	BinaryDigest environment.Digest
	// Host is the node's platform; the zero value: environment.HostPlatform.
	Host environment.Platform
	// Guest is the sandboxes' platform; the zero value: Host (containers
	// run the host's architecture).
	Guest environment.Platform
	// Boot is what a VM boots; empty for OCI runtimes.
	Boot environment.Boot
	// SnapshotFormat is the runtime's name of its snapshot layout, if it
	// has one.
	SnapshotFormat string
}

// FromInfo builds the definition of environment name run by the runtime
// described by info. This is where a runtime's description becomes an
// environment's: internal/environment imports no runtime.
func FromInfo(name environment.Name, info runtime.Info, in Inputs) (environment.Definition, error) {
	host := in.Host
	if host == (environment.Platform{}) {
		host = environment.HostPlatform()
	}
	guest := in.Guest
	if guest == (environment.Platform{}) {
		guest = host
	}
	d := environment.Definition{
		SchemaVersion: environment.SchemaVersion,
		Name:          name,
		Host:          host,
		Runtime: environment.RuntimeBinding{
			Name:         info.Name,
			Version:      info.Version,
			BinaryDigest: in.BinaryDigest,
		},
		Guest:     guest,
		Boot:      in.Boot,
		Isolation: info.Isolation,
		Snapshot: environment.Snapshot{
			Capability: environment.SnapshotCapabilityOf(runtime.SnapshotKindOf(info.Capabilities)),
			Format:     in.SnapshotFormat,
		},
		OOMScope: info.OOMScope,
	}
	if err := d.Validate(); err != nil {
		return environment.Definition{}, fmt.Errorf("environment %s: %w", name, err)
	}
	return d, nil
}

// Define builds the definition of an environment whose runtime is installed
// at info.Binary, hashing that file into in.BinaryDigest (in gives the
// rest: platforms, boot inputs, snapshot format).
func Define(n environment.Name, info runtime.Info, in Inputs) (environment.Definition, error) {
	dg, err := environment.DigestFile(info.Binary)
	if err != nil {
		return environment.Definition{}, fmt.Errorf("environment %s: %w", n, err)
	}
	in.BinaryDigest = dg
	return FromInfo(n, info, in)
}

// Detection is what a node found out about one environment.
type Detection struct {
	Name environment.Name
	// Definition and Ref are set when the runtime is installed (its binary
	// found, its version read, its digest taken), even if its probe failed.
	Definition *environment.Definition
	Ref        model.EnvironmentRef
	// Available: the probe ran a sandbox. Otherwise Reason says why not.
	Available bool
	Reason    string
}

// Prober makes the runtime of environment name and proves it runs a
// sandbox on this host. It returns the runtime's Info and the definition's
// other Inputs (its BinaryDigest is filled in by hashing Info.Binary)
// whenever the runtime is installed, even when the probe fails (then with a
// non-nil error), and a zero Info with an error when it is not.
type Prober func(ctx context.Context, name environment.Name) (runtime.Info, Inputs, error)

// Detect probes each environment and reports what works here. A failure of
// one environment is its Detection's Reason, not an error; Detect fails only
// when ctx ends.
func Detect(ctx context.Context, names []environment.Name, probe Prober) ([]Detection, error) {
	out := make([]Detection, 0, len(names))
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("detect execution environments: %w", err)
		}
		out = append(out, detectOne(ctx, n, probe))
	}
	return out, nil
}

func detectOne(ctx context.Context, n environment.Name, probe Prober) Detection {
	det := Detection{Name: n}
	info, in, perr := probe(ctx, n)
	if info.Binary != "" {
		d, err := Define(n, info, in)
		if err != nil {
			det.Reason = err.Error()
			return det
		}
		ref, err := d.Ref()
		if err != nil {
			det.Reason = err.Error()
			return det
		}
		det.Definition, det.Ref = &d, ref
	}
	if perr != nil {
		det.Reason = perr.Error()
		return det
	}
	if det.Definition == nil {
		det.Reason = "the probe returned no runtime binary"
		return det
	}
	det.Available = true
	return det
}
