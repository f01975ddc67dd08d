package api

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/model"
)

// The web console's session (internal/console) is the API key itself, in
// an HttpOnly, SameSite=Strict cookie. A request without an Authorization
// header that carries the cookie is authenticated by the key in it, with
// the same checks as a bearer key, plus two rules against cross-site
// requests:
//
//   - a request other than GET or HEAD must carry X-Airlock-CSRF with the
//     key's CSRF token (CSRFToken): a value only a page that read the
//     session's JSON (same origin) knows;
//   - a request whose Origin header names another origin than the
//     request's own (or the public URL's) is refused.
//
// Both answer 403 csrf_failed. The cookie is never accepted on the port
// proxy (a guest's pages are served from the console's origin there, and
// must not be able to act as the console's user): 401.
const (
	// SessionCookie is the console's session cookie over plain http.
	SessionCookie = apiv1.SessionCookie
	// SecureSessionCookie is its name when the server is reached over
	// https (see SessionCookieName).
	SecureSessionCookie = apiv1.SecureSessionCookie
	// CSRFHeader carries the CSRF token of a cookie-authenticated request.
	CSRFHeader = "X-Airlock-CSRF"
	// csrfMessage is what the CSRF token is the HMAC of.
	csrfMessage = "airlock-console-csrf-v1"
)

// CSRFToken is the CSRF token of the console session of API key key:
// base64url(HMAC-SHA256(key, "airlock-console-csrf-v1")). It needs no
// server state (every replica derives the same) and cannot be guessed
// without the key.
func CSRFToken(key string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(csrfMessage))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Session is who an API key authenticates as.
type Session struct {
	KeyID   model.APIKeyID
	Project model.ProjectID
	Role    model.Role
}

// AuthenticateKey checks an API key exactly as a bearer key of the API is
// checked. A malformed, unknown or revoked key is an error that WriteError
// answers with 401 unauthenticated; other kinds of token are refused too.
func (a *API) AuthenticateKey(ctx context.Context, key string) (Session, error) {
	if auth.KindOf(key) != auth.KindAPIKey {
		return Session{}, unauthenticated("malformed API key")
	}
	p, err := a.authenticateKey(ctx, key)
	if err != nil {
		return Session{}, err
	}
	return Session{KeyID: p.keyID, Project: p.project, Role: p.role}, nil
}

// CookieSession authenticates r by its session cookie alone, with the
// CSRF and Origin rules of a cookie-authenticated API request, and
// returns the session and its key.
func (a *API) CookieSession(r *http.Request) (Session, string, error) {
	key, ok, err := a.SessionKey(r)
	if err != nil {
		return Session{}, "", err
	}
	if !ok || key == "" {
		return Session{}, "", unauthenticated("no console session: sign in")
	}
	if err := a.CheckCrossSite(r, key); err != nil {
		return Session{}, "", err
	}
	s, err := a.AuthenticateKey(r.Context(), key)
	return s, key, err
}

// Secure reports whether r reached the server over https: the request
// came over TLS, or the public URL (Config.PublicURL, behind a
// TLS-terminating proxy) is https.
func (a *API) Secure(r *http.Request) bool {
	return r.TLS != nil || strings.HasPrefix(a.cfg.PublicURL, "https://")
}

// SessionCookieName is the one place that names the session cookie of
// r: SecureSessionCookie (__Host-, which the console sets Secure) over
// https, SessionCookie otherwise. The console sets the cookie by this
// name and the API reads it by this name only.
func (a *API) SessionCookieName(r *http.Request) string {
	if a.Secure(r) {
		return SecureSessionCookie
	}
	return SessionCookie
}

// SessionKey is the key in r's session cookie (ok false: r has none).
// More than one cookie of that name is refused (401), never one of them
// picked: another host under the same parent domain (a guest's server on
// an E2B host) can plant a cookie of the name with a Domain or a longer
// Path, which the browser sends alongside the console's own, and the
// user would work under the planter's key.
func (a *API) SessionKey(r *http.Request) (key string, ok bool, err error) {
	name := a.SessionCookieName(r)
	for _, c := range r.Cookies() {
		if c.Name != name {
			continue
		}
		if ok {
			return "", false, unauthenticated("conflicting %s cookies: clear this site's cookies and sign in again", name)
		}
		key, ok = c.Value, true
	}
	return key, ok, nil
}

// CheckCrossSite applies the Origin and CSRF rules of a request
// authenticated by a session cookie holding key (see above); the error
// is a 403 csrf_failed for WriteError.
func (a *API) CheckCrossSite(r *http.Request, key string) error { return a.checkCrossSite(r, key) }

// WriteError answers err as the API does: the JSON error of its code.
func (a *API) WriteError(w http.ResponseWriter, r *http.Request, err error) {
	a.writeError(w, r, err)
}

// Errorf is an error that WriteError answers with code (one of apiv1's
// Code constants) and its status (apiv1's error table), its message
// formatted as fmt.Sprintf does.
func Errorf(code, format string, args ...any) error {
	return errorf(code, format, args...)
}

// WriteJSON answers v as JSON with status, with the headers of every API
// answer (no-store, nosniff).
func WriteJSON(w http.ResponseWriter, status int, v any) { writeJSON(w, status, v) }

// cookieAuth authenticates a request of route rt by the API key in its
// session cookie.
func (a *API) cookieAuth(r *http.Request, rt route, key string) (principal, error) {
	if rt.has(guestTraffic) {
		return principal{}, unauthenticated("the console's session cookie is not accepted on the port proxy: send Authorization: Bearer <api key>")
	}
	if auth.KindOf(key) != auth.KindAPIKey {
		return principal{}, unauthenticated("malformed API key in the session cookie")
	}
	if err := a.checkCrossSite(r, key); err != nil {
		return principal{}, err
	}
	return a.authenticateKey(r.Context(), key)
}

// checkCrossSite applies the Origin and CSRF rules to a request
// authenticated by the session cookie holding key.
func (a *API) checkCrossSite(r *http.Request, key string) error {
	// A request a trusted peer forwarded had its Origin checked there.
	if o := r.Header.Get("Origin"); o != "" && peerFrom(r.Context()) == nil && !a.sameOrigin(r, o) {
		return errorf(apiv1.CodeCSRFFailed, "a cross-origin request (Origin %q) cannot use the console's session", o)
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return nil
	}
	got := r.Header.Get(CSRFHeader)
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(CSRFToken(key))) != 1 {
		return errorf(apiv1.CodeCSRFFailed, "a request authenticated by the console's session must carry the session's %s header", CSRFHeader)
	}
	return nil
}

// sameOrigin reports whether origin is the request's own (its Host, by
// the request's scheme or https) or the public URL's.
func (a *API) sameOrigin(r *http.Request, origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || u.Path != "" || u.User != nil {
		return false
	}
	scheme := strings.ToLower(u.Scheme)
	if a.cfg.PublicURL != "" {
		if p, err := url.Parse(a.cfg.PublicURL); err == nil && strings.EqualFold(p.Scheme, scheme) && strings.EqualFold(p.Host, u.Host) {
			return true
		}
	}
	own := "http"
	if r.TLS != nil {
		own = "https"
	}
	return (scheme == own || scheme == "https") && strings.EqualFold(u.Host, r.Host)
}
