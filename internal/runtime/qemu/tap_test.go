package qemu

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/egress/netnstest"
	"github.com/airlockdev/airlock/internal/nldump"
)

// The test network: a "host" namespace holding the veth's host end with the
// gateway address, and a "sandbox" namespace (bind-mounted, as sandboxnet
// makes them) with eth0, its address and a default route. Both are the
// test's own; nothing touches the namespace the test runs in.
var (
	tapTestGateway = netip.MustParsePrefix("10.213.7.1/30")
	tapTestGuest   = netip.MustParsePrefix("10.213.7.2/30")
)

const tapTestHostIf = "alktap0"

// tapRequireRoot skips the test unless it runs as root; in CI (CI=true) it
// fails instead.
func tapRequireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("needs root (network namespaces, veths, TAP devices, tc); CI=true, so this is a failure")
	}
	t.Skip("needs root: makes network namespaces, a veth pair, a TAP device and tc filters")
}

// tapTestNet is a prepared sandbox network of the test's own.
type tapTestNet struct {
	path string   // the sandbox netns, bind-mounted
	host *os.File // the host netns
}

// newTAPBareNetns makes a bind-mounted network namespace with IPv6 off (as
// sandboxnet does) and only lo up; cleanup removes it.
func newTAPBareNetns(t *testing.T) string {
	t.Helper()
	f, err := netnstest.Make()
	if err != nil {
		t.Fatalf("make network namespace: %v", err)
	}
	defer f.Close()
	path := filepath.Join(t.TempDir(), "sandbox")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), path, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount network namespace: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", path, err)
		}
	})
	if err := inNetns(path, func() error { return tapSetupNetns() }); err != nil {
		t.Fatalf("set up sandbox netns: %v", err)
	}
	return path
}

// tapSetupNetns disables IPv6 in the calling thread's namespace (before any
// veth exists) and brings lo up.
func tapSetupNetns() error {
	if err := tapDisableIPv6("default"); err != nil {
		return err
	}
	if err := tapDisableIPv6("all"); err != nil {
		return err
	}
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	return netlink.LinkSetUp(lo)
}

// newTAPTestNet builds the two namespaces and the veth pair between them the
// way sandboxnet wires a sandbox. Cleanup deletes both namespaces and then
// checks that nothing (netns, veth, tap) is left.
func newTAPTestNet(t *testing.T) *tapTestNet {
	t.Helper()
	tapRequireRoot(t)
	before := tapOwnLinks(t)
	host, err := netnstest.Make()
	if err != nil {
		t.Fatalf("make host network namespace: %v", err)
	}
	n := &tapTestNet{host: host}
	t.Cleanup(func() {
		// Runs after the sandbox netns is unmounted (registered later):
		// the veth goes with the sandbox namespace, and tap0 with it.
		tapWaitNoLinks(t, n.host, "veth", "tuntap")
		n.host.Close()
		if after := tapOwnLinks(t); !slices.Equal(before, after) {
			t.Errorf("the test's own network namespace changed: links %v, then %v", before, after)
		}
	})
	if err := netnstest.Run(host, func() error { return tapSetupNetns() }); err != nil {
		t.Fatalf("set up host netns: %v", err)
	}
	n.path = newTAPBareNetns(t)

	sb, err := netns.GetFromPath(n.path)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	hh := n.handle(t)
	defer hh.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: tapTestHostIf}, PeerName: tapGuestIf, PeerNamespace: netlink.NsFd(int(sb))}
	if err := hh.LinkAdd(veth); err != nil {
		t.Fatalf("add veth: %v", err)
	}
	hl, err := hh.LinkByName(tapTestHostIf)
	if err != nil {
		t.Fatal(err)
	}
	if err := hh.AddrAdd(hl, &netlink.Addr{IPNet: tapPrefixNet(tapTestGateway)}); err != nil {
		t.Fatal(err)
	}
	if err := hh.LinkSetUp(hl); err != nil {
		t.Fatal(err)
	}
	n.readdress(t)
	return n
}

