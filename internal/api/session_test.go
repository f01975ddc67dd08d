package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/model"
)

// cookieReq is a request authenticated by the console's session cookie
// only (no Authorization), with extra headers.
func cookieReq(method, path, cookie, body string, kv ...string) req {
	h := http.Header{}
	if cookie != "" {
		h.Set("Cookie", SessionCookie+"="+cookie)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return req{method: method, path: path, body: body, header: h}
}

func TestCSRFTokenDerivation(t *testing.T) {
	t.Parallel()
	// base64url(HMAC-SHA256(key = "alk_a", msg = "airlock-console-csrf-v1")), unpadded, computed independently:
	// printf %s airlock-console-csrf-v1 | openssl dgst -sha256 -hmac alk_a -binary | basenc --base64url
	a, b := CSRFToken("alk_a"), CSRFToken("alk_b")
	if a != "0l4joJFlCj61eHfn9Y3LVQxOGn1IzMsKqZ-g1xAVWD0" {
		t.Errorf("CSRFToken(alk_a) = %q", a)
	}
	if a == b || len(a) != 43 || strings.ContainsAny(a, "+/=") {
		t.Fatalf("CSRF tokens %q %q: want distinct unpadded base64url of 32 bytes", a, b)
	}
	if CSRFToken("alk_a") != a {
		t.Fatal("the CSRF token is not a function of the key")
	}
}

// TestCookieAuthentication: the console's cookie authenticates like a
// bearer key, with the CSRF and Origin rules, and nowhere it must not.
func TestCookieAuthentication(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sbA := e.runningSandbox(e.keyA)
	sb2 := e.runningSandbox(e.keyA)
	csrfA := CSRFToken(e.keyA)
	// A member key of project A to revoke.
	_, revoked := e.newProject("gone", "member")
	rid, _, err := auth.ParseAPIKey(revoked)
	if err != nil {
		t.Fatal(err)
	}
	e.do("DELETE", "/v1/admin/keys/"+rid.String(), e.admin, "").want(t, http.StatusOK)

	list := "/v1/sandboxes"
	for _, tc := range []struct {
		name   string
		r      req
		status int
		code   string
	}{
		{"no cookie, no key", func() req { r := cookieReq("GET", list, "", ""); r.invalid = true; return r }(), 401, apiv1.CodeUnauthenticated},
		{"garbage cookie", cookieReq("GET", list, "nonsense", ""), 401, apiv1.CodeUnauthenticated},
		{"forged key", cookieReq("GET", list, e.keyA[:len(e.keyA)-4]+"AAAA", ""), 401, apiv1.CodeUnauthenticated},
		{"revoked key", cookieReq("GET", list, revoked, ""), 401, apiv1.CodeUnauthenticated},
		{"an attachment-kind token", cookieReq("GET", list, "alt_x.y.z", ""), 401, apiv1.CodeUnauthenticated},
		{"GET with the cookie", cookieReq("GET", list, e.keyA, ""), 200, ""},
		{"GET from the same origin", cookieReq("GET", list, e.keyA, "", "Origin", e.srv.URL), 200, ""},
		{"GET from another origin", cookieReq("GET", list, e.keyA, "", "Origin", "https://evil.example"), 403, apiv1.CodeCSRFFailed},
		{"GET from a null origin", cookieReq("GET", list, e.keyA, "", "Origin", "null"), 403, apiv1.CodeCSRFFailed},
		{"mutation without CSRF", cookieReq("POST", "/v1/sandboxes/"+sbA.String()+"/pause", e.keyA, ""), 403, apiv1.CodeCSRFFailed},
		{"mutation with a wrong CSRF", cookieReq("POST", "/v1/sandboxes/"+sbA.String()+"/pause", e.keyA, "", CSRFHeader, csrfA+"x"), 403, apiv1.CodeCSRFFailed},
		{"mutation with another key's CSRF", cookieReq("POST", "/v1/sandboxes/"+sbA.String()+"/pause", e.keyA, "", CSRFHeader, CSRFToken(e.keyB)), 403, apiv1.CodeCSRFFailed},
		{"DELETE without CSRF", cookieReq("DELETE", "/v1/sandboxes/"+sbA.String(), e.keyA, ""), 403, apiv1.CodeCSRFFailed},
		{"mutation with CSRF from another origin", cookieReq("POST", "/v1/sandboxes/"+sbA.String()+"/pause", e.keyA, "", CSRFHeader, csrfA, "Origin", "http://evil.example"), 403, apiv1.CodeCSRFFailed},
		{"the cookie on the port proxy", func() req {
			r := cookieReq("GET", portPath(sbA, 8080, "x"), e.keyA, "")
			r.invalid = true // the document does not offer the cookie there
			return r
		}(), 401, apiv1.CodeUnauthenticated},
		{"the cookie on the port proxy with CSRF", func() req {
			r := cookieReq("POST", portPath(sbA, 8080, "x"), e.keyA, "{}", CSRFHeader, csrfA)
			r.invalid = true
			return r
		}(), 401, apiv1.CodeUnauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.r.t = t
			res := e.send(tc.r)
			if tc.code == "" {
				res.want(t, tc.status)
				return
			}
			res.wantError(t, tc.status, tc.code)
		})
	}
	var sb apiv1.Sandbox
	e.do("GET", "/v1/sandboxes/"+sbA.String(), e.keyA, "").want(t, http.StatusOK).decode(t, &sb)
	if sb.State != string(model.StateRunning) {
		t.Fatalf("a refused mutation changed the sandbox: %+v", sb)
	}

	// With the CSRF header (and the own origin) a mutation passes.
	e.send(cookieReq("POST", "/v1/sandboxes/"+sbA.String()+"/pause", e.keyA, "", CSRFHeader, csrfA, "Origin", e.srv.URL)).want(t, http.StatusAccepted)

	// The cookie is of its project: another project's sandbox does not exist.
	e.send(cookieReq("GET", "/v1/sandboxes/"+sbA.String(), e.keyB, "")).wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
	// A member's cookie is no admin.
	e.send(cookieReq("GET", "/v1/admin/keys", e.keyA, "")).wantError(t, http.StatusForbidden, apiv1.CodePermissionDenied)

	// An explicit Authorization wins: the cookie is ignored then (B's key
	// does not see A's sandbox whatever the cookie holds; a wrong bearer
	// is not rescued by a good cookie).
	r := cookieReq("GET", "/v1/sandboxes/"+sbA.String(), e.keyA, "")
	r.key = e.keyB
	e.send(r).wantError(t, http.StatusNotFound, apiv1.CodeNotFound)
	r.key = "alk_bogus"
	e.send(r).wantError(t, http.StatusUnauthorized, apiv1.CodeUnauthenticated)
	// … and a bearer mutation needs no CSRF header, even with a cookie.
	r = cookieReq("POST", "/v1/sandboxes/"+sb2.String()+"/pause", e.keyB, "")
	r.key = e.keyA
	e.send(r).want(t, http.StatusAccepted)
}

