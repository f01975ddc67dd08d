package integration

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/egress/nftrules"
	"github.com/airlockdev/airlock/internal/egress/sandboxnet"
	"github.com/airlockdev/airlock/internal/model"
)

// TestSandboxNetwork checks every sandbox's network on each runtime: eth0
// with its address and the host end as gateway and only name server; its
// TCP, whatever the port, lands on the server's egress proxy and its DNS on
// the resolver, never on another host service; its other UDP is dropped; create/delete churn leaves no netns,
// veth, nftables set member or mount.
func TestSandboxNetwork(t *testing.T) {
	airtest.RequireRoot(t)
	bins := build(t)
	for _, rt := range runtimes() {
		t.Run(rt, func(t *testing.T) {
			airtest.RequireBinary(t, rt)
			s := newServer(t, bins, serverConfig{runtime: rt})
			s.start()
			ctx := ctxFor(t, 3*time.Minute)
			c := s.client()

			// A service of the host's on every address, TCP and UDP.
			tcp, err := net.ListenTCP("tcp4", &net.TCPAddr{})
			if err != nil {
				t.Fatal(err)
			}
			defer tcp.Close()
			port := tcp.Addr().(*net.TCPAddr).Port
			udp, err := net.ListenUDP("udp4", &net.UDPAddr{Port: port})
			if err != nil {
				t.Fatal(err)
			}
			defer udp.Close()
			reached := make(chan string, 4)
			go func() {
				for {
					conn, err := tcp.Accept()
					if err != nil {
						return
					}
					reached <- "tcp from " + conn.RemoteAddr().String()
					conn.Close()
				}
			}()
			go func() {
				buf := make([]byte, 512)
				for {
					n, from, err := udp.ReadFromUDPAddrPort(buf)
					if err != nil {
						return
					}
					reached <- fmt.Sprintf("udp %q from %s", buf[:n], from)
				}
			}()

			sb := createSandbox(ctx, t, c, apiv1.CreateSandboxRequest{})
			id := model.SandboxID(sb.ID)
			guest, gw := sandboxAddrs(ctx, t, c, id)

			sh := func(script string) execResult {
				return execIn(ctx, t, c, id, "sh", "-c", script)
			}
			// TCP to the host's service and to DNS over TCP: redirected to
			// the proxy and the resolver, which refuse a host address and
			// a garbage query.
			for _, p := range []int{port, 53, 22} {
				sh(fmt.Sprintf("echo hello | nc -w 3 %s %d", gw, p))
			}
			// UDP other than DNS: dropped.
			sh(fmt.Sprintf("echo hello | nc -u -w 1 %s %d", gw, port))
			select {
			case what := <-reached:
				t.Errorf("the sandbox reached the host's service: %s", what)
			case <-time.After(2 * time.Second):
			}
			// The resolver answers (a failure: its upstream is a closed
			// local port), and the proxy refuses a direct IP with a 403.
			if res := sh("nslookup airlock-test.example 2>&1; true"); strings.Contains(res.stdout, "timed out") || strings.Contains(res.stdout, "no servers could be reached") || !strings.Contains(res.stdout, gw.String()) {
				t.Errorf("the resolver did not answer: %q", res.stdout)
			}
			// (busybox-static's wget crashes in glibc's static getaddrinfo)
			if res := sh(`printf 'GET / HTTP/1.1\r\nHost: 203.0.113.7\r\nConnection: close\r\n\r\n' | nc -w 10 203.0.113.7 80 2>&1; true`); !strings.Contains(res.stdout, " 403 ") {
				t.Errorf("the proxy did not refuse a direct IP with 403: %q", res.stdout)
			}

			// The deployment CA is in the sandbox's trust store, and the
			// common TLS stacks are pointed at it.
			if res := sh(`grep -c 'BEGIN CERTIFICATE' /etc/airlock/ca.crt; tail -c 200 /etc/ssl/certs/ca-certificates.crt | grep -c 'END CERTIFICATE'; echo "$SSL_CERT_FILE $NODE_EXTRA_CA_CERTS"`); res.stdout != "1\n1\n/etc/ssl/certs/ca-certificates.crt /etc/airlock/ca.crt\n" {
				t.Errorf("trust store: %q (%s)", res.stdout, res.stderr)
			}

			// Churn: every create gets a network, every delete removes it.
			var gone []model.SandboxID
			for range 3 {
				sb := createSandbox(ctx, t, c, apiv1.CreateSandboxRequest{})
				id := model.SandboxID(sb.ID)
				sandboxAddrs(ctx, t, c, id)
				if _, err := c.DeleteSandbox(ctx, id); err != nil {
					t.Fatal(err)
				}
				s.waitState(ctx, id, model.StateDeleted)
				gone = append(gone, id)
			}
			assertNoNetworkLeftovers(t, s.dataDir, gone, false)

			// A restart keeps the running sandbox's network (its veth stays
			// in the set: the host's service stays out of reach) and removes
			// set members whose interface is gone.
			const stale = "alk000000000000"
			nftDo(t, func(c *nftables.Conn) error { return nftrules.AddSandbox(c, stale) })
			s.stop()
			s.start()
			c = s.client()
			members := nftMembers(t)
			if slices.Contains(members, stale) {
				t.Errorf("the stale set member %s survived a restart: %v", stale, members)
			}
			if !slices.Contains(members, sandboxnet.HostIfName(id)) {
				t.Errorf("the running sandbox's veth %s is not in the set after a restart: %v", sandboxnet.HostIfName(id), members)
			}
			if g, _ := sandboxAddrs(ctx, t, c, id); g != guest {
				t.Errorf("guest address %s after a restart, was %s", g, guest)
			}
			execIn(ctx, t, c, id, "sh", "-c", fmt.Sprintf("echo hello | nc -w 3 %s %d", gw, port))
			select {
			case what := <-reached:
				t.Errorf("after a restart the sandbox reached the host's service: %s", what)
			case <-time.After(time.Second):
			}
		})
	}
}

