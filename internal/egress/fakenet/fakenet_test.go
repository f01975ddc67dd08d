package fakenet

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"

	"github.com/airlockdev/airlock/internal/egress/netnstest"
	"github.com/airlockdev/airlock/internal/nldump"
)

var (
	allowedAddr = netip.MustParseAddr("192.0.2.10")
	otherAddr   = netip.MustParseAddr("203.0.113.7")
	v6Addr      = netip.MustParseAddr("2001:db8::10")
	extraAddr   = netip.MustParseAddr("1.1.1.1") // Config.ExtraAddrs
)

func newTestNet(t *testing.T) *Net {
	t.Helper()
	netnstest.RequireNetAdmin(t)
	zone := NewZone(map[string]Record{
		"allowed.example":  {Addrs: []netip.Addr{allowedAddr, v6Addr}},
		"alias.example":    {CNAME: "allowed.example"},
		"rebind.example":   {Addrs: []netip.Addr{netip.MustParseAddr("10.99.0.5")}},
		"metadata.example": {Addrs: []netip.Addr{netip.MustParseAddr("169.254.169.254")}},
	})
	rogue := NewZone(map[string]Record{"allowed.example": {Addrs: []netip.Addr{otherAddr}}})
	n, err := New(Config{Zone: zone, RogueZone: rogue, ExtraAddrs: []netip.Addr{extraAddr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return n
}

// exchange asks server (from inside H) for name.
func exchange(t *testing.T, n *Net, proto string, server netip.Addr, name string, qtype uint16) *dns.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := n.DialHost(ctx, proto, netip.AddrPortFrom(server, 53).String())
	if err != nil {
		t.Fatalf("dial dns %s/%s: %v", proto, server, err)
	}
	defer c.Close()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	cl := &dns.Client{Net: proto, Timeout: 5 * time.Second}
	r, _, err := cl.ExchangeWithConn(m, &dns.Conn{Conn: c})
	if err != nil {
		t.Fatalf("exchange %s %s: %v", proto, name, err)
	}
	return r
}

func answerAddrs(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			out = append(out, rr.A.String())
		case *dns.AAAA:
			out = append(out, rr.AAAA.String())
		case *dns.CNAME:
			out = append(out, "cname:"+rr.Target)
		}
	}
	return out
}

