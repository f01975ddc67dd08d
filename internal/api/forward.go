package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/noderoute"
	"github.com/airlockdev/airlock/internal/textclip"
)

// Routing to the hosting node.
//
// The routes that need a sandbox's agent or its node-local state
// (processes, commands, files, the live egress state) are wrapped with
// hosted: for a sandbox placed on another node (Sandbox.NodeID, neither
// empty nor Config.Self) the request, as authenticated here, is proxied
// to that node's advertise URL unchanged (its API key included: the node
// authenticates it again against the same database) with two headers:
// Airlock-Forwarded-By (this node) and Airlock-Forward-Token, a short
// forward token signed with this process's attachment key that names both
// nodes, the request line and the base URL the client reached this
// replica at. The node verifies it with the published public keys
// (trustPeer) and only then builds attach and transfer URLs from that
// base, so the URLs a client gets name the replica it called (which
// proxies the data plane too). A client's own X-Forwarded-* headers are
// never trusted, and a forwarded request is never forwarded again.

// peerKey keys the verified forward claims in a request's context.
type peerKey struct{}

// peerFrom returns the verified forward claims of a request a trusted peer
// forwarded, or nil.
func peerFrom(ctx context.Context) *auth.ForwardClaims {
	c, _ := ctx.Value(peerKey{}).(*auth.ForwardClaims)
	return c
}

// trustPeer checks the forward token of a request that says it was
// forwarded (Airlock-Forwarded-By) and returns the request with the
// verified claims in its context. A request that does not say so is
// returned as is; one that says so without a valid token is refused: a
// plain client cannot pose as a replica.
func (a *API) trustPeer(r *http.Request) (*http.Request, error) {
	by := r.Header.Get(noderoute.HeaderForwardedBy)
	if by == "" {
		return r, nil
	}
	refuse := func(why string) error {
		a.log.WarnContext(r.Context(), "refused a forwarded request", "forwarded_by", textclip.Bytes(by, maxEcho), "why", why, "remote", r.RemoteAddr)
		return errorf(apiv1.CodeUnauthenticated, "a forwarded request needs a valid forward token from an Airlock replica")
	}
	if a.cfg.PeerVerifier == nil || a.cfg.Self == "" {
		return nil, refuse("this server takes no forwarded requests")
	}
	c, err := a.cfg.PeerVerifier.VerifyForward(r.Header.Get(noderoute.HeaderForwardToken), a.cfg.Now())
	switch {
	case err != nil:
		return nil, refuse(err.Error())
	case string(c.From) != by:
		return nil, refuse("the token is from another node than Airlock-Forwarded-By")
	case c.To != a.cfg.Self:
		return nil, refuse("the token is for node " + string(c.To))
	case c.Request != requestLine(r):
		return nil, refuse("the token is for another request")
	}
	if _, err := parsePublicURL(c.Base); err != nil {
		return nil, refuse("bad base URL")
	}
	return r.WithContext(context.WithValue(r.Context(), peerKey{}, &c)), nil
}

// requestLine is what a forward token vouches for.
func requestLine(r *http.Request) string { return r.Method + " " + r.URL.RequestURI() }

// hosted wraps the handler of a route under /v1/sandboxes/{id}/ that must
// run on the node hosting the sandbox: for a sandbox on another node the
// request is forwarded there (see above); otherwise h runs here. Without
// Config.Nodes it is h.
func (a *API) hosted(h func(http.ResponseWriter, *http.Request, principal)) func(http.ResponseWriter, *http.Request, principal) {
	if a.router == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request, p principal) {
		if !a.forwardToHost(w, r, p) {
			h(w, r, p)
		}
	}
}

// forwardToHost forwards r if its sandbox is hosted on another node and
// reports whether it answered. A sandbox that cannot be loaded, or is not
// placed, is left to the handler (its usual errors).
func (a *API) forwardToHost(w http.ResponseWriter, r *http.Request, p principal) bool {
	sb, err := a.sandboxOf(r.Context(), r, p)
	if err != nil || !a.router.Remote(sb.NodeID) {
		return false
	}
	if noderoute.Forwarded(r) {
		// The hop guard: the replica thought the sandbox was here.
		noderoute.WriteNotHere(w, sb.ID, sb.NodeID)
		return true
	}
	a.forwardTo(w, r, p, sb.NodeID)
	return true
}

// forwardTo forwards r, authenticated here as p, to node (see above).
func (a *API) forwardTo(w http.ResponseWriter, r *http.Request, p principal, node model.NodeID) {
	tok, err := a.cfg.Attach.IssueForward(auth.ForwardClaims{
		From: a.cfg.Self, To: node, Request: requestLine(r), Base: a.baseURL(r), IssuedAt: a.cfg.Now(),
	})
	if err != nil {
		a.writeError(w, r, fmt.Errorf("sign forward token: %w", err))
		return
	}
	extra := http.Header{}
	extra.Set(noderoute.HeaderForwardToken, tok)
	if err := a.forwardCredential(r, p, extra); err != nil {
		a.writeError(w, r, err)
		return
	}
	if id := requestIDFrom(r.Context()); id != "" {
		extra.Set("X-Request-Id", id) // one ID in both nodes' logs
	}
	a.injectTrace(r, extra) // one trace across both nodes
	ans := a.router.Forward(w, r, node, extra)
	noteAnswer(r.Context(), ans.ErrorCode, ans.CreatedID) // the node's answer, for the audit entry recorded here
}
