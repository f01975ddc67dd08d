package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/store"
)

// Egress profiles: operator-defined rule sets that sandbox policies name.
// Any key may read them (to know what to name); only admin keys change them.

func profileOut(p store.EgressProfile) apiv1.EgressProfile {
	return apiv1.EgressProfile{
		Name: string(p.Name), Allow: ruleStrings(p.Spec.Allow), Deny: ruleStrings(p.Spec.Deny),
		TLSExempt: ruleStrings(p.Spec.TLSExempt), CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt,
	}
}

func profileName(r *http.Request) (policy.ProfileName, error) {
	return policy.ParseProfileName(r.PathValue("name"))
}

// listEgressProfiles: GET /v1/egress-profiles → 200 EgressProfileList.
func (a *API) listEgressProfiles(w http.ResponseWriter, r *http.Request, _ principal) {
	list, err := a.cfg.Store.ListEgressProfiles(r.Context())
	if err != nil {
		a.writeError(w, r, fmt.Errorf("list egress profiles: %w", err))
		return
	}
	out := apiv1.EgressProfileList{Profiles: make([]apiv1.EgressProfile, 0, len(list))}
	for _, p := range list {
		out.Profiles = append(out.Profiles, profileOut(p))
	}
	writeJSON(w, http.StatusOK, out)
}

// getEgressProfile: GET /v1/egress-profiles/{name} → 200 EgressProfile.
func (a *API) getEgressProfile(w http.ResponseWriter, r *http.Request, _ principal) {
	name, err := profileName(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	p, err := a.cfg.Store.GetEgressProfile(r.Context(), name)
	if errors.Is(err, store.ErrNotFound) {
		a.writeError(w, r, notFound("egress profile %s not found", name))
		return
	}
	if err != nil {
		a.writeError(w, r, fmt.Errorf("get egress profile %s: %w", name, err))
		return
	}
	writeJSON(w, http.StatusOK, profileOut(p))
}

// putEgressProfile: PUT /v1/egress-profiles/{name} → 201 (created) or 200
// (replaced) EgressProfile. Running sandboxes whose policy names the
// profile get the new rules at once.
func (a *API) putEgressProfile(ctx context.Context, c *call[apiv1.PutEgressProfileRequest]) (*reply, error) {
	name, err := profileName(c.r)
	if err != nil {
		return nil, err
	}
	spec, err := parseEgressPolicy(apiv1.EgressPolicy{Allow: c.in.Allow, Deny: c.in.Deny, TLSExempt: c.in.TLSExempt})
	if err != nil {
		return nil, err
	}
	p := store.EgressProfile{Name: name, Spec: spec, CreatedAt: c.now, UpdatedAt: c.now}
	created, err := a.cfg.Store.PutEgressProfile(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("put egress profile %s: %w", name, err)
	}
	if p, err = a.cfg.Store.GetEgressProfile(ctx, name); err != nil {
		return nil, fmt.Errorf("read egress profile %s back: %w", name, err)
	}
	a.log.InfoContext(ctx, "egress profile set", "profile", name, "created", created, "by", c.p.keyID)
	a.reapplyProfile(ctx, name)
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return idempotentReply(ctx, a, c, status, profileOut(p))
}

// deleteEgressProfile: DELETE /v1/egress-profiles/{name} → 200 the deleted
// EgressProfile; 409 egress_profile_in_use while a sandbox that is not
// deleted names it.
func (a *API) deleteEgressProfile(ctx context.Context, c *call[noBody]) (*reply, error) {
	name, err := profileName(c.r)
	if err != nil {
		return nil, err
	}
	p, err := a.cfg.Store.GetEgressProfile(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound("egress profile %s not found", name)
	}
	if err != nil {
		return nil, fmt.Errorf("get egress profile %s: %w", name, err)
	}
	if err := a.cfg.Store.DeleteEgressProfile(ctx, name); errors.Is(err, store.ErrNotFound) {
		return nil, notFound("egress profile %s not found", name)
	} else if errors.Is(err, store.ErrInUse) {
		return nil, errorf(apiv1.CodeEgressProfileInUse,
			"egress profile %s is named by the policy of a sandbox that is not deleted; change those policies first", name)
	} else if err != nil {
		return nil, fmt.Errorf("delete egress profile %s: %w", name, err)
	}
	a.log.InfoContext(ctx, "egress profile deleted", "profile", name, "by", c.p.keyID)
	return idempotentReply(ctx, a, c, http.StatusOK, profileOut(p))
}