// handle returns a netlink handle in the host namespace.
func (n *tapTestNet) handle(t *testing.T) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandleAt(netns.NsHandle(n.host.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// readdress configures eth0 as sandboxnet does (again): address, up, default
// route.
func (n *tapTestNet) readdress(t *testing.T) {
	t.Helper()
	sh := tapSandboxHandle(t, n.path)
	defer sh.Close()
	eth, err := sh.LinkByName(tapGuestIf)
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.AddrReplace(eth, &netlink.Addr{IPNet: tapPrefixNet(tapTestGuest)}); err != nil {
		t.Fatal(err)
	}
	if err := sh.LinkSetUp(eth); err != nil {
		t.Fatal(err)
	}
	if err := sh.RouteReplace(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: tapTestGateway.Addr().AsSlice()}); err != nil {
		t.Fatal(err)
	}
}

func tapSandboxHandle(t *testing.T, path string) *netlink.Handle {
	t.Helper()
	ns, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	// A handle's sockets hold the namespace: closed even if the test
	// stops early (closing twice is harmless).
	t.Cleanup(h.Close)
	return h
}

func tapPrefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// tapOwnLinks lists the links of the test's own network namespace that
// these tests could leave there (their names): other packages' tests,
// running at the same time, add and remove links of their own.
func tapOwnLinks(t *testing.T) []string {
	t.Helper()
	links, err := nldump.Retry(netlink.LinkList)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range links {
		if n := l.Attrs().Name; n == tapTestHostIf || n == tapGuestIf || n == tapDevice {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// tapWaitNoLinks waits until the namespace ns holds no link of the given types:
// the kernel destroys a namespace (and the veth end inside) asynchronously
// after its last reference goes.
func tapWaitNoLinks(t *testing.T, ns *os.File, types ...string) {
	t.Helper()
	h, err := netlink.NewHandleAt(netns.NsHandle(ns.Fd()))
	if err != nil {
		t.Errorf("netlink in host netns: %v", err)
		return
	}
	defer h.Close()
	var left []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		links, err := nldump.Retry(h.LinkList)
		if err != nil {
			t.Errorf("list links: %v", err)
			return
		}
		left = left[:0]
		for _, l := range links {
			if slices.Contains(types, l.Type()) {
				left = append(left, l.Attrs().Name+" ("+l.Type()+")")
			}
		}
		if len(left) == 0 {
			return
		}
	}
	t.Errorf("left after cleanup: %v (the sandbox network namespace was not destroyed)", left)
}

// checkTAPAttached checks the namespace's state after attachTAP returned gl.
func checkTAPAttached(t *testing.T, path string, gl guestLink) {
	t.Helper()
	h := tapSandboxHandle(t, path)
	defer h.Close()
	eth, err := h.LinkByName(tapGuestIf)
	if err != nil {
		t.Fatal(err)
	}
	tap, err := h.LinkByName(tapDevice)
	if err != nil {
		t.Fatalf("no %s: %v", tapDevice, err)
	}
	want := guestLink{TAP: tapDevice, MAC: eth.Attrs().HardwareAddr, MTU: eth.Attrs().MTU}
	if gl.TAP != want.TAP || !bytes.Equal(gl.MAC, want.MAC) || gl.MTU != want.MTU {
		t.Errorf("attachTAP = %+v, want %+v", gl, want)
	}
	if tt, ok := tap.(*netlink.Tuntap); !ok || tt.Mode != netlink.TUNTAP_MODE_TAP || tt.Flags&netlink.TUNTAP_MULTI_QUEUE != 0 || tt.NonPersist {
		t.Errorf("%s is %#v, want a persistent single-queue TAP", tapDevice, tap)
	}
	if tap.Attrs().MTU != eth.Attrs().MTU {
		t.Errorf("%s MTU %d, %s MTU %d", tapDevice, tap.Attrs().MTU, tapGuestIf, eth.Attrs().MTU)
	}
	for _, l := range []netlink.Link{eth, tap} {
		if l.Attrs().Flags&net.FlagUp == 0 {
			t.Errorf("%s is down", l.Attrs().Name)
		}
	}
	if addrs, err := nldump.Retry(func() ([]netlink.Addr, error) { return h.AddrList(eth, netlink.FAMILY_V4) }); err != nil || len(addrs) != 0 {
		t.Errorf("%s keeps IPv4 addresses %v (%v)", tapGuestIf, addrs, err)
	}
	if routes, err := nldump.Retry(func() ([]netlink.Route, error) { return h.RouteList(nil, netlink.FAMILY_V4) }); err != nil || len(routes) != 0 {
		t.Errorf("the namespace keeps IPv4 routes %v (%v)", routes, err)
	}
	for _, p := range [][2]netlink.Link{{eth, tap}, {tap, eth}} {
		filters, err := nldump.Retry(func() ([]netlink.Filter, error) { return h.FilterList(p[0], tapIngressHandle) })
		if err != nil || !isOnlyTAPRedirect(filters, p[1].Attrs().Index) {
			t.Errorf("ingress filters of %s: %v (%v), want one redirect to %s", p[0].Attrs().Name, filters, err, p[1].Attrs().Name)
		}
	}
}

// openTAPAsQEMU attaches to the TAP as QEMU does (from inside the namespace, same
// flags, non-blocking) and returns it; cleanup closes it.
func openTAPAsQEMU(t *testing.T, path string) *os.File {
	t.Helper()
	fd := -1
	err := inNetns(path, func() error {
		var err error
		fd, err = unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		ifr, err := unix.NewIfreq(tapDevice)
		if err != nil {
			return err
		}
		ifr.SetUint16(tapFlags)
		return unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
	})
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		t.Fatalf("open %s as QEMU: %v", tapDevice, err)
	}
	f := os.NewFile(uintptr(fd), tapDevice)
	t.Cleanup(func() { f.Close() })
	return f
}

// tapVnetHdrLen is the size of struct virtio_net_hdr, which precedes every
// frame on a TAP opened with IFF_VNET_HDR (TUNSETVNETHDRSZ's default).
const tapVnetHdrLen = 10

func tapWriteFrame(t *testing.T, tap *os.File, frame []byte) {
	t.Helper()
	if _, err := tap.Write(append(make([]byte, tapVnetHdrLen), frame...)); err != nil {
		t.Fatalf("write to %s: %v", tapDevice, err)
	}
}

// tapReadFrame returns the first frame from the TAP that match accepts within
// wait, or nil.
func tapReadFrame(t *testing.T, tap *os.File, wait time.Duration, match func([]byte) bool) []byte {
	t.Helper()
	if err := tap.SetReadDeadline(time.Now().Add(wait)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65536)
	for {
		n, err := tap.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil
		}
		if err != nil {
			t.Fatalf("read %s: %v", tapDevice, err)
		}
		if n < tapVnetHdrLen+14 {
			continue
		}
		if frame := buf[tapVnetHdrLen:n]; match(frame) {
			return slices.Clone(frame)
		}
	}
}

// tapExchange writes frame to the TAP and returns the first frame match
// accepts, writing it again every 200ms as a guest's ARP or ping would
// (frames towards the TAP are dropped until the kernel has activated
// tap0's queue after the attach, asynchronously), for up to 5s.
func tapExchange(t *testing.T, tap *os.File, what string, frame []byte, match func([]byte) bool) []byte {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		tapWriteFrame(t, tap, frame)
		if reply := tapReadFrame(t, tap, 200*time.Millisecond, match); reply != nil {
			return reply
		}
	}
	t.Fatalf("no %s on %s", what, tapDevice)
	return nil
}

