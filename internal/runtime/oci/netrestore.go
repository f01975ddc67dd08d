package oci

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/airlockdev/airlock/internal/runtime"
)

// guestIf is the guest's interface in a prepared network namespace (see
// runtime.Network).
const guestIf = "eth0"

// readdressNetns gives the guest interface of a prepared network namespace
// its address, and the namespace its default route, again before `runsc
// restore`. runsc (--network=sandbox) takes eth0's configuration over into
// its own network stack when it starts, removing the addresses (and with
// them the routes) from the namespace; a restore builds its stack from the
// namespace again and skips an interface without an address, so the woken
// guest would have no eth0. Replacing is idempotent.
func readdressNetns(n *runtime.Network) error {
	ns, err := netns.GetFromPath(n.NetnsPath)
	if err != nil {
		return fmt.Errorf("open network namespace %s: %w", n.NetnsPath, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", n.NetnsPath, err)
	}
	defer h.Close()
	link, err := h.LinkByName(guestIf)
	if err != nil {
		return fmt.Errorf("%s in %s: %w", guestIf, n.NetnsPath, err)
	}
	addr := &net.IPNet{IP: n.GuestAddr.Addr().AsSlice(), Mask: net.CIDRMask(n.GuestAddr.Bits(), n.GuestAddr.Addr().BitLen())}
	if err := h.AddrReplace(link, &netlink.Addr{IPNet: addr}); err != nil {
		return fmt.Errorf("address %s on %s: %w", n.GuestAddr, guestIf, err)
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("up %s: %w", guestIf, err)
	}
	if err := h.RouteReplace(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: n.Gateway.AsSlice()}); err != nil {
		return fmt.Errorf("default route via %s: %w", n.Gateway, err)
	}
	return nil
}
