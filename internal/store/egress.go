package store

import (
	"context"
	"errors"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
)

// EgressProfile is an operator-defined set of egress rules that sandbox
// policies name. Its Spec holds allow, deny and tls_exempt rules only.
type EgressProfile struct {
	Name      policy.ProfileName
	Spec      policy.Spec
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Egress is the store's part of egress: each sandbox's policy, the
// operator's profiles and the projects' secrets.
type Egress interface {
	// GetSandboxEgress returns the egress policy of a sandbox of the
	// project as its create or last SetSandboxEgress gave it (ErrNotFound
	// for another project's).
	GetSandboxEgress(ctx context.Context, project model.ProjectID, id model.SandboxID) (policy.Spec, error)
	// GetSandboxEgressByID is GetSandboxEgress for the control loops and
	// the data plane, which are not project-scoped.
	GetSandboxEgressByID(ctx context.Context, id model.SandboxID) (policy.Spec, error)
	// SetSandboxEgress replaces a sandbox's egress policy. A deleted
	// sandbox is refused with model.ErrInvalidTransition; a profile that
	// does not exist with an error wrapping policy.ErrUnknownProfile.
	SetSandboxEgress(ctx context.Context, project model.ProjectID, id model.SandboxID, spec policy.Spec, now time.Time) error

	// PutEgressProfile creates or replaces a profile; created reports
	// which. The Spec must pass CheckProfile.
	PutEgressProfile(ctx context.Context, p EgressProfile) (created bool, err error)
	GetEgressProfile(ctx context.Context, name policy.ProfileName) (EgressProfile, error)
	// ListEgressProfiles returns every profile in name order.
	ListEgressProfiles(ctx context.Context) ([]EgressProfile, error)
	// DeleteEgressProfile removes a profile; ErrInUse while the policy of
	// a sandbox that is not deleted names it.
	DeleteEgressProfile(ctx context.Context, name policy.ProfileName) error

	// PutSecret creates or replaces the project's secret of that name;
	// created reports which (a replacement keeps CreatedAt and counts one
	// more Version; a creation has Version 1).
	PutSecret(ctx context.Context, s model.SealedSecret) (created bool, err error)
	// CreateSecret creates the project's secret of that name;
	// ErrAlreadyExists if it has one.
	CreateSecret(ctx context.Context, s model.SealedSecret) error
	GetSecret(ctx context.Context, project model.ProjectID, name string) (model.SealedSecret, error)
	// ListSecrets returns the project's secrets in name order.
	ListSecrets(ctx context.Context, project model.ProjectID) ([]model.SealedSecret, error)
	DeleteSecret(ctx context.Context, project model.ProjectID, name string) error
}

// EgressProfiles reads the egress profiles (what CompileEgress needs of a
// store; every Store has it).
type EgressProfiles interface {
	GetEgressProfile(ctx context.Context, name policy.ProfileName) (EgressProfile, error)
}

// CompileEgress compiles spec with the profiles it names, as st holds them
// now, and the server's default (see policy.Compile). A profile that does
// not exist is an error wrapping policy.ErrUnknownProfile. The server
// compiles a sandbox's stored policy with it when the sandbox starts; the
// API when it changes.
func CompileEgress(ctx context.Context, st EgressProfiles, spec policy.Spec, serverDefault policy.Default) (*policy.Policy, error) {
	profiles := map[policy.ProfileName]policy.Spec{}
	for _, name := range spec.Profiles {
		p, err := st.GetEgressProfile(ctx, name)
		if errors.Is(err, ErrNotFound) {
			continue // policy.Compile reports it
		}
		if err != nil {
			return nil, err
		}
		profiles[name] = p.Spec
	}
	return policy.Compile(spec, func(n policy.ProfileName) (policy.Spec, bool) {
		s, ok := profiles[n]
		return s, ok
	}, serverDefault)
}