func TestDNS(t *testing.T) {
	n := newTestNet(t)
	for _, tc := range []struct {
		name   string
		proto  string
		server netip.Addr
		qname  string
		qtype  uint16
		rcode  int
		want   []string
	}{
		{"A", "udp", DNSAddr, "allowed.example", dns.TypeA, dns.RcodeSuccess, []string{"192.0.2.10"}},
		{"AAAA over TCP", "tcp", DNSAddr, "Allowed.Example.", dns.TypeAAAA, dns.RcodeSuccess, []string{"2001:db8::10"}},
		{"CNAME followed", "udp", DNSAddr, "alias.example", dns.TypeA, dns.RcodeSuccess, []string{"cname:allowed.example.", "192.0.2.10"}},
		{"private address", "udp", DNSAddr, "rebind.example", dns.TypeA, dns.RcodeSuccess, []string{"10.99.0.5"}},
		{"metadata", "udp", DNSAddr, "metadata.example", dns.TypeA, dns.RcodeSuccess, []string{"169.254.169.254"}},
		{"unknown", "udp", DNSAddr, "nope.example", dns.TypeA, dns.RcodeNameError, nil},
		{"rogue server", "udp", RogueDNSAddr, "allowed.example", dns.TypeA, dns.RcodeSuccess, []string{"203.0.113.7"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := exchange(t, n, tc.proto, tc.server, tc.qname, tc.qtype)
			if r.Rcode != tc.rcode {
				t.Fatalf("rcode %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.rcode])
			}
			if got := answerAddrs(r); !slices.Equal(got, tc.want) {
				t.Fatalf("answer %v, want %v", got, tc.want)
			}
		})
	}
	// Every question is recorded by the zone of the server that got it.
	if q := n.Zone().QueriesUnder("nope.example"); len(q) != 1 || q[0].Server.Addr() != DNSAddr || q[0].From.Addr() != HostAddr.Addr() {
		t.Errorf("queries under nope.example: %+v", q)
	}
	if q := n.RogueZone().Queries(); len(q) != 1 || q[0].Name != "allowed.example." {
		t.Errorf("rogue zone queries: %+v", q)
	}
	// Rebinding: the test changes an answer.
	n.Zone().Set("allowed.example", Record{Addrs: []netip.Addr{netip.MustParseAddr("10.99.0.5")}, TTL: time.Second})
	if got := answerAddrs(exchange(t, n, "udp", DNSAddr, "allowed.example", dns.TypeA)); !slices.Equal(got, []string{"10.99.0.5"}) {
		t.Errorf("after Set: %v", got)
	}
}

func TestWeb(t *testing.T) {
	n := newTestNet(t)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(n.CAPEM()) {
		t.Fatal("CA PEM does not parse")
	}
	tr := n.HostTransport()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	for _, tc := range []struct {
		name string
		url  string
		host string
		want string
	}{
		{"http", "http://192.0.2.10/x", "allowed.example", "fakenet proto=http addr=192.0.2.10:80 host=allowed.example sni= path=/x"},
		{"other address", "http://198.51.100.10/", "b.example", "fakenet proto=http addr=198.51.100.10:80 host=b.example sni= path=/"},
		{"ipv6", "http://[2001:db8::10]/", "", "fakenet proto=http addr=[2001:db8::10]:80 host=[2001:db8::10] sni= path=/"},
		{"https by IP", "https://203.0.113.7/", "", "fakenet proto=https addr=203.0.113.7:443 host=203.0.113.7 sni= path=/"},
		{"bait", "http://169.254.169.254/latest", "", "fakenet proto=http addr=169.254.169.254:80 host=169.254.169.254 sni= path=/latest"},
		{"extra address", "https://1.1.1.1/x", "", "fakenet proto=https addr=1.1.1.1:443 host=1.1.1.1 sni= path=/x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, tc.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if got := strings.TrimSpace(string(body)); got != tc.want {
				t.Fatalf("got %q\nwant %q", got, tc.want)
			}
		})
	}

	t.Run("https with SNI", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		raw, err := n.DialHost(ctx, "tcp", "192.0.2.11:443")
		if err != nil {
			t.Fatal(err)
		}
		c := tls.Client(raw, &tls.Config{ServerName: "allowed.example", RootCAs: pool})
		defer c.Close()
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: other.example\r\nConnection: close\r\n\r\n")
		out, _ := io.ReadAll(c)
		if !strings.Contains(string(out), "fakenet proto=https addr=192.0.2.11:443 host=other.example sni=allowed.example path=/") {
			t.Fatalf("got %q", out)
		}
	})

	t.Run("generate_204", func(t *testing.T) {
		resp, err := client.Get("https://192.0.2.10/generate_204")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent || len(body) != 0 {
			t.Fatalf("got %s %q, want 204 and no body", resp.Status, body)
		}
	})

	t.Run("connect refused", func(t *testing.T) {
		req, err := http.NewRequest(http.MethodConnect, "http://192.0.2.10/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "blocked.example:443"
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Fatalf("CONNECT answered %s", resp.Status)
		}
	})

	t.Run("download", func(t *testing.T) {
		resp, err := client.Get("http://192.0.2.10/bytes?n=10000000")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if k, err := io.Copy(io.Discard, resp.Body); err != nil || k != 10000000 {
			t.Fatalf("downloaded %d bytes, %v", k, err)
		}
	})

	t.Run("echo", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := n.DialHost(ctx, "tcp", "203.0.113.10:22")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		br := bufio.NewReader(c)
		line, _ := br.ReadString('\n')
		if strings.TrimSpace(line) != "fakenet proto=tcp addr=203.0.113.10:22 host= sni= path=" {
			t.Fatalf("banner %q", line)
		}
		fmt.Fprintln(c, "ping")
		if line, _ := br.ReadString('\n'); line != "ping\n" {
			t.Fatalf("echo %q", line)
		}
	})

	if got := n.RequestsTo(netip.MustParseAddr("198.51.100.10")); len(got) != 1 || got[0].Host != "b.example" || got[0].From.Addr() != HostAddr.Addr() {
		t.Errorf("requests to 198.51.100.10: %+v", got)
	}
}