// TestCookieAuthenticationOrigins: which Origin values a cookie request
// may carry.
func TestCookieAuthenticationOrigins(t *testing.T) {
	t.Parallel()
	a := &API{cfg: Config{PublicURL: "https://airlock.example:8443"}}
	r, _ := http.NewRequest("GET", "http://10.0.0.1:8080/v1/sandboxes", nil)
	for origin, want := range map[string]bool{
		"http://10.0.0.1:8080":         true,
		"https://10.0.0.1:8080":        true, // a TLS proxy in front
		"http://10.0.0.1:8081":         false,
		"http://10.0.0.1":              false,
		"https://airlock.example:8443": true,
		"http://airlock.example:8443":  false,
		"https://airlock.example":      false,
		"https://evil.example":         false,
		"null":                         false,
		"http://10.0.0.1:8080/path":    false,
		"http://u@10.0.0.1:8080":       false,
		"ftp://10.0.0.1:8080":          false,
	} {
		if got := a.sameOrigin(r, origin); got != want {
			t.Errorf("sameOrigin(%q) = %v, want %v", origin, got, want)
		}
	}
}

// TestAuthenticateKey: the exported check is the API's.
func TestAuthenticateKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s, err := e.api.AuthenticateKey(t.Context(), e.keyA)
	if err != nil || s.Project != e.projA || s.Role != model.RoleMember || s.KeyID == "" {
		t.Fatalf("AuthenticateKey(keyA) = %+v, %v", s, err)
	}
	for i, bad := range []string{"", "alk_x", e.keyA + "x", "als_whatever", "Bearer " + e.keyA} {
		if _, err := e.api.AuthenticateKey(t.Context(), bad); err == nil {
			t.Errorf("bad key %d accepted", i)
		} else if ae, ok := classify(err); !ok || ae.status != http.StatusUnauthorized {
			t.Errorf("bad key %d: %v, want a 401", i, err)
		}
	}
}