var tapBroadcast = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

func tapEthernet(dst, src net.HardwareAddr, typ uint16, payload []byte) []byte {
	f := append(append(slices.Clone([]byte(dst)), src...), 0, 0)
	binary.BigEndian.PutUint16(f[12:], typ)
	return append(f, payload...)
}

func tapARPRequest(mac net.HardwareAddr, ip, target netip.Addr) []byte {
	p := []byte{0, 1, 8, 0, 6, 4, 0, 1}
	p = append(p, mac...)
	p = append(p, ip.AsSlice()...)
	p = append(p, make([]byte, 6)...)
	p = append(p, target.AsSlice()...)
	return tapEthernet(tapBroadcast, mac, unix.ETH_P_ARP, p)
}

func tapChecksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}

func tapICMPEcho(dst, src net.HardwareAddr, from, to netip.Addr, id, seq uint16, data []byte) []byte {
	icmp := append([]byte{8, 0, 0, 0, 0, 0, 0, 0}, data...)
	binary.BigEndian.PutUint16(icmp[4:], id)
	binary.BigEndian.PutUint16(icmp[6:], seq)
	binary.BigEndian.PutUint16(icmp[2:], tapChecksum(icmp))
	ip := make([]byte, 20)
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(icmp)))
	ip[8] = 64 // TTL
	ip[9] = unix.IPPROTO_ICMP
	copy(ip[12:], from.AsSlice())
	copy(ip[16:], to.AsSlice())
	binary.BigEndian.PutUint16(ip[10:], tapChecksum(ip))
	return tapEthernet(dst, src, unix.ETH_P_IP, append(ip, icmp...))
}