// TestNoWayOut: nothing in H or I reaches anything but the fake internet:
// H's only routes lead to I, and I has no route at all beyond the veth.
func TestNoWayOut(t *testing.T) {
	n := newTestNet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// An address outside the fake internet: routed to I, which drops it
	// (unreachable, or no answer).
	if c, err := n.DialHost(ctx, "tcp", "192.0.2.99:80"); err == nil {
		c.Close()
		t.Fatal("connected to an address the fake internet does not serve")
	}
	for _, ns := range []struct {
		name string
		path string
	}{{"host", n.HostNetnsPath()}, {"inet", n.InetNetnsPath()}} {
		out, err := exec.Command("nsenter", "--net="+ns.path, "ip", "-o", "link").CombinedOutput()
		if err != nil {
			t.Fatalf("ip link in %s: %v: %s", ns.name, err, out)
		}
		if lines := strings.Count(strings.TrimSpace(string(out)), "\n") + 1; lines != 2 {
			t.Errorf("%s namespace has %d links, want lo and the veth:\n%s", ns.name, lines, out)
		}
	}
	if links, err := n.HostLinks(); err != nil || len(links) != 2 || !OwnLinks(links[0]) || !OwnLinks(links[1]) {
		t.Errorf("host links %v (%v)", links, err)
	}
	out, err := exec.Command("nsenter", "--net="+n.InetNetnsPath(), "ip", "-4", "route", "show", "default").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("internet namespace has a default route: %s (%v)", out, err)
	}
}

// TestClose: after Close no goroutine, socket, thread or veth of the fake
// internet is left in this process or the real host.
func TestClose(t *testing.T) {
	netnstest.RequireNetAdmin(t)
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	goroutines := runtime.NumGoroutine()
	for i := range 3 {
		n, err := New(Config{})
		if err != nil {
			t.Fatal(err)
		}
		hostID, _ := n.HostNetnsID()
		inetID, _ := n.InetNetnsID()
		if hostID == self || inetID == self || hostID == inetID {
			t.Fatalf("namespaces %s %s, self %s", hostID, inetID, self)
		}
		if err := n.Close(); err != nil {
			t.Fatalf("close %d: %v", i, err)
		}
		for _, id := range []string{hostID, inetID} {
			if holders := netnsHolders(t, id); len(holders) > 0 {
				t.Errorf("namespace %s still held by %v", id, holders)
			}
		}
	}
	links, err := nldump.Retry(netlink.LinkList)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if name := l.Attrs().Name; name == hostIf || name == inetIf {
			t.Errorf("veth %s in the real host's namespace", name)
		}
	}
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		if got, err := os.Readlink("/proc/self/task/" + task.Name() + "/ns/net"); err == nil && got != self {
			t.Errorf("thread %s left in %s", task.Name(), got)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > goroutines && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > goroutines {
		t.Errorf("%d goroutines after Close, %d before", g, goroutines)
	}
}

// netnsHolders lists this process's threads and fds that refer to the
// namespace id.
func netnsHolders(t *testing.T, id string) []string {
	t.Helper()
	var out []string
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, fd := range fds {
		if l, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && l == id {
			out = append(out, "fd "+fd.Name())
		}
	}
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		if l, err := os.Readlink("/proc/self/task/" + task.Name() + "/ns/net"); err == nil && l == id {
			out = append(out, "thread "+task.Name())
		}
	}
	return out
}

// Sites answer HTTPS for their name (by SNI, or Host without one) on any
// served address; other names get the default answer. ResolverAddrs answer
// the zone as DNSAddr does.
func TestSitesAndResolvers(t *testing.T) {
	netnstest.RequireNetAdmin(t)
	resolver := netip.MustParseAddr("10.255.254.53")
	zone := NewZone(map[string]Record{"registry.example": {Addrs: []netip.Addr{allowedAddr}}})
	site := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "site "+r.URL.Path) })
	n, err := New(Config{Zone: zone, ResolverAddrs: []netip.Addr{resolver}, Sites: map[string]http.Handler{"registry.example": site}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	if got := answerAddrs(exchange(t, n, "udp", resolver, "registry.example", dns.TypeA)); !slices.Equal(got, []string{allowedAddr.String()}) {
		t.Errorf("the extra resolver answered %v, want %s", got, allowedAddr)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(n.CAPEM())
	tr := n.HostTransport()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	tr.DisableKeepAlives = true // one connection (one SNI) a request
	for _, c := range []struct{ host, want string }{
		{"registry.example", "site /v2/"},
		{"other.example", "fakenet proto=https"},
	} {
		req, _ := http.NewRequest("GET", "https://"+allowedAddr.String()+"/v2/", nil)
		req.Host = c.host
		tr.TLSClientConfig.ServerName = c.host
		res, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.host, err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if !strings.HasPrefix(string(b), c.want) {
			t.Errorf("%s: %q, want %q…", c.host, b, c.want)
		}
	}
}
