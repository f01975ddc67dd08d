package console

import (
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/api"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store/sqlite"
)

// env is a server with the API at / and the console at /ui/, as
// internal/server mounts them.
type env struct {
	srv         *httptest.Server
	admin       string
	member      string
	revoked     string
	memberPrj   string
	memberKeyID string
}

func newEnv(t *testing.T, tls bool, publicURL string) *env {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := sqlite.Open(ctx, filepath.Join(dir, "airlock.db"), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ring, err := auth.OpenKeyring(filepath.Join(dir, "keys"), auth.KeyringOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := api.New(api.Config{Store: st, Logger: log, Attach: ring.Issuer(), MutationRate: -1, PublicURL: publicURL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.EnsureAdminKey(ctx, st, filepath.Join(dir, "admin.key"), log); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Sessions: a})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", a.Handler())
	mux.Handle(Prefix, a.Wrap(c.Handler()))
	e := &env{admin: strings.TrimSpace(string(b))}
	if tls {
		e.srv = httptest.NewTLSServer(mux)
	} else {
		e.srv = httptest.NewServer(mux)
	}
	t.Cleanup(e.srv.Close)

	var p apiv1.Project
	e.call(t, "POST", "/v1/admin/projects", e.admin, `{"name": "tenant"}`, http.StatusCreated, &p)
	var k apiv1.APIKey
	e.call(t, "POST", "/v1/admin/keys", e.admin, `{"project_id": "`+p.ID+`", "role": "member", "name": "m"}`, http.StatusCreated, &k)
	e.member, e.memberPrj, e.memberKeyID = k.Token, p.ID, k.ID
	e.call(t, "POST", "/v1/admin/keys", e.admin, `{"project_id": "`+p.ID+`", "role": "member", "name": "gone"}`, http.StatusCreated, &k)
	e.revoked = k.Token
	e.call(t, "DELETE", "/v1/admin/keys/"+k.ID, e.admin, "", http.StatusOK, nil)
	return e
}

// call is an API call with a bearer key.
func (e *env) call(t *testing.T, method, path, key, body string, want int, out any) {
	t.Helper()
	res := e.send(t, method, path, body, map[string]string{"Authorization": "Bearer " + key, "Content-Type": "application/json"})
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != want {
		t.Fatalf("%s %s → %d %s, want %d", method, path, res.StatusCode, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatal(err)
		}
	}
}

func (e *env) send(t *testing.T, method, path, body string, hdr map[string]string) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	res, err := e.srv.Client().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func readErr(t *testing.T, res *http.Response) apiv1.Error {
	t.Helper()
	defer res.Body.Close()
	var out apiv1.Error
	b, _ := io.ReadAll(res.Body)
	if err := json.Unmarshal(b, &out); err != nil || out.Code == "" || out.Message == "" {
		t.Fatalf("not a JSON error: %d %s", res.StatusCode, b)
	}
	return out
}

func sessionCookie(res *http.Response) *http.Cookie {
	for _, c := range res.Cookies() {
		if c.Name == api.SessionCookie || c.Name == api.SecureSessionCookie {
			return c
		}
	}
	return nil
}

func wantSecurityHeaders(t *testing.T, what string, h http.Header) {
	t.Helper()
	for k, v := range map[string]string{
		"Content-Security-Policy": "default-src 'self'; img-src 'self' data: blob:; style-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "no-referrer",
		"X-Frame-Options":         "DENY",
	} {
		if got := h.Get(k); got != v {
			t.Errorf("%s: %s %q, want %q", what, k, got, v)
		}
	}
}

func TestStaticAssets(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "")
	res := e.send(t, "GET", "/ui/", "", nil)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") || !strings.Contains(string(body), "/ui/assets/app.js") {
		t.Fatalf("GET /ui/ → %d %q %.200s", res.StatusCode, res.Header.Get("Content-Type"), body)
	}
	wantSecurityHeaders(t, "/ui/", res.Header)

	res = e.send(t, "GET", "/ui/assets/app.js", "", nil)
	res.Body.Close()
	etag := res.Header.Get("ETag")
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/javascript; charset=utf-8" || etag == "" || res.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("app.js → %d %v", res.StatusCode, res.Header)
	}
	wantSecurityHeaders(t, "app.js", res.Header)
	res = e.send(t, "GET", "/ui/assets/app.js", "", map[string]string{"If-None-Match": etag})
	res.Body.Close()
	if res.StatusCode != http.StatusNotModified {
		t.Errorf("revalidation → %d, want 304", res.StatusCode)
	}
	res = e.send(t, "GET", "/ui/assets/style.css", "", nil)
	res.Body.Close()
	if res.Header.Get("Content-Type") != "text/css; charset=utf-8" {
		t.Errorf("style.css Content-Type %q", res.Header.Get("Content-Type"))
	}
	for _, p := range []string{"/ui/assets/nope.js", "/ui/whatever", "/ui/assets/%2e%2e/console.go"} {
		res := e.send(t, "GET", p, "", nil)
		if res.StatusCode != http.StatusNotFound && res.StatusCode != http.StatusMovedPermanently {
			t.Errorf("%s → %d", p, res.StatusCode)
		}
		if res.StatusCode == http.StatusNotFound {
			wantSecurityHeaders(t, p, res.Header)
			if got := readErr(t, res); got.Code != apiv1.CodeNotFound {
				t.Errorf("%s → code %q, want %s", p, got.Code, apiv1.CodeNotFound)
			}
		}
		res.Body.Close()
	}
	res = e.send(t, "POST", "/ui/assets/app.js", "x", nil)
	if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST an asset → %d (Allow %q)", res.StatusCode, res.Header.Get("Allow"))
	}
	if got := readErr(t, res); got.Code != apiv1.CodeMethodNotAllowed {
		t.Errorf("POST an asset → code %q", got.Code)
	}
}

