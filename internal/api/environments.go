package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/envid"
	"github.com/airlockdev/airlock/internal/envreg"
	"github.com/airlockdev/airlock/internal/model"
)

// Environments is this server's registry of execution environments
// (*envreg.Registry).
type Environments interface {
	List(ctx context.Context) ([]envreg.Status, error)
	// Resolve returns the reference of the environment sel names if a new
	// sandbox may run in it here; errors wrap envid.ErrUnknown,
	// envid.ErrArtifactsMissing or envid.ErrUnavailable.
	Resolve(ctx context.Context, sel envid.Selector) (model.EnvironmentRef, error)
	// Default is the environment of a create that names none.
	Default() envid.Name
}

// listEnvironments: GET /v1/environments → 200 EnvironmentList.
func (a *API) listEnvironments(w http.ResponseWriter, r *http.Request, _ principal) {
	if a.cfg.Environments == nil {
		a.writeError(w, r, errorf(apiv1.CodeNotSupported, "this server has no execution environment registry"))
		return
	}
	list, err := a.cfg.Environments.List(r.Context())
	if err != nil {
		a.writeError(w, r, fmt.Errorf("list environments: %w", err))
		return
	}
	out := apiv1.EnvironmentList{Environments: make([]apiv1.Environment, 0, len(list))}
	for _, s := range list {
		out.Environments = append(out.Environments, environmentOut(s))
	}
	writeJSON(w, http.StatusOK, out)
}

func environmentOut(s envreg.Status) apiv1.Environment {
	d := s.Definition
	var checked *time.Time
	if !s.CheckedAt.IsZero() {
		t := s.CheckedAt.UTC()
		checked = &t
	}
	return apiv1.Environment{
		CheckedAt:      checked,
		Ref:            string(s.Ref),
		Name:           string(d.Name),
		Isolation:      string(d.Isolation),
		Enabled:        s.Enabled,
		Available:      s.Available,
		Reason:         s.Reason,
		Default:        s.Default,
		Snapshot:       string(d.Snapshot.Capability),
		SnapshotFormat: d.Snapshot.Format,
		OOMScope:       string(d.OOMScope),
		Runtime:        apiv1.EnvironmentRuntime{Name: d.Runtime.Name, Version: d.Runtime.Version, BinaryDigest: string(d.Runtime.BinaryDigest)},
		Host:           d.Host.OS + "/" + d.Host.Arch,
		Guest:          d.Guest.OS + "/" + d.Guest.Arch,
		SchemaVersion:  d.SchemaVersion,
	}
}

// createEnvironment resolves a create request's environment (a name or a
// reference; given: whether the request named one) to the reference the
// sandbox records. A server without a registry leaves it empty (the
// worker's default) and refuses a named one.
func (a *API) createEnvironment(ctx context.Context, given bool, s string) (model.EnvironmentRef, error) {
	if a.cfg.Environments == nil {
		if given {
			return "", errorf(apiv1.CodeNotSupported, "this server cannot choose an execution environment")
		}
		return "", nil
	}
	sel := envid.Selector{Name: a.cfg.Environments.Default()}
	if given {
		var err error
		if sel, err = envid.ParseSelector(s); err != nil {
			return "", errorf(apiv1.CodeEnvironmentUnknown, "environment: %s", err.Error())
		}
	}
	ref, err := a.cfg.Environments.Resolve(ctx, sel)
	switch {
	case err == nil:
		return ref, nil
	case errors.Is(err, envid.ErrUnknown):
		return "", errorf(apiv1.CodeEnvironmentUnknown, "%s", err.Error())
	case errors.Is(err, envid.ErrArtifactsMissing):
		return "", errorf(apiv1.CodeEnvironmentArtifactsMissing, "%s", err.Error())
	case errors.Is(err, envid.ErrUnavailable):
		return "", errorf(apiv1.CodeEnvironmentUnavailable, "%s", err.Error())
	}
	return "", fmt.Errorf("resolve environment %s: %w", sel, err)
}
