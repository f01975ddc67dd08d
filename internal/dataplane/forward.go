package dataplane

import (
	"net/http"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/noderoute"
)

// Routing to the hosting node.
//
// A request whose token is genuine (verified here first: a forged one is
// refused without leaving this replica) but names a sandbox hosted on
// another node is proxied there unchanged, token included, and the node
// verifies the token again (with the published keys of the replica that
// signed it). Streams pass through as they are written (SSE, WebSocket
// upgrades, streamed bodies; the body read timeout of the API's Wrap
// applies here, at the edge). A request another node forwarded is never
// forwarded again. Attachment tokens name their node (claims.Node); file
// tokens do not, so the sandbox's current node is read from the store.

// routeRemote forwards r to node if the sandbox is hosted there and
// reports whether it answered (forwarded, or refused by the hop guard).
func (d *DataPlane) routeRemote(w http.ResponseWriter, r *http.Request, sandbox model.SandboxID, node model.NodeID) bool {
	if !d.router.Remote(node) {
		return false
	}
	if noderoute.Forwarded(r) {
		noderoute.WriteNotHere(w, sandbox, node)
		return true
	}
	d.router.Forward(w, r, node, nil)
	return true
}
