package envid

import (
	"context"
	"errors"
	"fmt"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
)

// Errors of the three separate checks before a sandbox may run in an
// environment (decodable is not executable).
var (
	// ErrUnknown: no definition with that reference or name is known.
	ErrUnknown = errors.New("unknown execution environment")
	// ErrArtifactsMissing: the definition is known but this node's
	// artifacts no longer match it (binary gone, or its digest changed).
	ErrArtifactsMissing = errors.New("execution environment's artifacts are missing")
	// ErrUnavailable: the environment's artifacts are there but no node
	// enabled it and ran its probe successfully.
	ErrUnavailable = errors.New("no healthy node runs the execution environment")
)

// Detection is what a node found out about one environment.
type Detection struct {
	Name Name
	// Definition and Ref are set when the runtime is installed (its binary
	// found, its version read, its digest taken), even if its probe failed.
	Definition *Definition
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
type Prober func(ctx context.Context, name Name) (runtime.Info, Inputs, error)

// Detect probes each environment and reports what works here. A failure of
// one environment is its Detection's Reason, not an error; Detect fails only
// when ctx ends.
func Detect(ctx context.Context, names []Name, probe Prober) ([]Detection, error) {
	out := make([]Detection, 0, len(names))
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("detect execution environments: %w", err)
		}
		out = append(out, detectOne(ctx, n, probe))
	}
	return out, nil
}

func detectOne(ctx context.Context, n Name, probe Prober) Detection {
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

// Define builds the definition of an environment whose runtime is installed
// at info.Binary, hashing that file into in.BinaryDigest (in gives the
// rest: platforms, boot inputs, snapshot format).
func Define(n Name, info runtime.Info, in Inputs) (Definition, error) {
	dg, err := DigestFile(info.Binary)
	if err != nil {
		return Definition{}, fmt.Errorf("environment %s: %w", n, err)
	}
	in.BinaryDigest = dg
	return FromInfo(n, info, in)
}

// Verify checks that the artifacts of d are still what it was defined
// from: the runtime binary at binary hashes to d's digest. It returns an
// error wrapping ErrArtifactsMissing otherwise.
func Verify(d Definition, binary string) error {
	dg, err := DigestFile(binary)
	if err != nil {
		return fmt.Errorf("%w: environment %s: %w", ErrArtifactsMissing, d.Name, err)
	}
	if dg != d.Runtime.BinaryDigest {
		return fmt.Errorf("%w: environment %s: runtime binary %s is %s, the definition says %s", ErrArtifactsMissing, d.Name, binary, dg, d.Runtime.BinaryDigest)
	}
	return nil
}
