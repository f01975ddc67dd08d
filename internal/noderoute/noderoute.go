// Package noderoute forwards HTTP requests to the node that hosts a
// sandbox: an API replica (or a node) that receives a request for a
// sandbox hosted elsewhere proxies it to that node's advertise URL, where
// the same listener serves the API and the data plane. Streams (SSE,
// WebSocket upgrades, request bodies) pass through unbuffered.
//
// A forwarded request carries Airlock-Forwarded-By (the forwarding node's
// ID); a request that carries it is never forwarded again (the hop guard),
// whatever else it claims. The management API adds a signed forward token
// (auth.ForwardClaims) that the receiving node verifies before it trusts
// anything the forwarding replica says (internal/api/forward.go).
package noderoute

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// Headers of a forwarded request.
const (
	// HeaderForwardedBy names the node that forwarded the request.
	HeaderForwardedBy = "Airlock-Forwarded-By"
	// HeaderForwardToken is the forwarding replica's signed forward token
	// (management API requests).
	HeaderForwardToken = "Airlock-Forward-Token"
)

// Headers of a forwarded request's answer: what the node that served it
// tells the forwarding one about the answer (whose audit entry is written
// there). Forward reads and removes them; the client never sees them.
const (
	// HeaderErrorCode is the code of an error answer.
	HeaderErrorCode = "Airlock-Error-Code"
	// HeaderCreatedID is the ID of the resource a create made.
	HeaderCreatedID = "Airlock-Created-Id"
)

// Answer is what Forward learnt of the answer it wrote: the serving node's
// HeaderErrorCode and HeaderCreatedID, or the code of Forward's own error
// (node_unreachable).
type Answer struct {
	ErrorCode string
	CreatedID string
}

// Nodes finds a node's advertise URL (store.Nodes implements it): a read
// of the node's row alone, once per forwarded request.
type Nodes interface {
	GetNodeRecord(ctx context.Context, id model.NodeID) (model.Node, error)
}

// DialTimeout bounds connecting to a node.
const DialTimeout = 5 * time.Second

// NewTransport returns the transport of node-to-node requests: no proxy
// from the environment, bounded dials, no response timeout (attach streams
// and long polls last).
func NewTransport() *http.Transport {
	return &http.Transport{
		DialContext:           (&net.Dialer{Timeout: DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:   32,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   DialTimeout,
		ExpectContinueTimeout: time.Second,
	}
}

// Router forwards requests to other nodes.
type Router struct {
	Self      model.NodeID
	Nodes     Nodes
	Transport http.RoundTripper // nil: NewTransport()
	Log       *slog.Logger      // nil: slog.Default()
}

// New returns a Router; nil when nodes is nil (a single node forwards
// nothing).
func New(self model.NodeID, nodes Nodes, transport http.RoundTripper, log *slog.Logger) *Router {
	if nodes == nil {
		return nil
	}
	if transport == nil {
		transport = NewTransport()
	}
	if log == nil {
		log = slog.Default()
	}
	return &Router{Self: self, Nodes: nodes, Transport: transport, Log: log}
}

// Forwarded reports whether r was forwarded by another node: such a
// request is served here or refused, never forwarded again.
func Forwarded(r *http.Request) bool { return r.Header.Get(HeaderForwardedBy) != "" }

// Remote reports whether a sandbox on node must be forwarded: it is placed
// on a node other than this one.
func (rt *Router) Remote(node model.NodeID) bool {
	return rt != nil && node != "" && node != rt.Self
}

// WriteNotHere answers a forwarded request for a sandbox this node does
// not host (the hop guard): 503 unavailable, its code in HeaderErrorCode
// for the forwarding node.
func WriteNotHere(w http.ResponseWriter, sandbox model.SandboxID, node model.NodeID) {
	w.Header().Set(HeaderErrorCode, apiv1.CodeUnavailable)
	writeError(w, apiv1.CodeUnavailable,
		fmt.Sprintf("sandbox %s is on node %s, not here", sandbox, node))
}

func writeError(w http.ResponseWriter, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(apiv1.HTTPStatus(code))
	_ = json.NewEncoder(w).Encode(apiv1.Error{Code: code, Message: msg})
}

// unreachable answers 503 node_unreachable.
func unreachable(w http.ResponseWriter, node model.NodeID, why string) Answer {
	writeError(w, apiv1.CodeNodeUnreachable,
		fmt.Sprintf("the node %s hosting the sandbox cannot be reached: %s", node, why))
	return Answer{ErrorCode: apiv1.CodeNodeUnreachable}
}

// Forward proxies r to node's advertise URL and writes its answer (or 503
// node_unreachable) to w, without the answer headers above, which it
// returns. extra headers are set on the outgoing request. The request's
// path and query are kept; X-Forwarded-For, -Host and -Proto are set from
// r (a client's own are dropped).
func (rt *Router) Forward(w http.ResponseWriter, r *http.Request, node model.NodeID, extra http.Header) (ans Answer) {
	ctx := r.Context()
	st, err := rt.Nodes.GetNodeRecord(ctx, node)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return unreachable(w, node, "no such node is registered")
	case err != nil:
		rt.Log.ErrorContext(ctx, "forward: look up node", "node", node, "err", err)
		return unreachable(w, node, "could not look it up")
	case st.State == model.NodeDead:
		return unreachable(w, node, "it is dead")
	}
	target, err := url.Parse(st.AdvertiseURL)
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
		return unreachable(w, node, fmt.Sprintf("its advertise URL %q is not usable", st.AdvertiseURL))
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
			pr.Out.Header.Set(HeaderForwardedBy, string(rt.Self))
			pr.Out.Header.Del(HeaderForwardToken)
			for k, v := range extra {
				pr.Out.Header[k] = v
			}
		},
		Transport:     rt.Transport,
		FlushInterval: -1, // SSE and streamed bodies: every write at once
		ErrorLog:      slog.NewLogLogger(rt.Log.Handler(), slog.LevelWarn),
		ModifyResponse: func(res *http.Response) error {
			// The replica's own request ID stands (the node got it too).
			res.Header.Del("X-Request-Id")
			ans = Answer{ErrorCode: res.Header.Get(HeaderErrorCode), CreatedID: res.Header.Get(HeaderCreatedID)}
			res.Header.Del(HeaderErrorCode)
			res.Header.Del(HeaderCreatedID)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client went away
			}
			rt.Log.WarnContext(r.Context(), "forward to node failed", "node", node, "url", st.AdvertiseURL, "err", err)
			ans = unreachable(w, node, "connection failed")
		},
	}
	proxy.ServeHTTP(w, r)
	return ans
}
