package nftrules

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/egress/netnstest"
)

// TestRedirectAndDrop wires two namespaces the test makes: "host" (Airlock's table, a proxy
// listener, a resolver socket, an unrelated service) and "guest" (a sandbox behind a veth whose
// default route is the host end). No packet leaves them.
func TestRedirectAndDrop(t *testing.T) {
	airtest.SkipShort(t, "traffic through the rules between two network namespaces (17 s)")
	host, guest := netnstest.New(t), netnstest.New(t)
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2's ip to make the test veth")
	}
	const (
		hostIf, guestIf = "airtest-h", "airtest-g"
		service         = 7070
	)
	hostAddr := netip.MustParseAddr("10.231.0.1")
	t.Cleanup(func() {
		// Runs last: the test's own (the machine's) namespace never saw the veth.
		for _, name := range []string{hostIf, guestIf} {
			if _, err := net.InterfaceByName(name); err == nil {
				t.Errorf("interface %s exists outside the test's namespaces", name)
			}
		}
	})
	host.IP(t, nil, "link", "set", "lo", "up")
	host.IP(t, []*os.File{guest.F}, "link", "add", hostIf, "type", "veth", "peer", "name", guestIf, "netns", "/proc/self/fd/3")
	host.IP(t, nil, "addr", "add", hostAddr.String()+"/30", "dev", hostIf)
	host.IP(t, nil, "link", "set", hostIf, "up")
	guest.IP(t, nil, "link", "set", "lo", "up")
	guest.IP(t, nil, "addr", "add", "10.231.0.2/30", "dev", guestIf)
	guest.IP(t, nil, "link", "set", guestIf, "up")
	guest.IP(t, nil, "route", "add", "default", "via", hostAddr.String())
	// IPv6 too: the redirect works for both families of the inet table, and neighbour discovery
	// must pass the input chain.
	hostAddr6 := netip.MustParseAddr("fd00:231::1")
	host.IP(t, nil, "addr", "add", hostAddr6.String()+"/64", "dev", hostIf, "nodad")
	guest.IP(t, nil, "addr", "add", "fd00:231::2/64", "dev", guestIf, "nodad")
	guest.IP(t, nil, "-6", "route", "add", "default", "via", hostAddr6.String())

	c := host.Conn(t)
	if err := Ensure(c, testCfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Remove(c) })

	var proxy, proxy6, other *net.TCPListener
	var resolver *net.UDPConn
	host.Do(t, func() {
		var err error
		if proxy, err = net.ListenTCP("tcp4", tcpAddr(hostAddr, testCfg.ProxyPort)); err != nil {
			t.Error(err)
			return
		}
		if proxy6, err = net.ListenTCP("tcp6", tcpAddr(hostAddr6, testCfg.ProxyPort)); err != nil {
			t.Error(err)
			return
		}
		if other, err = net.ListenTCP("tcp4", tcpAddr(hostAddr, service)); err != nil {
			t.Error(err)
			return
		}
		if resolver, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(hostAddr, testCfg.ResolverPort))); err != nil {
			t.Error(err)
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	t.Cleanup(func() { proxy.Close(); proxy6.Close(); other.Close(); resolver.Close() })

	dial := func(dst string) (net.Conn, error) {
		var conn net.Conn
		var err error
		guest.Do(t, func() { conn, err = net.DialTimeout("tcp", dst, 750*time.Millisecond) })
		return conn, err
	}
	// accepted waits for one connection on l and returns its original destination.
	accepted := func(l *net.TCPListener) (netip.AddrPort, error) {
		l.SetDeadline(time.Now().Add(2 * time.Second))
		conn, err := l.AcceptTCP()
		if err != nil {
			return netip.AddrPort{}, err
		}
		defer conn.Close()
		return OriginalDst(conn)
	}

	// Control: before the guest's interface is in the set, the host's service is reachable.
	if conn, err := dial(fmt.Sprintf("%s:%d", hostAddr, service)); err != nil {
		t.Fatalf("control: guest cannot reach the service before AddSandbox: %v", err)
	} else {
		conn.Close()
		if _, err := accepted(other); err != nil {
			t.Fatal(err)
		}
	}

	// The proxy's port is closed to every interface but the sandboxes': before AddSandbox the
	// guest is an ordinary neighbour and its packets to that port are dropped.
	if conn, err := dial(fmt.Sprintf("%s:%d", hostAddr, testCfg.ProxyPort)); err == nil {
		conn.Close()
		t.Fatal("a non-sandbox interface reached the proxy port")
	}

	if err := AddSandbox(c, hostIf); err != nil {
		t.Fatal(err)
	}

	// Every TCP port lands on the proxy, the host's own addresses and ports included (the proxy
	// refuses those by policy); the service itself never sees the connection.
	for _, dst := range []string{
		fmt.Sprintf("%s:80", hostAddr), "203.0.113.5:443", "203.0.113.5:80", "203.0.113.5:22", "198.51.100.7:8443",
		fmt.Sprintf("%s:%d", hostAddr, service), fmt.Sprintf("%s:22", hostAddr),
		fmt.Sprintf("[%s]:443", hostAddr6), "[2001:db8::5]:443", "[2001:db8::5]:80", "[2001:db8::5]:5432",
	} {
		l := proxy
		if netip.MustParseAddrPort(dst).Addr().Is6() {
			l = proxy6
		}
		conn, err := dial(dst)
		if err != nil {
			t.Errorf("guest → %s: %v", dst, err)
			continue
		}
		orig, err := accepted(l)
		conn.Close()
		if err != nil {
			t.Errorf("guest → %s: proxy: %v", dst, err)
		} else if orig.String() != dst {
			t.Errorf("guest → %s: OriginalDst = %s", dst, orig)
		}
	}

	// DNS over UDP to any server lands on the resolver; the answer comes back as from that server.
	guest.Do(t, func() {
		u, err := net.Dial("udp4", "203.0.113.5:53")
		if err != nil {
			t.Error(err)
			return
		}
		defer u.Close()
		if _, err := u.Write([]byte("query")); err != nil {
			t.Error(err)
			return
		}
		buf := make([]byte, 64)
		resolver.SetDeadline(time.Now().Add(2 * time.Second))
		n, from, err := resolver.ReadFromUDPAddrPort(buf)
		if err != nil || string(buf[:n]) != "query" {
			t.Errorf("resolver read %q, %v", buf[:n], err)
			return
		}
		if _, err := resolver.WriteToUDPAddrPort([]byte("answer"), from); err != nil {
			t.Error(err)
			return
		}
		u.SetDeadline(time.Now().Add(2 * time.Second))
		if n, err = u.Read(buf); err != nil || string(buf[:n]) != "answer" {
			t.Errorf("guest read %q, %v", buf[:n], err)
		}
	})

	other.SetDeadline(time.Now().Add(100 * time.Millisecond))
	if conn, err := other.Accept(); err == nil {
		conn.Close()
		t.Error("the service accepted a connection from the sandbox")
	}

	// The proxy's own port dialled directly is not a redirected connection (the redirect leaves
	// the tuple as it was, so conntrack marks no DNAT): dropped.
	for _, dst := range []string{fmt.Sprintf("%s:%d", hostAddr, testCfg.ProxyPort), fmt.Sprintf("[%s]:%d", hostAddr6, testCfg.ProxyPort)} {
		if conn, err := dial(dst); err == nil {
			conn.Close()
			t.Errorf("guest → %s connected, want dropped", dst)
		} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
			t.Errorf("guest → %s: %v, want a timeout (dropped)", dst, err)
		}
	}

	// UDP other than DNS is dropped: to the host's own UDP service and to the resolver's port
	// when not reached through the redirect.
	var udpService *net.UDPConn
	host.Do(t, func() {
		var err error
		udpService, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(hostAddr, service)))
		if err != nil {
			t.Error(err)
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	defer udpService.Close()
	for _, dst := range []struct {
		addr string
		recv *net.UDPConn
	}{
		{fmt.Sprintf("%s:%d", hostAddr, service), udpService},
		{fmt.Sprintf("%s:%d", hostAddr, testCfg.ResolverPort), resolver},
	} {
		guest.Do(t, func() {
			u, err := net.Dial("udp4", dst.addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer u.Close()
			_, _ = u.Write([]byte("leak"))
		})
		buf := make([]byte, 64)
		dst.recv.SetDeadline(time.Now().Add(300 * time.Millisecond))
		if n, _, err := dst.recv.ReadFromUDPAddrPort(buf); err == nil {
			t.Errorf("guest → udp %s: the host received %q, want dropped", dst.addr, buf[:n])
		}
	}

	testSpoofedSources(t, host, guest, c, proxy, proxy6, resolver)

	// Out of the set, the guest is an ordinary peer again.
	if err := RemoveSandbox(c, hostIf); err != nil {
		t.Fatal(err)
	}
	if conn, err := dial(fmt.Sprintf("%s:%d", hostAddr, service)); err != nil {
		t.Errorf("after RemoveSandbox: %v", err)
	} else {
		conn.Close()
	}
}

// testSpoofedSources: a guest (root in its namespace) that sends from an address that is not its
// own reaches neither the resolver nor the proxy, whether the forged address is another
// sandbox's (routed through another sandbox interface) or any other (routed out of the host's
// default route): the antispoof chain drops it before the redirect. Its real addresses still
// work. The kernel's own reverse-path filter is turned off in the host namespace, so the drop
// is the table's: a control with the antispoof rule deleted shows the forged packet arriving.
func testSpoofedSources(t *testing.T, host, guest *netnstest.Netns, c *nftables.Conn, proxy, proxy6 *net.TCPListener, resolver *net.UDPConn) {
	const (
		hostIf           = "airtest-h"
		otherH, otherG   = "airtest-h2", "airtest-g2"
		uplinkA, uplinkB = "airtest-ua", "airtest-ub"
	)
	// Sandbox B: another veth in the set, whose guest end is 10.231.0.6 / fd00:232::6.
	other := netnstest.New(t)
	host.IP(t, []*os.File{other.F}, "link", "add", otherH, "type", "veth", "peer", "name", otherG, "netns", "/proc/self/fd/3")
	host.IP(t, nil, "addr", "add", "10.231.0.5/30", "dev", otherH)
	host.IP(t, nil, "addr", "add", "fd00:232::5/64", "dev", otherH, "nodad")
	host.IP(t, nil, "link", "set", otherH, "up")
	other.IP(t, nil, "link", "set", otherG, "up")
	if err := AddSandbox(c, otherH); err != nil {
		t.Fatal(err)
	}
	// The host's default routes, through an uplink that is no sandbox: a forged address of the
	// internet routes back, only not through the guest's interface.
	host.IP(t, nil, "link", "add", uplinkA, "type", "veth", "peer", "name", uplinkB)
	host.IP(t, nil, "addr", "add", "192.0.2.1/24", "dev", uplinkA)
	host.IP(t, nil, "addr", "add", "2001:db8:ffff::1/64", "dev", uplinkA, "nodad")
	host.IP(t, nil, "link", "set", uplinkA, "up")
	host.IP(t, nil, "link", "set", uplinkB, "up")
	host.IP(t, nil, "route", "add", "default", "via", "192.0.2.2")
	host.IP(t, nil, "-6", "route", "add", "default", "via", "2001:db8:ffff::2")
	host.Do(t, func() {
		for _, dev := range []string{"all", "default", hostIf, otherH, uplinkA} {
			if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+dev+"/rp_filter", []byte("0"), 0); err != nil {
				t.Errorf("rp_filter off on %s: %v", dev, err)
			}
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	// Neighbours that answer nothing but need no resolution, so that whatever the host sends to
	// a forged address really leaves (and is seen by the capture below).
	host.IP(t, nil, "neigh", "add", "192.0.2.2", "lladdr", "02:00:00:00:00:02", "dev", uplinkA, "nud", "permanent")
	host.IP(t, nil, "neigh", "add", "2001:db8:ffff::2", "lladdr", "02:00:00:00:00:02", "dev", uplinkA, "nud", "permanent")
	host.IP(t, nil, "neigh", "add", "10.231.0.6", "lladdr", "02:00:00:00:00:06", "dev", otherH, "nud", "permanent")
	host.IP(t, nil, "neigh", "add", "fd00:232::6", "lladdr", "02:00:00:00:00:06", "dev", otherH, "nud", "permanent")
	// A packet socket on every interface of the host namespace: it sees what the host sends.
	var capture int
	host.Do(t, func() {
		var err error
		capture, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			t.Error(err)
			return
		}
		tv := unix.NsecToTimeval((300 * time.Millisecond).Nanoseconds())
		if err := unix.SetsockoptTimeval(capture, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			t.Error(err)
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	defer unix.Close(capture)
	// sent reports whether the host sent anything to dst since the last call (it reads until the
	// capture has been quiet for 300 ms).
	sent := func(dst netip.Addr) bool {
		seen := false
		buf := make([]byte, 2048)
		for {
			n, from, err := unix.Recvfrom(capture, buf, 0)
			if err != nil {
				return seen
			}
			ll, ok := from.(*unix.SockaddrLinklayer)
			if !ok || ll.Pkttype != unix.PACKET_OUTGOING || n < 1 {
				continue
			}
			var d netip.Addr
			switch pkt := buf[:n]; pkt[0] >> 4 {
			case 4:
				if n >= 20 {
					d = netip.AddrFrom4([4]byte(pkt[16:20]))
				}
			case 6:
				if n >= 40 {
					d = netip.AddrFrom16([16]byte(pkt[24:40]))
				}
			}
			if d == dst {
				seen = true
			}
		}
	}

	spoofed := []netip.Addr{
		netip.MustParseAddr("10.231.0.6"),    // sandbox B's address
		netip.MustParseAddr("198.51.100.77"), // any address: routed out of the default route
		netip.MustParseAddr("10.231.0.5"),    // the host's end of B's veth
		netip.MustParseAddr("fd00:232::6"),   // sandbox B's IPv6 address
		netip.MustParseAddr("2001:db8:77::7"),
	}
	// The control's own forged addresses: the host keeps resending its SYN-ACKs to them for a
	// while, which must not count against the addresses checked after it.
	controlSpoofed := []netip.Addr{netip.MustParseAddr("198.51.100.78"), netip.MustParseAddr("2001:db8:77::8")}
	for _, a := range append(slices.Clone(spoofed), controlSpoofed...) {
		if a.Is4() {
			guest.IP(t, nil, "addr", "add", a.String()+"/32", "dev", "airtest-g")
		} else {
			guest.IP(t, nil, "addr", "add", a.String()+"/128", "dev", "airtest-g", "nodad")
		}
	}

	hostAddr6 := netip.MustParseAddr("fd00:231::1")
	var resolver6 *net.UDPConn
	var err error
	host.Do(t, func() {
		resolver6, err = net.ListenUDP("udp6", net.UDPAddrFromAddrPort(netip.AddrPortFrom(hostAddr6, testCfg.ResolverPort)))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer resolver6.Close()

	// udpFrom sends a DNS-port datagram from src; it reports whether the resolver received it,
	// and answers it as Airlock's resolver would answer an unknown source before the fix.
	udpFrom := func(src netip.Addr, dst string) bool {
		guest.Do(t, func() {
			d := net.Dialer{LocalAddr: net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0))}
			u, err := d.Dial("udp", dst)
			if err != nil {
				t.Errorf("udp from %s: %v", src, err)
				return
			}
			defer u.Close()
			_, _ = u.Write([]byte("spoof"))
		})
		buf := make([]byte, 64)
		r := resolver
		if src.Is6() {
			r = resolver6
		}
		r.SetDeadline(time.Now().Add(300 * time.Millisecond))
		n, from, err := r.ReadFromUDPAddrPort(buf)
		if err != nil {
			return false
		}
		if string(buf[:n]) != "spoof" || from.Addr().Unmap() != src {
			t.Errorf("resolver read %q from %s, want %q from %s", buf[:n], from, "spoof", src)
		}
		_, _ = r.WriteToUDPAddrPort([]byte("refused"), from)
		return true
	}
	// tcpFrom dials dst from src; it reports whether the proxy accepted the connection.
	tcpFrom := func(src netip.Addr, dst string) bool {
		var conn net.Conn
		var err error
		guest.Do(t, func() {
			d := net.Dialer{Timeout: 500 * time.Millisecond, LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))}
			conn, err = d.Dial("tcp", dst)
		})
		if err == nil {
			conn.Close()
		}
		l := proxy
		if src.Is6() {
			l = proxy6
		}
		l.SetDeadline(time.Now().Add(200 * time.Millisecond))
		a, aerr := l.Accept()
		if aerr == nil {
			a.Close()
		}
		return err == nil || aerr == nil
	}
	dnsDst := func(src netip.Addr) string {
		if src.Is6() {
			return "[2001:db8::5]:53"
		}
		return "203.0.113.5:53"
	}
	webDst := func(src netip.Addr) string {
		if src.Is6() {
			return "[2001:db8::5]:80"
		}
		return "203.0.113.5:80"
	}

	// Control: without the antispoof rule, a forged source reaches the resolver (so the drop
	// below is the table's, not the kernel's). Ensure puts the rule back.
	tb := &nftables.Table{Family: nftables.TableFamilyINet, Name: TableName}
	rules, err := c.GetRules(tb, &nftables.Chain{Name: AntispoofName, Table: tb})
	if err != nil || len(rules) == 0 {
		t.Fatalf("antispoof rules: %v, %v", rules, err)
	}
	if err := c.DelRule(rules[0]); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	sent(netip.Addr{}) // drain
	for _, src := range controlSpoofed {
		if !udpFrom(src, dnsDst(src)) {
			t.Errorf("control: without the antispoof rule, forged %s did not reach the resolver either", src)
		}
		if !sent(src) {
			t.Errorf("control: without the antispoof rule, the resolver's reply to forged %s was not seen leaving", src)
		}
		tcpFrom(src, webDst(src)) // the handshake cannot complete, but the host answers the SYN
		if !sent(src) {
			t.Errorf("control: without the antispoof rule, no SYN-ACK to forged %s was seen leaving", src)
		}
	}
	if err := Ensure(c, testCfg); err != nil {
		t.Fatal(err)
	}

	for _, src := range spoofed {
		if udpFrom(src, dnsDst(src)) {
			t.Errorf("udp from forged %s → %s reached the resolver", src, dnsDst(src))
		}
		if tcpFrom(src, webDst(src)) {
			t.Errorf("tcp from forged %s → %s reached the proxy", src, webDst(src))
		}
		if sent(src) {
			t.Errorf("the host sent a packet to forged %s", src)
		}
	}
	// The guest's real addresses still work, on both protocols and families.
	for _, src := range []netip.Addr{netip.MustParseAddr("10.231.0.2"), netip.MustParseAddr("fd00:231::2")} {
		if !udpFrom(src, dnsDst(src)) {
			t.Errorf("udp from the guest's own %s did not reach the resolver", src)
		}
		if !tcpFrom(src, webDst(src)) {
			t.Errorf("tcp from the guest's own %s did not reach the proxy", src)
		}
	}
	for _, a := range append(spoofed, controlSpoofed...) {
		guest.IP(t, nil, "addr", "del", a.String(), "dev", "airtest-g")
	}
	if err := RemoveSandbox(c, otherH); err != nil {
		t.Fatal(err)
	}
}

// htons is the network-order value of v as the host reads it.
func htons(v uint16) uint16 { return binary.NativeEndian.Uint16(binary.BigEndian.AppendUint16(nil, v)) }

func tcpAddr(a netip.Addr, port uint16) *net.TCPAddr {
	return net.TCPAddrFromAddrPort(netip.AddrPortFrom(a, port))
}

// TestInterfacePrefixFailsClosed: with an interface prefix, a guest whose host-side interface
// has the prefix but is not in the set reaches nothing on the host (TCP or UDP); another
// interface stays ordinary host traffic.
func TestInterfacePrefixFailsClosed(t *testing.T) {
	host, guest := netnstest.New(t), netnstest.New(t)
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2's ip to make the test veth")
	}
	const (
		hostIf, guestIf = "airtest-h", "airtest-g"
		service         = 7070
	)
	hostAddr := netip.MustParseAddr("10.231.0.1")
	host.IP(t, nil, "link", "set", "lo", "up")
	host.IP(t, []*os.File{guest.F}, "link", "add", hostIf, "type", "veth", "peer", "name", guestIf, "netns", "/proc/self/fd/3")
	host.IP(t, nil, "addr", "add", hostAddr.String()+"/30", "dev", hostIf)
	host.IP(t, nil, "link", "set", hostIf, "up")
	guest.IP(t, nil, "link", "set", "lo", "up")
	guest.IP(t, nil, "addr", "add", "10.231.0.2/30", "dev", guestIf)
	guest.IP(t, nil, "link", "set", guestIf, "up")

	var tcp *net.TCPListener
	var udp *net.UDPConn
	host.Do(t, func() {
		var err error
		if tcp, err = net.ListenTCP("tcp4", tcpAddr(hostAddr, service)); err != nil {
			t.Error(err)
			return
		}
		if udp, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(hostAddr, service))); err != nil {
			t.Error(err)
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	t.Cleanup(func() { tcp.Close(); udp.Close() })
	dst := netip.AddrPortFrom(hostAddr, service).String()
	probe := func() (tcpErr error, udpGot bool) {
		guest.Do(t, func() {
			var conn net.Conn
			if conn, tcpErr = net.DialTimeout("tcp", dst, 750*time.Millisecond); tcpErr == nil {
				conn.Close()
			}
			if u, err := net.Dial("udp4", dst); err == nil {
				_, _ = u.Write([]byte("leak"))
				u.Close()
			}
		})
		buf := make([]byte, 16)
		udp.SetDeadline(time.Now().Add(300 * time.Millisecond))
		_, _, err := udp.ReadFromUDPAddrPort(buf)
		return tcpErr, err == nil
	}

	c := host.Conn(t)
	t.Cleanup(func() { Remove(c) })
	for _, tc := range []struct {
		prefix string
		reach  bool
	}{
		{"", true},          // no guard: an interface out of the set is ordinary traffic
		{"other-", true},    // a guard for other names
		{"airtest-", false}, // the guard covers it
	} {
		cfg := testCfg
		cfg.InterfacePrefix = tc.prefix
		if err := Ensure(c, cfg); err != nil {
			t.Fatal(err)
		}
		if err := Check(c, cfg); err != nil {
			t.Fatal(err)
		}
		tcpErr, udpGot := probe()
		if (tcpErr == nil) != tc.reach || udpGot != tc.reach {
			t.Errorf("prefix %q: TCP err %v, UDP received %v; want reachable %v", tc.prefix, tcpErr, udpGot, tc.reach)
		}
	}
	if err := Ensure(c, Config{ProxyPort: 1, ResolverPort: 2, InterfacePrefix: "bad name"}); err == nil {
		t.Error("Ensure accepted an invalid interface prefix")
	}
}