// tapPlayGuest is the VM's side: from the TAP, with eth0's MAC and the guest
// address, it resolves the gateway by ARP and pings it.
func tapPlayGuest(t *testing.T, tap *os.File, mac net.HardwareAddr) {
	t.Helper()
	guest, gw := tapTestGuest.Addr(), tapTestGateway.Addr()
	reply := tapExchange(t, tap, "ARP reply from the gateway", tapARPRequest(mac, guest, gw), func(f []byte) bool {
		return binary.BigEndian.Uint16(f[12:]) == unix.ETH_P_ARP && len(f) >= 42 &&
			binary.BigEndian.Uint16(f[20:]) == 2 && bytes.Equal(f[28:32], gw.AsSlice()) &&
			bytes.Equal(f[0:6], mac) && bytes.Equal(f[38:42], guest.AsSlice())
	})
	gwMAC := net.HardwareAddr(reply[22:28])

	const id, seq = 0x4a4c, 7
	data := []byte("airlock tap test")
	echo := tapExchange(t, tap, "echo reply from the gateway", tapICMPEcho(gwMAC, mac, guest, gw, id, seq, data), func(f []byte) bool {
		if binary.BigEndian.Uint16(f[12:]) != unix.ETH_P_IP || len(f) < 14+20+8 {
			return false
		}
		ip := f[14:]
		icmp := ip[int(ip[0]&0xf)*4:]
		return ip[9] == unix.IPPROTO_ICMP && bytes.Equal(ip[12:16], gw.AsSlice()) && bytes.Equal(ip[16:20], guest.AsSlice()) &&
			icmp[0] == 0 && binary.BigEndian.Uint16(icmp[4:]) == id && binary.BigEndian.Uint16(icmp[6:]) == seq
	})
	if !bytes.Equal(echo[0:6], mac) || !bytes.Equal(echo[6:12], gwMAC) {
		t.Errorf("echo reply from %s to %s, want from %s to %s", net.HardwareAddr(echo[6:12]), net.HardwareAddr(echo[0:6]), gwMAC, mac)
	}
	if ip := echo[14:]; !bytes.HasSuffix(ip, data) {
		t.Errorf("echo reply does not carry the request's data: % x", ip)
	}
}