// nftDo runs fn on a fresh nftables connection of the host.
func nftDo(t *testing.T, fn func(*nftables.Conn) error) {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseLasting()
	if err := fn(c); err != nil {
		t.Fatal(err)
	}
}

// nftMembers lists the members of Airlock's set of sandbox interfaces.
func nftMembers(t *testing.T) []string {
	t.Helper()
	var names []string
	nftDo(t, func(c *nftables.Conn) (err error) {
		names, err = nftrules.Sandboxes(c)
		return err
	})
	return names
}

// sandboxAddrs returns a sandbox's eth0 address and its gateway, checking
// that the gateway is its only name server.
func sandboxAddrs(ctx context.Context, t *testing.T, c *client.Client, id model.SandboxID) (guest, gw netip.Addr) {
	t.Helper()
	res := execIn(ctx, t, c, id, "sh", "-c", "ip -4 addr show dev eth0; ip -4 route; cat /etc/resolv.conf")
	if res.exitCode != 0 {
		t.Fatalf("network of %s: exit %d: %s %s", id, res.exitCode, res.stdout, res.stderr)
	}
	m := regexp.MustCompile(`inet (10\.213\.[0-9.]+)/30`).FindStringSubmatch(res.stdout)
	r := regexp.MustCompile(`default via ([0-9.]+)`).FindStringSubmatch(res.stdout)
	ns := regexp.MustCompile(`(?m)^nameserver (\S+)$`).FindAllStringSubmatch(res.stdout, -1)
	if m == nil || r == nil || len(ns) != 1 || ns[0][1] != r[1] {
		t.Fatalf("network of %s:\n%s\nwant eth0 in 10.213.0.0/16, a default route and the gateway as only nameserver", id, res.stdout)
	}
	return netip.MustParseAddr(m[1]), netip.MustParseAddr(r[1])
}
