package apiv1

import "strings"

// The web console's session cookie holds an API key. Its name depends on
// whether the server is reached over https (see api.SessionCookieName):
// the __Host- prefix makes a browser refuse the cookie unless it is
// Secure, host-only (no Domain) and of Path=/, so no other host (a
// sandbox's E2B host under the same parent domain) can plant one.
const (
	// SessionCookie is the session cookie's name over plain http.
	SessionCookie = "airlock_session"
	// SecureSessionCookie is its name when the server is reached over
	// https.
	SecureSessionCookie = "__Host-airlock_session"
)

// IsSessionCookie reports whether name is either spelling of the
// console's session cookie (as a browser compares cookie prefixes: case
// aside).
func IsSessionCookie(name string) bool {
	name = strings.TrimSpace(name)
	return strings.EqualFold(name, SessionCookie) || strings.EqualFold(name, SecureSessionCookie)
}
