package console

import (
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/airlockdev/airlock/internal/api"
	"github.com/airlockdev/airlock/internal/apiv1"
)

// maxSessionBody bounds POST /ui/session's body.
const maxSessionBody = 4 << 10

// sessionOut is the JSON of /ui/session.
type sessionOut struct {
	KeyID   string `json:"key_id"`
	Project string `json:"project"`
	Role    string `json:"role"`
	CSRF    string `json:"csrf"`
}

func sessionJSON(s api.Session, key string) sessionOut {
	return sessionOut{KeyID: s.KeyID.String(), Project: s.Project.String(), Role: string(s.Role), CSRF: api.CSRFToken(key)}
}

// session: POST /ui/session {"key"} signs in (sets the cookie), GET
// answers who the cookie is, DELETE signs out (clears it).
func (c *Console) session(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	switch r.Method {
	case http.MethodPost:
		c.signIn(w, r)
	case http.MethodGet, http.MethodHead:
		s, key, err := c.cfg.Sessions.CookieSession(r)
		if err != nil {
			c.cfg.Sessions.WriteError(w, r, err)
			return
		}
		api.WriteJSON(w, http.StatusOK, sessionJSON(s, key))
	case http.MethodDelete:
		c.signOut(w, r)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST, DELETE")
		c.cfg.Sessions.WriteError(w, r, api.Errorf(apiv1.CodeMethodNotAllowed, "%s is not allowed on /ui/session", r.Method))
	}
}

// signIn checks the key as the API does and sets the session cookie.
// The body must be JSON (a cross-site form cannot send it) and a request
// from another origin is refused, so no other site can sign a browser in
// under a key of its own.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		c.cfg.Sessions.WriteError(w, r, api.Errorf(apiv1.CodeUnsupportedMedia,
			"send the key as JSON {\"key\": \"alk_…\"} with Content-Type: application/json"))
		return
	}
	// The Origin rule of a cookie request, without a CSRF token: a POST
	// carrying its own key has none yet. Checked with a GET's rules.
	probe := r.Clone(r.Context())
	probe.Method = http.MethodGet
	if err := c.cfg.Sessions.CheckCrossSite(probe, ""); err != nil {
		c.cfg.Sessions.WriteError(w, r, err)
		return
	}
	var in struct {
		Key string `json:"key"`
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, maxSessionBody+1))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		c.cfg.Sessions.WriteError(w, r, api.Errorf(apiv1.CodeInvalidRequest, "the body must be JSON {\"key\": \"alk_…\"}"))
		return
	}
	key := strings.TrimSpace(in.Key)
	if key == "" {
		c.cfg.Sessions.WriteError(w, r, api.Errorf(apiv1.CodeInvalidRequest, "key is required"))
		return
	}
	s, err := c.cfg.Sessions.AuthenticateKey(r.Context(), key)
	if err != nil {
		c.cfg.Sessions.WriteError(w, r, err)
		return
	}
	http.SetCookie(w, c.cookie(r, key, 0))
	api.WriteJSON(w, http.StatusOK, sessionJSON(s, key))
}

// signOut clears the cookie. It needs the session's CSRF header (and the
// own origin), so that no other site can sign a browser out; the key need
// not still be valid.
func (c *Console) signOut(w http.ResponseWriter, r *http.Request) {
	key, ok, err := c.cfg.Sessions.SessionKey(r)
	if err != nil {
		c.cfg.Sessions.WriteError(w, r, err)
		return
	}
	if ok && key != "" {
		if err := c.cfg.Sessions.CheckCrossSite(r, key); err != nil {
			c.cfg.Sessions.WriteError(w, r, err)
			return
		}
	}
	http.SetCookie(w, c.cookie(r, "", -1))
	w.WriteHeader(http.StatusNoContent)
}

// cookie is the session cookie holding key (maxAge -1: delete it),
// named as the API reads it: over https __Host-airlock_session, Secure,
// host-only, Path=/.
func (c *Console) cookie(r *http.Request, key string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name:     c.cfg.Sessions.SessionCookieName(r),
		Value:    key,
		Path:     "/",
		MaxAge:   maxAge,
		HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
		Secure:   c.cfg.Sessions.Secure(r),
	}
}
