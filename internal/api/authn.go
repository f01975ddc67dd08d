package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/connbudget"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// principal is the authenticated caller of a request.
type principal struct {
	keyID   model.APIKeyID
	project model.ProjectID
	role    model.Role
	// sandbox, if set, is the one sandbox the caller may act on: it
	// authenticated with that sandbox's access token, as a member of
	// project without an API key (keyID is empty), and guard lets it call
	// only the routes of that sandbox.
	sandbox model.SandboxID
	// volume, if set, is the one volume whose files the caller may read
	// and write: it authenticated with that volume's content token
	// (auth.VolumeTokenPrefix), as a member of project without an API
	// key, and guard lets it call only the volumeToken routes of that
	// volume.
	volume model.VolumeID
}

// limitKey is what the caller's mutations are rate-limited by: its API
// key, or its sandbox for a sandbox access token.
func (p principal) limitKey() string {
	if p.sandbox != "" {
		return p.sandbox.String()
	}
	if p.volume != "" {
		return p.volume.String()
	}
	return p.keyID.String()
}

// inScope reports whether p may call route rt as r: always, but for a
// sandbox access token, which opens only the routes of its own sandbox
// ({id}) that the route table marks sandboxToken (member routes only).
func (p principal) inScope(rt route, r *http.Request) bool {
	switch {
	case p.sandbox != "":
		return rt.access.level() == member && rt.has(sandboxToken) && r.PathValue("id") == p.sandbox.String()
	case p.volume != "":
		return rt.access.level() == member && rt.has(volumeToken) && r.PathValue("id") == p.volume.String()
	}
	return true
}

// scopeError is the refusal of a route out of p's scope.
func (p principal) scopeError() error {
	if p.volume != "" {
		return errorf(apiv1.CodeTokenScope,
			"a volume content token opens only the file routes of its own volume (/v1/volumes/%s/files…); use an API key", p.volume)
	}
	return errorf(apiv1.CodeTokenScope,
		"a sandbox access token opens only the routes of its own sandbox (/v1/sandboxes/%s…); use an API key", p.sandbox)
}

func unauthenticated(format string, args ...any) *apiError {
	return errorf(apiv1.CodeUnauthenticated, format, args...)
}

// authenticate checks the request's bearer API key against the store, or,
// without an Authorization header, the console's session cookie (see
// cookieAuth) for route rt. Every failure is a 401 that does not say
// whether the key exists. A request the server's own code sent in-process
// bearing a caller it authenticated (inprocess.go) is that caller.
func (a *API) authenticate(r *http.Request, rt route) (principal, error) {
	if c := inProcessFrom(r.Context()); c != nil && c.p != nil {
		return *c.p, nil
	}
	h := r.Header.Get("Authorization")
	if h == "" {
		key, ok, err := a.SessionKey(r)
		if err != nil {
			return principal{}, err
		}
		if ok {
			return a.cookieAuth(r, rt, key)
		}
		return principal{}, unauthenticated("missing API key: send Authorization: Bearer <api key>")
	}
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return principal{}, unauthenticated("the Authorization header must be Bearer <api key>")
	}
	switch auth.KindOf(token) {
	case auth.KindAttachment, auth.KindFiles:
		return principal{}, errorf(apiv1.CodeWrongTokenKind,
			"a data-plane token cannot call the management API; use an API key")
	case auth.KindSandbox:
		return a.authenticateSandbox(r, token)
	case auth.KindVolume:
		return a.authenticateVolume(r, token)
	case auth.KindAPIKey:
	default:
		return principal{}, unauthenticated("malformed API key")
	}
	return a.authenticateKey(r.Context(), token)
}

// authenticateKey checks an API key (alk_…) against the store.
func (a *API) authenticateKey(ctx context.Context, token string) (principal, error) {
	id, secret, err := auth.ParseAPIKey(token)
	if err != nil {
		return principal{}, unauthenticated("malformed API key")
	}
	key, err := a.cfg.Store.GetAPIKey(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return principal{}, unauthenticated("invalid API key")
	}
	if err != nil {
		return principal{}, fmt.Errorf("load API key %s: %w", id, err)
	}
	if !auth.VerifySecret(key.SecretHash, secret) {
		return principal{}, unauthenticated("invalid API key")
	}
	if key.RevokedAt != nil {
		return principal{}, unauthenticated("this API key was revoked")
	}
	return principal{keyID: key.ID, project: key.ProjectID, role: key.Role}, nil
}

