package e2b

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/airlockdev/airlock/internal/e2b/codeinterp"
	"github.com/airlockdev/airlock/internal/model"
)

// Guest ports with a meaning of their own.
const (
	// EnvdPort is envd's port: E2B's process and filesystem services and
	// /files, answered by the gateway itself (no envd runs in the guest).
	EnvdPort Port = 49983
	// CodeInterpreterPort is the code interpreter's port, served by a
	// program of the code-interpreter template inside the sandbox.
	CodeInterpreterPort Port = codeinterp.Port
)

// Port is a guest TCP port, 1–65535.
type Port = model.GuestPort

// Route is where a request for a sandbox is going.
type Route struct {
	Sandbox model.SandboxID
	Port    Port
}

// Headers E2B clients send on every in-sandbox request.
const (
	headerSandboxID   = "E2b-Sandbox-Id"
	headerSandboxPort = "E2b-Sandbox-Port"
)

// errNotSandbox says a request is not in-sandbox traffic.
var errNotSandbox = errors.New("not a sandbox request")

// RouteOf tells whether r is in-sandbox traffic and for which sandbox and
// port: the E2b-Sandbox-Id and E2b-Sandbox-Port headers first, then a
// Host of the form <port>-<sandbox id>.<domain> (with domain "" any
// domain; else exactly that one, ports ignored). errNotSandbox means
// neither is there (the request is for the control plane or Airlock's own
// API); any other error is a malformed sandbox request.
func RouteOf(r *http.Request, domain string) (Route, error) {
	if id := r.Header.Get(headerSandboxID); id != "" {
		sb, err := model.ParseSandboxID(id)
		if err != nil {
			return Route{}, fmt.Errorf("%s: %w", headerSandboxID, err)
		}
		ps := r.Header.Get(headerSandboxPort)
		if ps == "" {
			return Route{}, fmt.Errorf("%s is set but %s is missing", headerSandboxID, headerSandboxPort)
		}
		p, err := model.ParseGuestPort(ps)
		if err != nil {
			return Route{}, fmt.Errorf("%s: %w", headerSandboxPort, err)
		}
		return Route{Sandbox: sb, Port: p}, nil
	}
	return routeOfHost(r.Host, domain)
}

// routeOfHost parses <port>-<sandbox id>.<domain>[:port]: the left-most
// label split at its first "-". A host of any other form (an IP address,
// "localhost", the server's own name, another domain than the configured
// one, a sandbox ID that does not parse) is not sandbox traffic.
func routeOfHost(host, domain string) (Route, error) {
	label, rest, ok := strings.Cut(host, ".")
	if !ok || rest == "" {
		return Route{}, errNotSandbox
	}
	if domain != "" && !strings.EqualFold(stripPort(rest), stripPort(domain)) {
		return Route{}, errNotSandbox
	}
	ps, id, ok := strings.Cut(label, "-")
	if !ok {
		return Route{}, errNotSandbox
	}
	p, err := model.ParseGuestPort(ps)
	if err != nil {
		return Route{}, errNotSandbox
	}
	sb, err := model.ParseSandboxID(strings.ToLower(id))
	if err != nil {
		return Route{}, errNotSandbox
	}
	return Route{Sandbox: sb, Port: p}, nil
}

// stripPort drops a trailing :port.
func stripPort(host string) string {
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
		return host[:i]
	}
	return host
}

// IsSandboxHost reports whether host (a Host header) names a port of a
// sandbox, <port>-<sandbox id>.<domain>, as RouteOf routes it (with
// domain "" under any domain): such a request is sandbox traffic and
// reaches none of Airlock's own routes.
func IsSandboxHost(host, domain string) bool {
	_, err := routeOfHost(host, domain)
	return err == nil
}
