package e2b

import (
	"net/http"
	"net/http/httputil"
	"strings"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

type portKey struct{}

// portTarget is what the port proxy needs from the request's routing.
type portTarget struct {
	route   Route
	project model.ProjectID
	// host is the Host the guest's server sees (E2B's
	// maskRequestHost), "" for the guest's own address.
	host string
}

// Headers of E2B's own, and credentials, that must not reach a server in
// the sandbox (nor count as a credential of Airlock's API).
var e2bHeaders = []string{"X-Access-Token", "X-API-Key", "E2b-Sandbox-Id", "E2b-Sandbox-Port", "E2B-Traffic-Access-Token", "Authorization"}

// portTransport carries a guest-port request to Airlock's ports route
// in-process, acting for the request's sandbox (the gateway authorized
// it: its token, or the sandbox's public ports).
type portTransport struct{ g *Gateway }

func (t portTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	pt := req.Context().Value(portKey{}).(portTarget)
	return t.g.cfg.API.AsSandbox(pt.project, pt.route.Sandbox).RoundTrip(req)
}

// rewritePort sends a guest-port request to Airlock's ports route
// (/v1/sandboxes/{id}/ports/{port}/…), which runs on the node hosting the
// sandbox and proxies into it. The guest sees the caller's Host in
// X-Forwarded-Host, its address in X-Forwarded-For and its scheme in
// X-Forwarded-Proto (the caller's own X-Forwarded-* are dropped); the
// ports route keeps them, the request being the server's own.
func (g *Gateway) rewritePort(pr *httputil.ProxyRequest) {
	pt := pr.In.Context().Value(portKey{}).(portTarget)
	out := pr.Out
	out.URL.Scheme = g.self.Scheme
	out.URL.Host = g.self.Host
	out.URL.Path = portPath(pt.route.Sandbox, pt.route.Port) + ensureSlash(pr.In.URL.Path)
	out.URL.RawPath = ""
	if pr.In.URL.RawPath != "" {
		out.URL.RawPath = portPath(pt.route.Sandbox, pt.route.Port) + ensureSlash(pr.In.URL.RawPath)
	}
	out.URL.RawQuery = pr.In.URL.RawQuery
	// The caller's Host stays: a node this request is forwarded to names
	// it to the guest as the ports route here does.
	out.Host = pr.In.Host
	for _, h := range e2bHeaders {
		out.Header.Del(h)
	}
	out.Header.Del(apiv1.HeaderGuestHost) // only the gateway's own, below
	if pt.host != "" {
		out.Header.Set(apiv1.HeaderGuestHost, pt.host)
	}
	pr.SetXForwarded()
}

// portResponse notices the code interpreter going away (a 502 from the
// ports route), so the next request starts it again, and drops any
// Set-Cookie of the console's session cookie: a guest on
// <port>-<id>.<domain> is same-site with a console on <domain> and must
// not plant a session there (the ports route behind drops these and
// Domain cookies too; this holds whichever node answered).
func (g *Gateway) portResponse(resp *http.Response) error {
	dropSessionSetCookies(resp.Header)
	pt, ok := resp.Request.Context().Value(portKey{}).(portTarget)
	if ok && pt.route.Port == CodeInterpreterPort && resp.StatusCode == http.StatusBadGateway {
		g.interp.forget(pt.route.Sandbox)
	}
	return nil
}

func portPath(sb model.SandboxID, p Port) string {
	return "/v1/sandboxes/" + sb.String() + "/ports/" + p.String()
}

func ensureSlash(p string) string {
	if !strings.HasPrefix(p, "/") {
		return "/" + p
	}
	return p
}

// dropSessionSetCookies removes from h every Set-Cookie that a browser
// would send back as the console's session cookie (either spelling; a
// nameless "=airlock_session=…" too, apiv1.SetsSessionCookie).
func dropSessionSetCookies(h http.Header) {
	lines := h.Values("Set-Cookie")
	var keep []string
	for _, line := range lines {
		if !apiv1.SetsSessionCookie(line) {
			keep = append(keep, line)
		}
	}
	if len(keep) == len(lines) {
		return
	}
	h.Del("Set-Cookie")
	for _, line := range keep {
		h.Add("Set-Cookie", line)
	}
}
