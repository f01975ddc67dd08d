package api

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// AttachPath is the data-plane path of a process's attach stream (SSE),
// relative to the server's public URL. The data plane serves it.
func AttachPath(id model.ProcessID) string {
	return apiv1.AttachPath(id.String())
}

// parsePublicURL checks Config.PublicURL: an absolute http(s) URL without
// query or fragment. It returns it without a trailing slash.
func parsePublicURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("api: PublicURL %q: %w", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("api: PublicURL %q must be http(s)://host[:port][/prefix]", s)
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}

// baseURL is where clients reach this server: for a request a trusted
// replica forwarded, the base URL the client reached that replica at, as
// its verified forward token names it (see forward.go; the replica also
// sends X-Forwarded-Host and -Proto, which are never read here);
// otherwise Config.PublicURL, or the scheme and host the request came in
// on. A client's own X-Forwarded-* headers are ignored.
func (a *API) baseURL(r *http.Request) string {
	if peer := peerFrom(r.Context()); peer != nil {
		return peer.Base
	}
	if a.cfg.PublicURL != "" {
		return a.cfg.PublicURL
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// wsURL turns an http(s) base URL into the ws(s) one.
func wsURL(base string) string {
	if rest, ok := strings.CutPrefix(base, "https://"); ok {
		return "wss://" + rest
	}
	return "ws://" + strings.TrimPrefix(base, "http://")
}
