package nftrules

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/egress/netnstest"
)

// TestRedirectAndDrop wires two namespaces the test makes: "host" (Airlock's table, a proxy
// listener, a resolver socket, an unrelated service) and "guest" (a sandbox behind a veth whose
// default route is the host end). No packet leaves them.
func TestRedirectAndDrop(t *testing.T) {
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
