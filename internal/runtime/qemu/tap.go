package qemu

// The VM's network: a TAP device inside the sandbox's prepared network
// namespace (runtime.Network) that takes eth0's place. tc moves every frame
// between eth0 and the TAP unchanged, so the host end of the veth, its
// addresses and the egress layer's nftables rules see the VM exactly as they
// see a container on eth0.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/nldump"
)

const (
	// tapGuestIf is the guest interface of a prepared network namespace (see
	// runtime.Network): the veth end whose identity the VM takes over.
	tapGuestIf = "eth0"
	// tapDevice is the TAP device QEMU opens inside the namespace.
	tapDevice = "tap0"
	// tapFlags are the TUNSETIFF flags the TAP is created with, and those
	// QEMU 7.2 attaches with for `-netdev tap,ifname=tap0` (net/tap-linux.c
	// tap_open: IFF_TAP|IFF_NO_PI, plus IFF_VNET_HDR because vnet_hdr
	// defaults to on when the kernel offers it). The kernel takes
	// IFF_NO_PI and IFF_VNET_HDR from each attach anyway; what must match
	// between creation and QEMU's attach is the type (TAP) and the absence
	// of IFF_MULTI_QUEUE (QEMU sets it only for queues>1), else TUNSETIFF
	// fails with EINVAL.
	tapFlags = unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR
	// tapOwner is the uid allowed to attach to the persistent TAP besides
	// CAP_NET_ADMIN holders: root (the runtime attaches and hands QEMU the
	// descriptor; QEMU's own uid may not).
	tapOwner = 0
	// tapRedirectPrio is the priority of the redirect filters.
	tapRedirectPrio = 1
	// tapIngressHandle is the ingress qdisc's handle and the parent of its
	// filters (tc's "ffff:").
	tapIngressHandle = 0xffff << 16
)

// guestLink is what the VM's virtio-net device must be: the TAP device QEMU
// opens (-netdev tap,ifname=<TAP>,script=no,downscript=no, QEMU running
// inside the netns, see inNetns) and the MAC the guest NIC must carry
// (-device virtio-net-device,mac=<MAC>). MTU is eth0's (and the TAP's): the
// guest's eth0 must use it too (virtio-net's host_mtu=<MTU>, or the agent
// sets it).
type guestLink struct {
	TAP string
	MAC net.HardwareAddr
	MTU int
}