// TestAttachTAP attaches, perturbs what a crash, a repair by sandboxnet or
// a suspend could leave, attaches again, and plays the guest over the TAP:
// ARP for the gateway and a ping of it, through eth0 and the host's veth.
func TestAttachTAP(t *testing.T) {
	tapRequireRoot(t)
	tests := []struct {
		name string
		// perturb changes the namespace between the two calls.
		perturb func(t *testing.T, n *tapTestNet, h *netlink.Handle)
		// attached: the guest holds the TAP during the second call (a
		// running VM).
		attached bool
	}{
		{name: "once"},
		{name: "again", perturb: func(*testing.T, *tapTestNet, *netlink.Handle) {}},
		{name: "again while QEMU holds the TAP", perturb: func(*testing.T, *tapTestNet, *netlink.Handle) {}, attached: true},
		{name: "TAP gone", perturb: func(t *testing.T, _ *tapTestNet, h *netlink.Handle) {
			tapDelLink(t, h, tapDevice)
		}},
		{name: "eth0 readdressed", perturb: func(t *testing.T, n *tapTestNet, _ *netlink.Handle) {
			n.readdress(t)
		}},
		{name: "eth0 redirect gone", perturb: func(t *testing.T, _ *tapTestNet, h *netlink.Handle) {
			tapDelIngress(t, h, tapGuestIf)
		}},
		{name: "foreign filter on tap0", perturb: func(t *testing.T, _ *tapTestNet, h *netlink.Handle) {
			tap, err := h.LinkByName(tapDevice)
			if err != nil {
				t.Fatal(err)
			}
			// A second filter, mirroring every frame back to tap0.
			f := &netlink.U32{
				FilterAttrs: netlink.FilterAttrs{LinkIndex: tap.Attrs().Index, Parent: tapIngressHandle, Priority: 2, Protocol: unix.ETH_P_ALL},
				Actions: []netlink.Action{&netlink.MirredAction{
					ActionAttrs:  netlink.ActionAttrs{Action: netlink.TC_ACT_PIPE},
					MirredAction: netlink.TCA_EGRESS_MIRROR,
					Ifindex:      tap.Attrs().Index,
				}},
			}
			if err := h.FilterAdd(f); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "tap0 is a TUN", perturb: func(t *testing.T, n *tapTestNet, h *netlink.Handle) {
			tapDelLink(t, h, tapDevice)
			err := inNetns(n.path, func() error {
				return netlink.LinkAdd(&netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: tapDevice}, Mode: netlink.TUNTAP_MODE_TUN})
			})
			if err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n := newTAPTestNet(t)
			ctx := context.Background()
			first, err := attachTAP(ctx, n.path)
			if err != nil {
				t.Fatalf("attachTAP: %v", err)
			}
			checkTAPAttached(t, n.path, first)
			gl := first
			var tap *os.File
			if tc.perturb != nil {
				if tc.attached {
					tap = openTAPAsQEMU(t, n.path)
				}
				h := tapSandboxHandle(t, n.path)
				tc.perturb(t, n, h)
				h.Close()
				if gl, err = attachTAP(ctx, n.path); err != nil {
					t.Fatalf("attachTAP again: %v", err)
				}
				if gl.TAP != first.TAP || !bytes.Equal(gl.MAC, first.MAC) || gl.MTU != first.MTU {
					t.Errorf("attachTAP again = %+v, first %+v", gl, first)
				}
				checkTAPAttached(t, n.path, gl)
			}
			if tap == nil {
				tap = openTAPAsQEMU(t, n.path)
			}
			tapPlayGuest(t, tap, gl.MAC)
		})
	}
}

func tapDelLink(t *testing.T, h *netlink.Handle, name string) {
	t.Helper()
	l, err := h.LinkByName(name)
	if err == nil {
		err = h.LinkDel(l)
	}
	if err != nil {
		t.Fatalf("delete %s: %v", name, err)
	}
}

func tapDelIngress(t *testing.T, h *netlink.Handle, name string) {
	t.Helper()
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	q := &netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index, Handle: tapIngressHandle, Parent: netlink.HANDLE_INGRESS}}
	if err := h.QdiscDel(q); err != nil {
		t.Fatalf("delete ingress qdisc of %s: %v", name, err)
	}
}

