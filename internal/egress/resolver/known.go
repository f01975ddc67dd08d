package resolver

import (
	"net"
	"net/netip"
	"time"

	"github.com/miekg/dns"

	"github.com/airlockdev/airlock/internal/egress"
)

// sandbox finds the sandbox whose address src is. An unknown source is logged (at most once
// per period) and must get nothing back: not REFUSED, not FORMERR, no packet at all. A reply to
// a forged source would leave the host for that address (conntrack reverses the redirect): an
// egress bypass and a reflector.
func (r *Resolver) sandbox(src netip.Addr) (*egress.Sandbox, bool) {
	sb, ok := r.cfg.Registry.BySource(src)
	if !ok {
		r.strangers.Do(func() {
			r.log.Warn("dns packet from an address that is no sandbox dropped without reply (logged at most once a minute)", "src", src.String())
		})
	}
	return sb, ok
}

// known reports whether src is a sandbox's address (see sandbox).
func (r *Resolver) known(src netip.Addr) bool {
	_, ok := r.sandbox(src)
	return ok
}

// knownReader drops, before miekg/dns parses them, the UDP packets whose source is no
// sandbox: the server answers some malformed packets itself (FORMERR, NOTIMP), and such a
// reply would go to an unknown, perhaps forged, address. TCP connections from unknown sources
// are closed at accept (sourceLimitListener) and never reach a reader.
type knownReader struct {
	dns.Reader
	known func(netip.Addr) bool
}

func (k knownReader) ReadUDP(conn *net.UDPConn, timeout time.Duration) ([]byte, *dns.SessionUDP, error) {
	for {
		m, s, err := k.Reader.ReadUDP(conn, timeout)
		if err != nil {
			return m, s, err
		}
		if src, ok := remoteAddr(s.RemoteAddr()); ok && k.known(src) {
			return m, s, nil
		}
	}
}

func (k knownReader) ReadPacketConn(conn net.PacketConn, timeout time.Duration) ([]byte, net.Addr, error) {
	pr, ok := k.Reader.(dns.PacketConnReader)
	if !ok {
		return nil, nil, net.ErrClosed
	}
	for {
		m, a, err := pr.ReadPacketConn(conn, timeout)
		if err != nil {
			return m, a, err
		}
		if src, ok := remoteAddr(a); ok && k.known(src) {
			return m, a, nil
		}
	}
}