// attachTAP joins a persistent TAP device (tap0, owned by root, created with
// IFF_TAP|IFF_NO_PI|IFF_VNET_HDR, single queue) inside the network namespace
// at netnsPath to that namespace's eth0, so that the VM takes over eth0's
// identity: a booted VM's NIC gets eth0's MAC (a base-snapshot clone keeps
// the base's: frames pass whatever their MAC), eth0's IPv4 addresses (and so its
// routes) are removed inside the namespace (the guest configures them on its
// own eth0 from runtime.Network), and every frame passes unchanged in both
// directions: an ingress qdisc on eth0 and on tap0, each with one match-all
// filter (matchall, or u32 matching everything on kernels without
// cls_matchall) whose action is a mirred egress redirect to the other device
// (TC_ACT_STOLEN: the namespace's own stack never sees a frame, so eth0
// answers no ARP). tap0 gets eth0's MTU and no IPv6; both links are up.
//
// It is idempotent: calling it again (after a crash, or to wake a suspended
// VM) converges to the same state and returns the same guestLink, keeping a
// good tap0 (a running QEMU may hold it). On error it undoes what this call
// made (a TAP it created, ingress qdiscs it added, addresses it removed).
func attachTAP(ctx context.Context, netnsPath string) (guestLink, error) {
	if err := ctx.Err(); err != nil {
		return guestLink{}, err
	}
	ns, err := netns.GetFromPath(netnsPath)
	if err != nil {
		return guestLink{}, fmt.Errorf("tap: open network namespace %s: %w", netnsPath, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return guestLink{}, fmt.Errorf("tap: netlink in %s: %w", netnsPath, err)
	}
	defer h.Close()

	var undo []func() error
	gl, err := attachTAPWith(ctx, h, netnsPath, &undo)
	if err != nil {
		var uerrs []error
		for i := len(undo) - 1; i >= 0; i-- {
			uerrs = append(uerrs, undo[i]())
		}
		if uerr := errors.Join(uerrs...); uerr != nil {
			err = fmt.Errorf("%w (undo: %v)", err, uerr)
		}
		return guestLink{}, fmt.Errorf("tap in %s: %w", netnsPath, err)
	}
	return gl, nil
}

// attachTAPWith does attachTAP's work through h, a netlink handle in the
// namespace, appending to undo how to reverse each change it makes.
func attachTAPWith(ctx context.Context, h *netlink.Handle, netnsPath string, undo *[]func() error) (guestLink, error) {
	eth, err := h.LinkByName(tapGuestIf)
	if err != nil {
		return guestLink{}, fmt.Errorf("no %s (not a prepared sandbox network namespace?): %w", tapGuestIf, err)
	}
	mac := eth.Attrs().HardwareAddr
	if len(mac) != 6 {
		return guestLink{}, fmt.Errorf("%s has no Ethernet address (%q)", tapGuestIf, mac)
	}
	mtu := eth.Attrs().MTU

	tap, err := ensureTAP(h, netnsPath, undo)
	if err != nil {
		return guestLink{}, err
	}
	if tap.Attrs().MTU != mtu {
		if err := h.LinkSetMTU(tap, mtu); err != nil {
			return guestLink{}, fmt.Errorf("MTU %d on %s: %w", mtu, tapDevice, err)
		}
	}
	for _, l := range []netlink.Link{tap, eth} {
		if err := h.LinkSetUp(l); err != nil {
			return guestLink{}, fmt.Errorf("up %s: %w", l.Attrs().Name, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return guestLink{}, err
	}
	// The redirects go in before eth0 loses its addresses: from then on
	// no frame reaches the namespace's stack.
	if err := ensureTAPRedirect(h, eth, tap, undo); err != nil {
		return guestLink{}, err
	}
	if err := ensureTAPRedirect(h, tap, eth, undo); err != nil {
		return guestLink{}, err
	}
	if err := ctx.Err(); err != nil {
		return guestLink{}, err
	}
	if err := unaddressTAPGuestIf(h, eth, undo); err != nil {
		return guestLink{}, err
	}
	return guestLink{TAP: tapDevice, MAC: mac, MTU: mtu}, nil
}

// ensureTAP returns tap0, creating it if it is missing and recreating it if
// it is not a single-queue TAP device. IPv6 stays off on it (a prepared
// namespace disables it by default; this covers a namespace that does not),
// so the namespace's stack sends nothing to the guest of its own.
func ensureTAP(h *netlink.Handle, netnsPath string, undo *[]func() error) (netlink.Link, error) {
	l, err := h.LinkByName(tapDevice)
	var nf netlink.LinkNotFoundError
	switch {
	case errors.As(err, &nf):
		l = nil
	case err != nil:
		return nil, fmt.Errorf("look up %s: %w", tapDevice, err)
	}
	if l != nil {
		if t, ok := l.(*netlink.Tuntap); ok && t.Mode == netlink.TUNTAP_MODE_TAP && t.Flags&netlink.TUNTAP_MULTI_QUEUE == 0 {
			return l, inNetns(netnsPath, func() error { return tapDisableIPv6(tapDevice) })
		}
		// Someone else's device, or a TUN, or multi-queue: QEMU could not
		// attach to it.
		if err := h.LinkDel(l); err != nil {
			return nil, fmt.Errorf("delete unusable %s (%s): %w", tapDevice, l.Type(), err)
		}
	}
	if err := inNetns(netnsPath, createTAP); err != nil {
		return nil, fmt.Errorf("create %s: %w", tapDevice, err)
	}
	l, err = h.LinkByName(tapDevice)
	if err != nil {
		return nil, fmt.Errorf("look up created %s: %w", tapDevice, err)
	}
	*undo = append(*undo, func() error {
		if err := h.LinkDel(l); err != nil {
			return fmt.Errorf("delete %s: %w", tapDevice, err)
		}
		return nil
	})
	return l, nil
}

// createTAP creates the persistent TAP device in the calling thread's
// network namespace (a TUN file's device lives in the namespace of the
// thread that opened /dev/net/tun) with IPv6 off, and detaches from it.
func createTAP() error {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /dev/net/tun: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(tapDevice)
	if err != nil {
		return err
	}
	ifr.SetUint16(tapFlags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		return fmt.Errorf("TUNSETIFF: %w", err)
	}
	if err := unix.IoctlSetInt(fd, unix.TUNSETOWNER, tapOwner); err != nil {
		return fmt.Errorf("TUNSETOWNER: %w", err)
	}
	if err := unix.IoctlSetInt(fd, unix.TUNSETPERSIST, 1); err != nil {
		return fmt.Errorf("TUNSETPERSIST: %w", err)
	}
	if err := tapDisableIPv6(tapDevice); err != nil {
		return errors.Join(err, tapUnpersist(fd))
	}
	return nil
}

// openTAP attaches to the persistent TAP device name in the calling
// thread's network namespace and returns its TUN file, which QEMU gets as
// -netdev tap,fd=N (QEMU itself, running as the VM's uid, could not).
func openTAP(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	ifr.SetUint16(tapFlags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("TUNSETIFF %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), "/dev/net/tun:"+name), nil
}

// tapUnpersist makes the TAP attached as fd vanish when fd closes.
func tapUnpersist(fd int) error {
	if err := unix.IoctlSetInt(fd, unix.TUNSETPERSIST, 0); err != nil {
		return fmt.Errorf("TUNSETPERSIST 0: %w", err)
	}
	return nil
}

// tapDisableIPv6 turns IPv6 off on one interface of the calling thread's
// network namespace (/proc/sys/net resolves in the opener's namespace).
func tapDisableIPv6(ifname string) error {
	err := os.WriteFile("/proc/sys/net/ipv6/conf/"+ifname+"/disable_ipv6", []byte("1\n"), 0)
	if errors.Is(err, os.ErrNotExist) {
		if _, serr := os.Stat("/proc/sys/net/ipv6"); errors.Is(serr, os.ErrNotExist) {
			return nil // kernel without IPv6
		}
	}
	if err != nil {
		return fmt.Errorf("disable IPv6 on %s: %w", ifname, err)
	}
	return nil
}

// ensureTAPRedirect makes from's ingress qdisc hold exactly one filter: match
// every frame, redirect it to to's egress. A qdisc holding anything else is
// replaced (with its filters).
func ensureTAPRedirect(h *netlink.Handle, from, to netlink.Link, undo *[]func() error) error {
	name := from.Attrs().Name
	qdiscs, err := nldump.Retry(func() ([]netlink.Qdisc, error) { return h.QdiscList(from) })
	if err != nil {
		return fmt.Errorf("list qdiscs of %s: %w", name, err)
	}
	var ingress netlink.Qdisc
	for _, q := range qdiscs {
		if _, ok := q.(*netlink.Ingress); ok {
			ingress = q
		}
	}
	if ingress != nil {
		filters, err := nldump.Retry(func() ([]netlink.Filter, error) { return h.FilterList(from, tapIngressHandle) })
		if err != nil {
			return fmt.Errorf("list ingress filters of %s: %w", name, err)
		}
		if isOnlyTAPRedirect(filters, to.Attrs().Index) {
			return nil
		}
		// Flushes its filters too.
		if err := h.QdiscDel(ingress); err != nil {
			return fmt.Errorf("delete stale ingress qdisc of %s: %w", name, err)
		}
	}
	q := &netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{
		LinkIndex: from.Attrs().Index,
		Handle:    tapIngressHandle,
		Parent:    netlink.HANDLE_INGRESS,
	}}
	if err := h.QdiscAdd(q); err != nil {
		return fmt.Errorf("add ingress qdisc to %s: %w", name, err)
	}
	*undo = append(*undo, func() error {
		if err := h.QdiscDel(q); err != nil {
			return fmt.Errorf("delete ingress qdisc of %s: %w", name, err)
		}
		return nil
	})
	if err := addTAPRedirect(h, from, to); err != nil {
		return fmt.Errorf("redirect %s to %s: %w", name, to.Attrs().Name, err)
	}
	return nil
}

// addTAPRedirect adds the match-all redirect filter from from's ingress to
// to's egress: a matchall filter, or where the kernel has no cls_matchall
// (ENOENT: "TC classifier not found") a u32 filter with one key matching
// every packet, tc's classic "u32 match u32 0 0".
func addTAPRedirect(h *netlink.Handle, from, to netlink.Link) error {
	attrs := netlink.FilterAttrs{
		LinkIndex: from.Attrs().Index,
		Parent:    tapIngressHandle,
		Priority:  tapRedirectPrio,
		Protocol:  unix.ETH_P_ALL,
	}
	actions := func() []netlink.Action { return []netlink.Action{netlink.NewMirredAction(to.Attrs().Index)} }
	err := h.FilterAdd(&netlink.MatchAll{FilterAttrs: attrs, Actions: actions()})
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EOPNOTSUPP) {
		// A nil Sel is netlink's match-all selector.
		err = h.FilterAdd(&netlink.U32{FilterAttrs: attrs, Actions: actions()})
	}
	return err
}

// isOnlyTAPRedirect reports whether filters (an ingress qdisc's) are exactly
// one match-all filter redirecting to ifindex's egress: one matchall filter,
// or one u32 filter with an empty selector or one all-zero key (listed
// with its hash table entry, which has no action).
func isOnlyTAPRedirect(filters []netlink.Filter, ifindex int) bool {
	redirects := 0
	for _, f := range filters {
		a := f.Attrs()
		if a.Priority != tapRedirectPrio || a.Protocol != unix.ETH_P_ALL {
			return false
		}
		var actions []netlink.Action
		switch f := f.(type) {
		case *netlink.MatchAll:
			actions = f.Actions
		case *netlink.U32:
			if len(f.Actions) == 0 && f.Sel == nil {
				continue // the hash table u32 makes for its filters
			}
			if !u32MatchesAll(f.Sel) {
				return false
			}
			actions = f.Actions
		default:
			return false
		}
		if len(actions) != 1 {
			return false
		}
		m, ok := actions[0].(*netlink.MirredAction)
		if !ok || m.MirredAction != netlink.TCA_EGRESS_REDIR || m.Ifindex != ifindex || m.Attrs().Action != netlink.TC_ACT_STOLEN {
			return false
		}
		redirects++
	}
	return redirects == 1
}

// u32MatchesAll reports whether a u32 selector matches every packet.
func u32MatchesAll(sel *netlink.TcU32Sel) bool {
	if sel == nil {
		return true
	}
	for _, k := range sel.Keys {
		if k.Mask != 0 {
			return false
		}
	}
	return true
}

// unaddressTAPGuestIf removes eth0's IPv4 addresses and whatever routes through it
// are left (removing the last address flushes them): they are the guest's
// now. Undo puts both back.
func unaddressTAPGuestIf(h *netlink.Handle, eth netlink.Link, undo *[]func() error) error {
	addrs, err := nldump.Retry(func() ([]netlink.Addr, error) { return h.AddrList(eth, netlink.FAMILY_V4) })
	if err != nil {
		return fmt.Errorf("list addresses of %s: %w", tapGuestIf, err)
	}
	routes, err := nldump.Retry(func() ([]netlink.Route, error) { return h.RouteList(eth, netlink.FAMILY_V4) })
	if err != nil {
		return fmt.Errorf("list routes via %s: %w", tapGuestIf, err)
	}
	if len(addrs) == 0 && len(routes) == 0 {
		return nil
	}
	*undo = append(*undo, func() error {
		var errs []error
		for _, a := range addrs {
			if err := h.AddrReplace(eth, &a); err != nil {
				errs = append(errs, fmt.Errorf("restore address %s on %s: %w", a.IPNet, tapGuestIf, err))
			}
		}
		for _, r := range routes {
			if err := h.RouteReplace(&r); err != nil {
				errs = append(errs, fmt.Errorf("restore route %s: %w", r, err))
			}
		}
		return errors.Join(errs...)
	})
	for _, a := range addrs {
		if err := h.AddrDel(eth, &a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return fmt.Errorf("remove address %s from %s: %w", a.IPNet, tapGuestIf, err)
		}
	}
	left, err := nldump.Retry(func() ([]netlink.Route, error) { return h.RouteList(eth, netlink.FAMILY_V4) })
	if err != nil {
		return fmt.Errorf("list routes via %s: %w", tapGuestIf, err)
	}
	for _, r := range left {
		if err := h.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("remove route %s: %w", r, err)
		}
	}
	return nil
}

// errNetnsFnExited is inNetns's result when fn ended its goroutine
// (runtime.Goexit, a test's FailNow) instead of returning.
var errNetnsFnExited = errors.New("the function run in the network namespace did not return")

// inNetns runs fn on a locked OS thread that has joined netnsPath's network
// namespace, and puts the thread back into its own namespace afterwards; a
// thread that cannot be put back stays locked and dies with its goroutine,
// so no goroutine ever runs in a namespace it did not ask for. The calling
// goroutine's thread is never moved. A panic in fn is re-raised in the
// caller.
//
// Used to start QEMU: exec.Cmd.Start inside fn forks from this thread, and
// the child inherits its namespace. (Do not set Pdeathsig on such a child:
// it fires when the forking thread exits, which is this one whenever it
// cannot be put back.) Sockets and TUN files fn opens stay in the
// namespace and can be used from any goroutine afterwards.
func inNetns(netnsPath string, fn func() error) error {
	target, err := netns.GetFromPath(netnsPath)
	if err != nil {
		return fmt.Errorf("open network namespace %s: %w", netnsPath, err)
	}
	defer target.Close()

	type result struct {
		err      error
		panicked bool
		panicVal any
	}
	done := make(chan result, 1)
	go func() {
		res := result{err: errNetnsFnExited}
		defer func() { done <- res }()
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			res.err = fmt.Errorf("get own network namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(target); err != nil {
			// setns changes nothing when it fails; the thread is still
			// in its own namespace (if in doubt, it dies: still locked).
			if cur, cerr := netns.Get(); cerr == nil {
				if cur.Equal(orig) {
					runtime.UnlockOSThread()
				}
				cur.Close()
			}
			res.err = fmt.Errorf("join network namespace %s: %w", netnsPath, err)
			return
		}
		defer func() {
			if err := netns.Set(orig); err != nil {
				res.err = fmt.Errorf("restore network namespace: %w (after: %v)", err, res.err)
				return // the thread stays locked and dies with the goroutine
			}
			runtime.UnlockOSThread()
		}()
		defer func() {
			if p := recover(); p != nil {
				res = result{panicked: true, panicVal: p}
			}
		}()
		res.err = fn()
	}()
	r := <-done
	if r.panicked {
		panic(r.panicVal)
	}
	return r.err
}

// scratchNetnsWithTAP makes a network namespace of its own, holding only
// loopback and a persistent tap0, and returns it (the caller closes it;
// the namespace and its TAP go once nothing is in it): for a VM whose NIC
// must be a TAP's but must reach nothing (a live snapshot's helper VM).
func scratchNetnsWithTAP() (netns.NsHandle, error) {
	type result struct {
		ns  netns.NsHandle
		err error
	}
	done := make(chan result, 1)
	go func() {
		res := result{ns: -1}
		defer func() { done <- res }()
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			res.err = fmt.Errorf("get own network namespace: %w", err)
			return
		}
		defer orig.Close()
		ns, err := netns.New() // unshare: the thread is in it from here
		if err != nil {
			// Still locked: if the thread changed namespace, it dies.
			res.err = fmt.Errorf("new network namespace: %w", err)
			return
		}
		res.ns = ns
		if err := createTAP(); err != nil {
			res.err = err
		}
		if err := netns.Set(orig); err != nil {
			res.err = errors.Join(res.err, fmt.Errorf("back to the own network namespace: %w", err))
			return // locked: the thread dies with the goroutine
		}
		runtime.UnlockOSThread()
	}()
	res := <-done
	if res.err != nil {
		if res.ns >= 0 {
			res.ns.Close()
		}
		return -1, res.err
	}
	return res.ns, nil
}
