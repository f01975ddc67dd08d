package api

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/environment/registry"
)

// Environments lists this server's execution environments
// (*registry.Registry) for GET /v1/environments; creates resolve theirs
// through the sandboxes service.
type Environments interface {
	List(ctx context.Context) ([]registry.Status, error)
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
		e := environmentOut(s)
		if kind, ok := a.cfg.Sandboxes.ForkKind(e.Name); ok {
			e.Fork = string(kind)
			if kind == "" {
				e.Fork = "none"
			}
		}
		out.Environments = append(out.Environments, e)
	}
	writeJSON(w, http.StatusOK, out)
}

func environmentOut(s registry.Status) apiv1.Environment {
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