// authenticateSandbox checks a sandbox access token: signed by a key that
// still verifies (auth.Verifier.VerifySandboxAt), naming a sandbox that
// exists in the token's project and is not deleted. The principal is a
// member of that project limited to that sandbox (principal.inScope).
// Every failure is a 401 that does not say which check failed.
func (a *API) authenticateSandbox(r *http.Request, token string) (principal, error) {
	if a.cfg.SandboxTokens == nil {
		return principal{}, unauthenticated("this server takes no sandbox access tokens; use an API key")
	}
	c, err := a.cfg.SandboxTokens.VerifySandboxAt(token, a.cfg.Now())
	if err != nil || c.Project == model.SystemProject {
		return principal{}, unauthenticated("invalid sandbox access token")
	}
	sb, err := a.cfg.Store.GetSandbox(r.Context(), c.Project, c.Sandbox)
	if errors.Is(err, store.ErrNotFound) || err == nil && sb.State == model.StateDeleted {
		return principal{}, unauthenticated("invalid sandbox access token")
	}
	if err != nil {
		return principal{}, fmt.Errorf("load sandbox %s of a sandbox token: %w", c.Sandbox, err)
	}
	return principal{project: c.Project, role: model.RoleMember, sandbox: c.Sandbox}, nil
}

// authenticateVolume checks a volume content token: signed by a key that
// still verifies (auth.Verifier.VerifyVolumeAt), naming a volume that
// exists in the token's project. The principal is a member of that
// project limited to that volume's files (principal.inScope). Every
// failure is a 401 that does not say which check failed.
func (a *API) authenticateVolume(r *http.Request, token string) (principal, error) {
	if a.cfg.SandboxTokens == nil {
		return principal{}, unauthenticated("this server takes no volume content tokens; use an API key")
	}
	c, err := a.cfg.SandboxTokens.VerifyVolumeAt(token, a.cfg.Now())
	if err != nil || c.Project == model.SystemProject {
		return principal{}, unauthenticated("invalid volume content token")
	}
	v, err := a.cfg.Store.GetVolumeByID(r.Context(), c.Volume)
	if errors.Is(err, store.ErrNotFound) || err == nil && v.ProjectID != c.Project {
		return principal{}, unauthenticated("invalid volume content token")
	}
	if err != nil {
		return principal{}, fmt.Errorf("load volume %s of a volume token: %w", c.Volume, err)
	}
	return principal{project: c.Project, role: model.RoleMember, volume: c.Volume}, nil
}

// connectionAuthenticated tells the server's connection budget that the
// request's connection carried p's credential (internal/connbudget): it
// leaves the unauthenticated share and its short idle limit, and counts
// against p's project (a trusted peer's, against that peer). At the
// project's cap the request is refused with too_many_connections and the
// connection closed.
func (a *API) connectionAuthenticated(w http.ResponseWriter, r *http.Request, p principal) error {
	owner := "project:" + p.project.String()
	if c := peerFrom(r.Context()); c != nil {
		owner = "node:" + string(c.From)
	}
	if err := connbudget.Authenticated(r.Context(), owner); err != nil {
		w.Header().Set("Connection", "close")
		return errorf(apiv1.CodeTooManyConnections, "%s; close some of them first", err)
	}
	return nil
}

// KeyCaller authenticates an API key (alk_…) as a request's bearer key is
// authenticated, for the server's own front doors (the E2B API): ok is
// false for a key that does not authenticate (malformed, unknown, a wrong
// secret, revoked); err is a failure to check it.
func (a *API) KeyCaller(ctx context.Context, token string) (project model.ProjectID, role model.Role, ok bool, err error) {
	if auth.KindOf(token) != auth.KindAPIKey {
		return "", "", false, nil
	}
	p, err := a.authenticateKey(ctx, token)
	var ae *apiError
	if errors.As(err, &ae) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, err
	}
	return p.project, p.role, true, nil
}
