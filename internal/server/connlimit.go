package server

import (
	"net"

	"golang.org/x/net/netutil"
)

// DefaultMaxConnections is the default of Options.MaxConnections: well
// under the process's file limit, which agent sockets share.
const DefaultMaxConnections = 4096

// newLimitListener accepts at most n open connections at once; beyond that,
// Accept waits until one closes (new clients wait in the kernel's backlog).
// A flood of slow clients cannot take the descriptors that agent sockets
// need.
func newLimitListener(l net.Listener, n int) net.Listener {
	return netutil.LimitListener(l, n)
}