// TestAssetsHaveNoInlineCode: the CSP forbids inline scripts and styles,
// and pages never build DOM from strings.
func TestAssetsHaveNoInlineCode(t *testing.T) {
	t.Parallel()
	sub, err := fs.Sub(embedded, "assets")
	if err != nil {
		t.Fatal(err)
	}
	inlineScript := regexp.MustCompile(`(?is)<script(?:\s[^>]*)?>\s*[^<\s]`)
	err = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(p, "vendor/") {
			return err
		}
		b, err := fs.ReadFile(sub, p)
		if err != nil {
			return err
		}
		s := string(b)
		switch filepath.Ext(p) {
		case ".html":
			if inlineScript.MatchString(s) || strings.Contains(s, "<style") || regexp.MustCompile(`\sstyle=`).MatchString(s) || regexp.MustCompile(`\son[a-z]+=`).MatchString(s) {
				t.Errorf("%s has an inline script, style or handler", p)
			}
		case ".js":
			for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"} {
				if strings.Contains(s, bad) {
					t.Errorf("%s uses %s", p, bad)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "")
	jsonCT := map[string]string{"Content-Type": "application/json"}

	// Refused sign-ins set no cookie.
	for _, tc := range []struct {
		name, body string
		hdr        map[string]string
		status     int
		code       string
	}{
		{"unknown key", `{"key": "` + e.member[:len(e.member)-3] + `xyz"}`, jsonCT, 401, apiv1.CodeUnauthenticated},
		{"malformed key", `{"key": "hello"}`, jsonCT, 401, apiv1.CodeUnauthenticated},
		{"revoked key", `{"key": "` + e.revoked + `"}`, jsonCT, 401, apiv1.CodeUnauthenticated},
		{"no key", `{}`, jsonCT, 400, apiv1.CodeInvalidRequest},
		{"not JSON", `key=x`, jsonCT, 400, apiv1.CodeInvalidRequest},
		{"unknown field", `{"key": "` + e.member + `", "x": 1}`, jsonCT, 400, apiv1.CodeInvalidRequest},
		{"a form (cross-site able)", `key=` + e.member, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415, apiv1.CodeUnsupportedMedia},
		{"another origin", `{"key": "` + e.member + `"}`, map[string]string{"Content-Type": "application/json", "Origin": "https://evil.example"}, 403, apiv1.CodeCSRFFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := e.send(t, "POST", "/ui/session", tc.body, tc.hdr)
			if sessionCookie(res) != nil {
				t.Error("a refused sign-in set the cookie")
			}
			if res.StatusCode != tc.status {
				t.Errorf("status %d, want %d", res.StatusCode, tc.status)
			}
			if got := readErr(t, res); got.Code != tc.code {
				t.Errorf("code %q, want %q", got.Code, tc.code)
			}
		})
	}

	// Sign in.
	res := e.send(t, "POST", "/ui/session", `{"key": "`+e.member+`"}`, map[string]string{"Content-Type": "application/json", "Origin": e.srv.URL})
	var s sessionOut
	if err := json.NewDecoder(res.Body).Decode(&s); err != nil || res.StatusCode != 200 {
		t.Fatalf("sign-in → %d %v", res.StatusCode, err)
	}
	res.Body.Close()
	wantSecurityHeaders(t, "POST /ui/session", res.Header)
	if s.KeyID != e.memberKeyID || s.Project != e.memberPrj || s.Role != string(model.RoleMember) || s.CSRF != api.CSRFToken(e.member) {
		t.Fatalf("session %+v", s)
	}
	c := sessionCookie(res)
	if c == nil || c.Value != e.member || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Secure {
		t.Fatalf("cookie %+v: want the key, HttpOnly, SameSite=Strict, Path=/, not Secure over http", c)
	}
	cookie := api.SessionCookie + "=" + e.member

	// GET: the same JSON from the cookie; none or a bad one is 401.
	res = e.send(t, "GET", "/ui/session", "", map[string]string{"Cookie": cookie})
	var again sessionOut
	if err := json.NewDecoder(res.Body).Decode(&again); err != nil || res.StatusCode != 200 || again != s {
		t.Fatalf("GET /ui/session → %d %+v", res.StatusCode, again)
	}
	res.Body.Close()
	for _, ck := range []string{"", api.SessionCookie + "=junk", api.SessionCookie + "=" + e.revoked} {
		res := e.send(t, "GET", "/ui/session", "", map[string]string{"Cookie": ck})
		if res.StatusCode != 401 || readErr(t, res).Code != apiv1.CodeUnauthenticated {
			t.Errorf("GET /ui/session with %q → %d", ck, res.StatusCode)
		}
	}

	// The cookie works on the API: reads, and changes with the CSRF header.
	res = e.send(t, "GET", "/v1/sandboxes", "", map[string]string{"Cookie": cookie})
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("GET /v1/sandboxes with the cookie → %d", res.StatusCode)
	}
	res = e.send(t, "PUT", "/v1/secrets/tok", `{"value": "v", "hosts": ["example.com"]}`, map[string]string{"Cookie": cookie, "Content-Type": "application/json"})
	if res.StatusCode != 403 || readErr(t, res).Code != apiv1.CodeCSRFFailed {
		t.Fatalf("a change without CSRF → %d", res.StatusCode)
	}

	// Sign out: needs the CSRF header, clears the cookie.
	res = e.send(t, "DELETE", "/ui/session", "", map[string]string{"Cookie": cookie})
	if res.StatusCode != 403 || readErr(t, res).Code != apiv1.CodeCSRFFailed || sessionCookie(res) != nil {
		t.Fatalf("DELETE without CSRF → %d", res.StatusCode)
	}
	res = e.send(t, "DELETE", "/ui/session", "", map[string]string{"Cookie": cookie, api.CSRFHeader: api.CSRFToken(e.revoked)})
	if res.StatusCode != 403 {
		t.Fatalf("DELETE with another key's CSRF → %d", res.StatusCode)
	}
	res.Body.Close()
	res = e.send(t, "DELETE", "/ui/session", "", map[string]string{"Cookie": cookie, api.CSRFHeader: s.CSRF})
	res.Body.Close()
	c = sessionCookie(res)
	if res.StatusCode != http.StatusNoContent || c == nil || c.Value != "" || c.MaxAge >= 0 || !c.HttpOnly || c.Path != "/" {
		t.Fatalf("DELETE → %d cookie %+v: want 204 and the cookie cleared", res.StatusCode, c)
	}
	if !strings.Contains(res.Header.Get("Set-Cookie"), "Max-Age=0") {
		t.Errorf("Set-Cookie %q lacks Max-Age=0", res.Header.Get("Set-Cookie"))
	}
	res = e.send(t, "PATCH", "/ui/session", "", nil)
	if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") != "GET, HEAD, POST, DELETE" {
		t.Errorf("PATCH → %d (Allow %q)", res.StatusCode, res.Header.Get("Allow"))
	}
	if got := readErr(t, res); got.Code != apiv1.CodeMethodNotAllowed {
		t.Errorf("PATCH → code %q", got.Code)
	}
}

