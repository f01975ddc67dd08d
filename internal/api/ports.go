package api

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// The port proxy.
//
// /v1/sandboxes/{id}/ports/{port}/{path...} carries plain HTTP (any of the
// methods below, WebSocket and other upgrades included) to a TCP port of a
// running sandbox: the request is sent to http://<guest address>:<port>/<path>?<query>,
// where the guest address is the sandbox's own, on its veth, from the egress
// registry of the node that hosts it (the route is hosted: another node
// forwards it there). Nothing else can be dialled: the address comes from
// the registry by the sandbox ID of the caller's project, the transport
// dials that address and port whatever the request says, and takes no proxy
// from the environment. The guest gets the request without the caller's
// Authorization and without any Airlock-* header; its Host is the guest
// address, the caller's Host is in X-Forwarded-Host (with X-Forwarded-For
// and -Proto). The guest's answer comes back as it is, streamed.
//
// The nftables rules (internal/egress/nftrules) let the host open these
// connections: nothing filters the host's output, and the guest's replies
// are conntrack-established, which the input chain accepts from a sandbox's
// interface; a connection the guest opens is still redirected to the egress
// proxy or dropped.

// portsPattern is the route of the port proxy.
const portsPattern = "/v1/sandboxes/{id}/ports/{port}/{path...}"

// PortDialTimeout bounds connecting to a sandbox's port.
const PortDialTimeout = 5 * time.Second

// portRoutes are the port proxy's routes, one per method it carries.
func (a *API) portRoutes() []route {
	methods := []string{
		http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
		http.MethodPatch, http.MethodDelete, http.MethodOptions,
	}
	out := make([]route, 0, len(methods))
	for _, m := range methods {
		out = append(out, route{m, portsPattern, member | sandboxToken | guestTraffic, a.hosted(a.proxyPort)})
	}
	return out
}

// activityHolder is the part of the activity tracker that keeps a sandbox
// active for as long as a stream is open.
type activityHolder interface {
	Hold(id model.SandboxID) (release func())
}

// hold records activity of a sandbox for as long as a proxied request
// lasts (a WebSocket, a long poll, a streamed download).
func (a *API) hold(id model.SandboxID) (release func()) {
	if h, ok := a.cfg.Activity.(activityHolder); ok {
		return h.Hold(id)
	}
	a.touch(id)
	return func() { a.touch(id) }
}

// guestTarget finds where a port request goes: the caller's running
// sandbox {id} and its guest address on this node.
func (a *API) guestTarget(ctx context.Context, r *http.Request, p principal) (model.Sandbox, netip.AddrPort, error) {
	port, err := model.ParseGuestPort(r.PathValue("port"))
	if err != nil {
		return model.Sandbox{}, netip.AddrPort{}, err
	}
	sb, err := a.sandboxOf(ctx, r, p)
	if err != nil {
		return sb, netip.AddrPort{}, err
	}
	if sb.State != model.StateRunning {
		return sb, netip.AddrPort{}, notRunning(sb)
	}
	if a.cfg.Egress == nil {
		return sb, netip.AddrPort{}, errorf(apiv1.CodeNotSupported,
			"this server does not host sandbox networks, so it cannot reach their ports")
	}
	guest, ok := a.cfg.Egress.GuestAddr(sb.ID)
	if !ok || !guest.IsValid() {
		return sb, netip.AddrPort{}, errorf(apiv1.CodeSandboxNoNetwork,
			"sandbox %s has no network on this node, so its port %d cannot be reached", sb.ID, port)
	}
	return sb, netip.AddrPortFrom(guest, uint16(port)), nil
}

// proxyPort: /v1/sandboxes/{id}/ports/{port}/{path...} → the guest's answer,
// or an error of Airlock's (JSON) when the request could not reach it.
func (a *API) proxyPort(w http.ResponseWriter, r *http.Request, p principal) {
	sb, target, err := a.guestTarget(r.Context(), r, p)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	release := a.hold(sb.ID)
	defer release()
	path, rawPath := guestPath(r)
	// A trusted peer's, or the E2B gateway's (in-process) X-Forwarded-*.
	trusted := peerFrom(r.Context()) != nil || vouched(r.Context())
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = &url.URL{Scheme: "http", Host: target.String(), Path: path, RawPath: rawPath, RawQuery: pr.In.URL.RawQuery}
			pr.Out.Host = "" // the guest's own address
			if h := pr.In.Header.Get(apiv1.HeaderGuestHost); trusted && validGuestHost(h) {
				pr.Out.Host = h // E2B's maskRequestHost, set by the gateway
			}
			scrubGuestRequest(pr, trusted)
		},
		Transport:     guestTransport(target),
		FlushInterval: -1, // streams (SSE, chunked answers) reach the caller at once
		ErrorLog:      slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
		ModifyResponse: func(res *http.Response) error {
			res.Header.Del("X-Request-Id") // the API's own stands
			apiv1.GuestContentHeaders(res.Header)
			dropGuestSetCookies(res.Header)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the caller went away
			}
			a.log.InfoContext(r.Context(), "port proxy: the guest did not answer", "sandbox", sb.ID,
				"port", target.Port(), "request_id", requestIDFrom(r.Context()), "err", err)
			a.writeError(w, r, errorf(apiv1.CodePortUnreachable,
				"port %d of sandbox %s did not answer: %s", target.Port(), sb.ID, dialReason(err)))
		},
	}
	proxy.ServeHTTP(w, r)
}