// TestDropSessionCookie: the console's cookie never reaches a guest;
// the caller's other cookies do.
func TestDropSessionCookie(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{nil, ""},
		{[]string{"a=b"}, "a=b"},
		{[]string{SessionCookie + "=alk_x"}, ""},
		{[]string{"a=b; " + SessionCookie + "=alk_x; c=d"}, "a=b; c=d"},
		{[]string{SessionCookie + "=alk_x", "e=f"}, "e=f"},
		{[]string{" " + SessionCookie + "=alk_x ;a=b"}, "a=b"},
		{[]string{SessionCookie + "x=keep"}, SessionCookie + "x=keep"},
		{[]string{"a=b; " + SecureSessionCookie + "=alk_x"}, "a=b"}, // the https spelling too
	} {
		h := http.Header{}
		for _, v := range tc.in {
			h.Add("Cookie", v)
		}
		dropSessionCookie(h)
		if got := strings.Join(h.Values("Cookie"), "|"); got != tc.want {
			t.Errorf("%q → %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestSessionCookieConflict: a request carrying more than one session
// cookie (one planted by a guest on a sibling host, with a Domain or a
// longer Path) is refused, whichever order they come in, never served
// under either key.
func TestSessionCookieConflict(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := func(m string) string {
		if m == "POST" {
			return "{}"
		}
		return ""
	}
	for _, cookies := range []string{
		SessionCookie + "=" + e.keyB + "; " + SessionCookie + "=" + e.keyA,
		SessionCookie + "=" + e.keyA + "; " + SessionCookie + "=" + e.keyB,
		SessionCookie + "=" + e.keyA + "; " + SessionCookie + "=" + e.keyA,
		SessionCookie + "=" + e.keyA + "; other=1; " + SessionCookie + "=",
	} {
		for _, m := range []string{"GET", "POST"} {
			h := http.Header{"Cookie": {cookies}, CSRFHeader: {CSRFToken(e.keyA)}}
			var er apiv1.Error
			e.send(req{method: m, path: "/v1/sandboxes", header: h, body: body(m), t: t}).want(t, http.StatusUnauthorized).decode(t, &er)
			if er.Code != apiv1.CodeUnauthenticated || !strings.Contains(er.Message, "conflicting airlock_session cookies") {
				t.Errorf("%s %q → %+v", m, cookies, er)
			}
		}
	}
	// One cookie still works, other cookies beside it or not.
	h := http.Header{"Cookie": {"x=1; " + SessionCookie + "=" + e.keyA + "; y=2"}}
	e.send(req{method: "GET", path: "/v1/sandboxes", header: h, t: t}).want(t, http.StatusOK)
	// Over http the __Host- spelling is not the session (it is only
	// set over https), and does not conflict.
	h = http.Header{"Cookie": {SecureSessionCookie + "=" + e.keyB + "; " + SessionCookie + "=" + e.keyA}}
	e.send(req{method: "GET", path: "/v1/sandboxes", header: h, t: t}).want(t, http.StatusOK)
}

// TestSessionCookieNameSecure: with an https public URL (a TLS proxy in
// front), the API reads the session from __Host-airlock_session only: a
// plain airlock_session (which any sibling host can plant) is not a
// session, and two __Host- cookies conflict.
func TestSessionCookieNameSecure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *envConfig) { c.PublicURL = "https://airlock.example" })
	h := http.Header{"Cookie": {SessionCookie + "=" + e.keyA}}
	e.send(req{method: "GET", path: "/v1/sandboxes", header: h, t: t}).want(t, http.StatusUnauthorized)
	h = http.Header{"Cookie": {SessionCookie + "=" + e.keyB + "; " + SecureSessionCookie + "=" + e.keyA}}
	e.send(req{method: "GET", path: "/v1/sandboxes", header: h, t: t}).want(t, http.StatusOK)
	h = http.Header{"Cookie": {SecureSessionCookie + "=" + e.keyB + "; " + SecureSessionCookie + "=" + e.keyA}}
	var er apiv1.Error
	e.send(req{method: "GET", path: "/v1/sandboxes", header: h, t: t}).want(t, http.StatusUnauthorized).decode(t, &er)
	if !strings.Contains(er.Message, "conflicting __Host-airlock_session cookies") {
		t.Errorf("→ %+v", er)
	}
}