// TestAttachTAPErrors: a namespace that is not a prepared sandbox network
// is refused clearly, and a call that fails leaves the namespace as it was
// (no tap0, no ingress qdisc, eth0 keeps its address and route).
func TestAttachTAPErrors(t *testing.T) {
	tapRequireRoot(t)
	prepared := func(t *testing.T) string { return newTAPTestNet(t).path }
	tests := []struct {
		name    string
		path    func(t *testing.T) string
		cancel  bool
		wantErr string
	}{
		{name: "no eth0", path: newTAPBareNetns, wantErr: "no eth0"},
		{name: "no netns", path: func(t *testing.T) string { return filepath.Join(t.TempDir(), "missing") }, wantErr: "open network namespace"},
		{name: "eth0 without MAC", path: func(t *testing.T) string {
			path := newTAPBareNetns(t)
			err := inNetns(path, func() error {
				return netlink.LinkAdd(&netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: tapGuestIf}, Mode: netlink.TUNTAP_MODE_TUN})
			})
			if err != nil {
				t.Fatal(err)
			}
			return path
		}, wantErr: "no Ethernet address"},
		{name: "cancelled", path: prepared, cancel: true, wantErr: context.Canceled.Error()},
		// Fails after making tap0 (a TAP's largest MTU is below a veth's):
		// the undo removes it.
		{name: "eth0 MTU too big for a TAP", path: func(t *testing.T) string {
			path := prepared(t)
			h := tapSandboxHandle(t, path)
			eth, err := h.LinkByName(tapGuestIf)
			if err != nil {
				t.Fatal(err)
			}
			if err := h.LinkSetMTU(eth, 65535); err != nil {
				t.Fatal(err)
			}
			return path
		}, wantErr: "MTU 65535 on tap0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if tc.cancel {
				cancel()
			}
			_, err := attachTAP(ctx, path)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("attachTAP = %v, want an error containing %q", err, tc.wantErr)
			}
			if _, serr := os.Stat(path); serr != nil {
				return
			}
			h := tapSandboxHandle(t, path)
			if l, err := h.LinkByName(tapDevice); err == nil {
				t.Errorf("a failed attachTAP left %s (%s)", tapDevice, l.Type())
			}
			eth, err := h.LinkByName(tapGuestIf)
			if err != nil {
				return
			}
			if qs, err := nldump.Retry(func() ([]netlink.Qdisc, error) { return h.QdiscList(eth) }); err != nil || slices.ContainsFunc(qs, func(q netlink.Qdisc) bool { return q.Type() == "ingress" }) {
				t.Errorf("a failed attachTAP left qdiscs %v on %s (%v)", qs, tapGuestIf, err)
			}
			if eth.Attrs().HardwareAddr == nil {
				return // not a prepared eth0
			}
			addrs, err := nldump.Retry(func() ([]netlink.Addr, error) { return h.AddrList(eth, netlink.FAMILY_V4) })
			if err != nil || len(addrs) != 1 || addrs[0].IPNet.String() != tapTestGuest.String() {
				t.Errorf("after a failed attachTAP, %s has addresses %v (%v), want %s", tapGuestIf, addrs, err, tapTestGuest)
			}
			routes, err := nldump.Retry(func() ([]netlink.Route, error) { return h.RouteList(eth, netlink.FAMILY_V4) })
			if err != nil || !slices.ContainsFunc(routes, func(r netlink.Route) bool { return tapIsDefaultRoute(r) && r.Gw.Equal(tapTestGateway.Addr().AsSlice()) }) {
				t.Errorf("after a failed attachTAP, routes via %s are %v (%v), want a default route via %s", tapGuestIf, routes, err, tapTestGateway.Addr())
			}
		})
	}
}

// tapIsDefaultRoute reports whether r is a default route.
func tapIsDefaultRoute(r netlink.Route) bool {
	if r.Dst == nil {
		return true
	}
	ones, _ := r.Dst.Mask.Size()
	return ones == 0
}

