package e2b

import (
	"net/http"
	"reflect"
	"testing"
)

// TestDropSessionSetCookies: a guest behind <port>-<id>.<domain> cannot
// plant the console's session cookie (either spelling) for a console on
// <domain>; its other cookies pass.
func TestDropSessionSetCookies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want []string
	}{
		{nil, nil},
		{[]string{"a=1"}, []string{"a=1"}},
		{[]string{"airlock_session=alk_attacker; Domain=example.test; Path=/v1", "a=1"}, []string{"a=1"}},
		{[]string{"__Host-airlock_session=alk_x; Secure; Path=/", "__host-AIRLOCK_session=alk_x", " airlock_session =x"}, nil},
		{[]string{"airlock_session_x=keep", "x=airlock_session"}, []string{"airlock_session_x=keep", "x=airlock_session"}},
		// Nameless cookies, which a browser sends back as their value
		// alone: "airlock_session=alk_x" in the Cookie header.
		{[]string{"=airlock_session=alk_x; Path=/", "a=1", " = AIRLOCK_session=alk_x", "=__Host-airlock_session=alk_x", "airlock_session"}, []string{"a=1"}},
		{[]string{"=airlock_session_x=keep", "=theme"}, []string{"=airlock_session_x=keep", "=theme"}},
	} {
		h := http.Header{}
		for _, c := range tc.in {
			h.Add("Set-Cookie", c)
		}
		dropSessionSetCookies(h)
		if got := h.Values("Set-Cookie"); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q → %q, want %q", tc.in, got, tc.want)
		}
	}
}