func TestSessionCookieSecure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		tls       bool
		publicURL string
	}{
		{"served over https", true, ""},
		{"public URL https", false, "https://airlock.example"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.tls, tc.publicURL)
			res := e.send(t, "POST", "/ui/session", `{"key": "`+e.member+`"}`, map[string]string{"Content-Type": "application/json"})
			res.Body.Close()
			c := sessionCookie(res)
			if res.StatusCode != 200 || c == nil || !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
				t.Fatalf("→ %d cookie %+v, want Secure", res.StatusCode, c)
			}
			// __Host-: browsers take it only Secure, host-only, Path=/.
			if c.Name != api.SecureSessionCookie || c.Domain != "" || c.Path != "/" {
				t.Fatalf("cookie %+v: want __Host-airlock_session, no Domain, Path=/", c)
			}
			if got := res.Header.Get("Strict-Transport-Security"); got != "max-age=31536000" {
				t.Errorf("Strict-Transport-Security %q", got)
			}
			// The API and GET /ui/session read it by that name.
			hdr := map[string]string{"Cookie": c.Name + "=" + c.Value}
			res = e.send(t, "GET", "/ui/session", "", hdr)
			res.Body.Close()
			if res.StatusCode != 200 {
				t.Fatalf("GET /ui/session with the cookie → %d", res.StatusCode)
			}
			res = e.send(t, "GET", "/v1/sandboxes", "", hdr)
			res.Body.Close()
			if res.StatusCode != 200 {
				t.Fatalf("GET /v1/sandboxes with the cookie → %d", res.StatusCode)
			}
			// Signing out clears the cookie of that name.
			hdr[api.CSRFHeader] = api.CSRFToken(c.Value)
			res = e.send(t, "DELETE", "/ui/session", "", hdr)
			res.Body.Close()
			if c := sessionCookie(res); res.StatusCode != 204 || c == nil || c.Name != api.SecureSessionCookie || c.MaxAge >= 0 || !c.Secure {
				t.Fatalf("DELETE → %d cookie %+v", res.StatusCode, c)
			}
			// Behind a TLS proxy, the proxy's public origin is the
			// console's own (the Host it forwards may differ).
			if tc.publicURL != "" {
				res = e.send(t, "POST", "/ui/session", `{"key": "`+e.member+`"}`, map[string]string{"Content-Type": "application/json", "Origin": tc.publicURL})
				res.Body.Close()
				if res.StatusCode != 200 {
					t.Fatalf("sign-in from the public origin → %d", res.StatusCode)
				}
			}
		})
	}
}

