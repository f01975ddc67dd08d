package server

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"

	"github.com/airlockdev/airlock/internal/e2b"
	"github.com/airlockdev/airlock/internal/hostallow"
)

// allowedHosts is the Host allow-list of the listener (and of
// --metrics-listen): the operator's --allowed-hosts and the server's own
// names — the --listen host when it is a name, the hosts of
// --advertise-url and --public-url, the machine's host name, and with the
// E2B API on the --e2b-domain and every name under it. Addresses,
// localhost and *.localhost always pass (see internal/hostallow).
func allowedHosts(opts Options, advertiseURL string) (hostallow.List, error) {
	l, err := hostallow.Parse(opts.AllowedHosts)
	if err != nil {
		return hostallow.List{}, fmt.Errorf("--allowed-hosts: %w", err)
	}
	own := []string{}
	if h, _, err := net.SplitHostPort(opts.Listen); err == nil {
		own = append(own, h)
	}
	for _, u := range []string{advertiseURL, opts.PublicURL} {
		if u == "" {
			continue
		}
		if pu, err := url.Parse(u); err == nil {
			own = append(own, pu.Hostname())
		}
	}
	if name, err := os.Hostname(); err == nil {
		own = append(own, name)
	}
	if !opts.NoE2B && opts.E2BDomain != "" {
		d := opts.E2BDomain
		if h, _, err := net.SplitHostPort(d); err == nil {
			d = h
		}
		own = append(own, d, "*."+d)
	}
	for _, n := range own {
		if n == "" {
			continue
		}
		if err := l.Add(n); err != nil {
			// The server's own names were checked where they were given;
			// one that is no DNS name (an odd host name) is left out.
			continue
		}
	}
	return l, nil
}

// hostChecked wraps h in the Host allow-list. With the E2B API on, a
// sandbox port's host name (<port>-<id>.<domain>, under any domain when
// --e2b-domain is not set) passes too: it is routed to the sandbox, never
// to Airlock's own routes.
func hostChecked(h http.Handler, l hostallow.List, opts Options) http.Handler {
	var sandboxHost func(string) bool
	if !opts.NoE2B {
		domain := opts.E2BDomain
		sandboxHost = func(host string) bool { return e2b.IsSandboxHost(host, domain) }
	}
	return hostallow.Handler(l, sandboxHost, h)
}