// tapThreadNetns is the identity of the calling thread's network namespace.
func tapThreadNetns(t *testing.T) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestInNetns: fn runs in the namespace, its error comes back, the caller
// stays where it was, and a namespace that cannot be opened is an error
// without running fn.
func TestInNetns(t *testing.T) {
	tapRequireRoot(t)
	path := newTAPBareNetns(t)
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	errFn := errors.New("fn failed")
	tests := []struct {
		name    string
		path    string
		fnErr   error
		wantErr error
		wantRun bool
	}{
		{name: "runs in netns", path: path, wantRun: true},
		{name: "returns fn's error", path: path, fnErr: errFn, wantErr: errFn, wantRun: true},
		{name: "missing netns", path: filepath.Join(t.TempDir(), "missing"), wantErr: os.ErrNotExist},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The goroutine stays on its thread, so comparing the thread's
			// namespace before and after means something.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			own := tapThreadNetns(t)
			ran := false
			err := inNetns(tc.path, func() error {
				ran = true
				if got := tapThreadNetns(t); got != st.Ino {
					t.Errorf("fn runs in netns %d, want %d", got, st.Ino)
				}
				return tc.fnErr
			})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Errorf("inNetns = %v, want %v", err, tc.wantErr)
			}
			if ran != tc.wantRun {
				t.Errorf("fn ran: %v, want %v", ran, tc.wantRun)
			}
			if got := tapThreadNetns(t); got != own {
				t.Errorf("the caller's thread moved from netns %d to %d", own, got)
			}
		})
	}
	t.Run("panic", func(t *testing.T) {
		defer func() {
			if p := recover(); p != "boom" {
				t.Errorf("recovered %v, want the panic of fn", p)
			}
		}()
		_ = inNetns(path, func() error { panic("boom") })
		t.Error("inNetns returned after fn panicked")
	})
	t.Run("goexit", func(t *testing.T) {
		var err error
		done := make(chan struct{})
		go func() {
			defer close(done)
			err = inNetns(path, func() error { runtime.Goexit(); return nil })
		}()
		<-done
		if !errors.Is(err, errNetnsFnExited) {
			t.Errorf("inNetns = %v, want %v", err, errNetnsFnExited)
		}
	})
}

// TestAttachTAPQEMU starts QEMU inside the namespace (inNetns around
// exec.Cmd.Start, as the driver does) with -netdev tap,ifname=tap0: QEMU
// attaches to the persistent TAP (it gets a carrier) with a vnet header, and
// attaching again while QEMU holds it changes nothing.
func TestAttachTAPQEMU(t *testing.T) {
	airtest.SkipShort(t, "QEMU")
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and no QEMU: %v", err)
		}
		t.Skipf("no QEMU: %v", err)
	}
	n := newTAPTestNet(t)
	ctx := context.Background()
	gl, err := attachTAP(ctx, n.path)
	if err != nil {
		t.Fatalf("attachTAP: %v", err)
	}
	cmd := exec.Command(qemu, "-machine", "none", "-S", "-nodefaults", "-display", "none", "-monitor", "none", "-serial", "none",
		"-netdev", "tap,id=net0,ifname="+gl.TAP+",script=no,downscript=no")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := inNetns(n.path, cmd.Start); err != nil {
		t.Fatalf("start QEMU in the namespace: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	h := tapSandboxHandle(t, n.path)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("QEMU exited: %v\n%s", err, out.String())
		default:
		}
		l, err := h.LinkByName(tapDevice)
		if err != nil {
			t.Fatal(err)
		}
		if l.Attrs().RawFlags&unix.IFF_LOWER_UP != 0 {
			if tt, ok := l.(*netlink.Tuntap); !ok || tt.Flags&netlink.TUNTAP_VNET_HDR == 0 {
				t.Errorf("QEMU attached without a vnet header: %#v", l)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("QEMU did not attach to %s\n%s", tapDevice, out.String())
		}
	}
	again, err := attachTAP(ctx, n.path)
	if err != nil {
		t.Fatalf("attachTAP while QEMU runs: %v", err)
	}
	checkTAPAttached(t, n.path, again)
	if l, err := h.LinkByName(tapDevice); err != nil || l.Attrs().RawFlags&unix.IFF_LOWER_UP == 0 {
		t.Errorf("QEMU lost %s after attachTAP again (%v)", tapDevice, err)
	}
}