// TestSessionPlainHTTP: over plain http the cookie is airlock_session,
// not Secure, and no HSTS is sent.
func TestSessionPlainHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "")
	res := e.send(t, "POST", "/ui/session", `{"key": "`+e.member+`"}`, map[string]string{"Content-Type": "application/json"})
	res.Body.Close()
	if c := sessionCookie(res); res.StatusCode != 200 || c == nil || c.Name != api.SessionCookie || c.Secure {
		t.Fatalf("→ %d cookie %+v", res.StatusCode, c)
	}
	if h := res.Header.Get("Strict-Transport-Security"); h != "" {
		t.Errorf("HSTS over plain http: %q", h)
	}
}

// TestSessionConflictingCookies: a guest on a sibling host planted its
// own key as airlock_session (Domain=<parent>, a longer Path); the
// browser sends both. GET /ui/session refuses rather than pick one, and
// signing out is refused the same way (it could clear only one).
func TestSessionConflictingCookies(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "")
	for _, order := range []string{
		api.SessionCookie + "=" + e.admin + "; " + api.SessionCookie + "=" + e.member,
		api.SessionCookie + "=" + e.member + "; " + api.SessionCookie + "=" + e.admin,
	} {
		for _, m := range []string{"GET", "DELETE"} {
			res := e.send(t, m, "/ui/session", "", map[string]string{"Cookie": order, api.CSRFHeader: api.CSRFToken(e.member)})
			if res.StatusCode != http.StatusUnauthorized {
				t.Fatalf("%s %q → %d, want 401", m, order, res.StatusCode)
			}
			if er := readErr(t, res); er.Code != apiv1.CodeUnauthenticated || !strings.Contains(er.Message, "conflicting airlock_session cookies: clear this site's cookies") {
				t.Errorf("%s → %+v", m, er)
			}
		}
	}
}
