package nftrules

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// soOriginalDst is SO_ORIGINAL_DST (linux/netfilter_ipv4.h) and IP6T_SO_ORIGINAL_DST
// (linux/netfilter_ipv6/ip6_tables.h); both are 80.
const soOriginalDst = 80

// OriginalDst returns the destination a redirected connection was addressed to before the
// table's redirect rewrote it (conntrack's original tuple). For a connection that was not
// redirected it returns the connection's own local address.
func OriginalDst(c *net.TCPConn) (netip.AddrPort, error) {
	local, ok := c.LocalAddr().(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("nftrules: original destination: local address %v is not TCP", c.LocalAddr())
	}
	v4 := local.AddrPort().Addr().Unmap().Is4()
	raw, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("nftrules: original destination: %w", err)
	}
	var (
		buf  [unix.SizeofSockaddrInet6]byte
		size = uint32(len(buf))
		serr error
	)
	level := unix.SOL_IPV6
	if v4 {
		level = unix.SOL_IP
		size = unix.SizeofSockaddrInet4
	}
	if err := raw.Control(func(fd uintptr) {
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, uintptr(level), soOriginalDst,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&size)), 0)
		if e != 0 {
			serr = e
		}
	}); err != nil {
		return netip.AddrPort{}, fmt.Errorf("nftrules: original destination: %w", err)
	}
	if serr != nil {
		return netip.AddrPort{}, fmt.Errorf("nftrules: original destination: getsockopt: %w", serr)
	}
	// struct sockaddr_in / sockaddr_in6: family (host order), port (network order), then the address
	// (sockaddr_in6 has 4 bytes of flowinfo before it).
	port := binary.BigEndian.Uint16(buf[2:4])
	if v4 {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(buf[4:8])), port), nil
	}
	return netip.AddrPortFrom(netip.AddrFrom16([16]byte(buf[8:24])), port), nil
}
