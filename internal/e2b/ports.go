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
	route Route
	token string
}

// Headers of E2B's own that must not reach a server in the sandbox.
var e2bHeaders = []string{"X-Access-Token", "X-API-Key", "E2b-Sandbox-Id", "E2b-Sandbox-Port", "E2B-Traffic-Access-Token"}

// rewritePort sends a guest-port request to Airlock's ports route
// (/v1/sandboxes/{id}/ports/{port}/…), which runs on the node hosting the
// sandbox and proxies into it.
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
	out.Host = g.self.Host
	for _, h := range e2bHeaders {
		out.Header.Del(h)
	}
	out.Header.Set("Authorization", "Bearer "+pt.token)
	pr.SetXForwarded()
	out.Header.Set("X-Forwarded-Host", pr.In.Host)
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

// dropSessionSetCookies removes every Set-Cookie naming the console's
// session cookie (either spelling) from h.
func dropSessionSetCookies(h http.Header) {
	lines := h.Values("Set-Cookie")
	var keep []string
	for _, line := range lines {
		name, _, _ := strings.Cut(line, "=")
		if n, _, _ := strings.Cut(name, ";"); !apiv1.IsSessionCookie(n) {
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
