package apiv1

import "testing"

// TestSetsSessionCookie: every Set-Cookie a browser would send back as the
// console's session cookie is recognised, a nameless one
// ("=airlock_session=v", sent back as "airlock_session=v") included;
// other cookies are not.
func TestSetsSessionCookie(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		line string
		want bool
	}{
		{"airlock_session=alk_x", true},
		{"airlock_session=alk_x; Path=/; HttpOnly", true},
		{" AIRLOCK_SESSION =alk_x", true},
		{"__Host-airlock_session=alk_x; Secure; Path=/", true},
		{"__host-Airlock_Session=alk_x", true},
		{"airlock_session", true},        // nameless, value "airlock_session"
		{"=airlock_session=alk_x", true}, // nameless, value "airlock_session=alk_x"
		{"=airlock_session=alk_x; Path=/", true},
		{" = \tairlock_session =alk_x", true},
		{"=__Host-airlock_session=alk_x", true},
		{"=AIRLOCK_SESSION", true},
		{"airlock_session\t=x", true},
		{"a=1", false},
		{"x=airlock_session", false},
		{"airlock_session_x=keep", false},
		{"=airlock_session_x=keep", false},
		{"=theme", false},
		{"", false},
		{"=", false},
		{"; airlock_session=x", false}, // the first part is the cookie; an attribute is not
	} {
		if got := SetsSessionCookie(tc.line); got != tc.want {
			t.Errorf("SetsSessionCookie(%q) = %v, want %v", tc.line, got, tc.want)
		}
	}
}