// validGuestHost reports whether h may be sent as a Host header: 1-256
// bytes of printable ASCII without spaces, '/', '@' or '\\'.
func validGuestHost(h string) bool {
	if h == "" || len(h) > 256 {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; c <= ' ' || c >= 0x7f || c == '/' || c == '@' || c == '\\' {
			return false
		}
	}
	return true
}

// guestPath is the path of the guest's request: what follows
// /v1/sandboxes/{id}/ports/{port} (at least "/"), decoded and as the
// caller escaped it.
func guestPath(r *http.Request) (path, rawPath string) {
	path = "/" + r.PathValue("path")
	// The escaped form: the same segments of the escaped request path
	// (the mux matched the cleaned path, which has the same segments).
	parts := strings.SplitN(r.URL.EscapedPath(), "/", 7)
	if len(parts) < 7 {
		return path, ""
	}
	raw := "/" + parts[6]
	if dec, err := url.PathUnescape(raw); err != nil || dec != path {
		return path, ""
	}
	return path, raw
}

// scrubGuestRequest removes the caller's credentials and Airlock's own
// headers from a request bound for a guest and sets X-Forwarded-*. A
// request a trusted peer forwarded, or the server's own E2B gateway sent
// in-process, keeps the X-Forwarded-* headers that peer or gateway set
// (naming the original caller); anyone else's are replaced.
func scrubGuestRequest(pr *httputil.ProxyRequest, trusted bool) {
	h := pr.Out.Header
	h.Del("Authorization")
	dropSessionCookie(h)
	for k := range h {
		if strings.HasPrefix(k, "Airlock-") {
			delete(h, k)
		}
	}
	if trusted && pr.In.Header.Get("X-Forwarded-Host") != "" {
		for _, k := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
			if v := pr.In.Header.Values(k); len(v) > 0 {
				h[k] = v
			}
		}
		return
	}
	pr.SetXForwarded()
}

// guestTransport carries one request to target and nothing else: it dials
// target whatever address the request names, with no proxy from the
// environment, and keeps no connection once the request is done (no idle
// connection outlives the request, none can be reused for another
// sandbox that is given the same address later).
func guestTransport(target netip.AddrPort) *http.Transport {
	d := &net.Dialer{Timeout: PortDialTimeout, KeepAlive: 30 * time.Second}
	addr := target.String()
	return &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", addr)
		},
		DisableKeepAlives:      true,
		DisableCompression:     true, // the guest's encoding passes as it is
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 1 << 20,
	}
}

// dialReason says briefly why a guest did not answer.
func dialReason(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused (is a server listening on it, on all addresses, not only 127.0.0.1?)"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "the sandbox's network cannot be reached"
	case errors.As(err, &ne) && ne.Timeout():
		return "connecting timed out"
	case errors.Is(err, syscall.ECONNRESET):
		return "the connection was reset"
	}
	return "the connection failed or closed before an answer"
}

// dropGuestSetCookies removes from a guest's answer every Set-Cookie
// that could act on the console's session: one of the session cookie's
// name (either spelling), and any with a Domain attribute. This route is
// served from the server's own origin (and the E2B host route through
// it), where a guest has no business setting cookies for other hosts: a
// Domain=<parent> cookie would reach the console on a sibling host, and
// the browser would send it before the console's own. Host-only cookies
// of other names pass.
func dropGuestSetCookies(h http.Header) {
	lines := h.Values("Set-Cookie")
	if len(lines) == 0 {
		return
	}
	var keep []string
	for _, line := range lines {
		if !plantsCookie(line) {
			keep = append(keep, line)
		}
	}
	h.Del("Set-Cookie")
	for _, line := range keep {
		h.Add("Set-Cookie", line)
	}
}

// plantsCookie reports whether the Set-Cookie value line sets what a
// browser would send back as the session cookie (a nameless cookie
// "=airlock_session=…" included, apiv1.SetsSessionCookie) or carries a
// Domain attribute.
func plantsCookie(line string) bool {
	attrs := strings.Split(line, ";")
	if apiv1.SetsSessionCookie(line) {
		return true
	}
	for _, a := range attrs[1:] {
		k, _, _ := strings.Cut(a, "=")
		if strings.EqualFold(strings.TrimSpace(k), "Domain") {
			return true
		}
	}
	return false
}

// dropSessionCookie removes the console's session cookie (an API key,
// either spelling) from a request bound for a guest; other cookies pass.
func dropSessionCookie(h http.Header) {
	lines := h.Values("Cookie")
	if len(lines) == 0 {
		return
	}
	var keep []string
	for _, line := range lines {
		for _, part := range strings.Split(line, ";") {
			name, _, _ := strings.Cut(strings.TrimSpace(part), "=")
			if part = strings.TrimSpace(part); part != "" && !apiv1.IsSessionCookie(name) {
				keep = append(keep, part)
			}
		}
	}
	h.Del("Cookie")
	if len(keep) > 0 {
		h.Set("Cookie", strings.Join(keep, "; "))
	}
}
