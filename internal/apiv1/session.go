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

// SetsSessionCookie reports whether a browser would store the Set-Cookie
// header value line as a cookie that it then sends as the console's
// session cookie. Browsers parse the first ";"-separated part as
// RFC 6265bis does: the name before its first "=", the value after, both
// trimmed of spaces and tabs; a part without "=", or one whose name is
// empty ("=airlock_session=v"), is a nameless cookie whose value alone is
// sent back in the Cookie header ("airlock_session=v"), where every server
// (Airlock's included) reads the text before "=" as the name. So the
// cookie's effective name is its name, or for a nameless cookie the start
// of its value up to "="; it is the session cookie if that is either
// spelling, case aside.
func SetsSessionCookie(line string) bool {
	pair, _, _ := strings.Cut(line, ";")
	name, value, hasEq := strings.Cut(pair, "=")
	name = strings.Trim(name, " \t")
	if !hasEq {
		name, value = "", pair
	}
	if name == "" {
		name, _, _ = strings.Cut(strings.Trim(value, " \t"), "=")
	}
	return IsSessionCookie(strings.Trim(name, " \t"))
}
