package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// principal is the authenticated caller of a request.
type principal struct {
	keyID   model.APIKeyID
	project model.ProjectID
	role    model.Role
}

func unauthenticated(format string, args ...any) *apiError {
	return errorf(http.StatusUnauthorized, apiv1.CodeUnauthenticated, format, args...)
}

// authenticate checks the request's bearer API key against the store. Every
// failure is a 401 that does not say whether the key exists.
func (a *API) authenticate(r *http.Request) (principal, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return principal{}, unauthenticated("missing API key: send Authorization: Bearer <api key>")
	}
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return principal{}, unauthenticated("the Authorization header must be Bearer <api key>")
	}
	switch auth.KindOf(token) {
	case auth.KindAttachment, auth.KindFiles:
		return principal{}, errorf(http.StatusUnauthorized, apiv1.CodeWrongTokenKind,
			"a data-plane token cannot call the management API; use an API key")
	case auth.KindAPIKey:
	default:
		return principal{}, unauthenticated("malformed API key")
	}
	id, secret, err := auth.ParseAPIKey(token)
	if err != nil {
		return principal{}, unauthenticated("malformed API key")
	}
	key, err := a.cfg.Store.GetAPIKey(r.Context(), id)
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
