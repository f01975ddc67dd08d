package resolver

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlockdev/airlock/internal/egress"
	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/egress/sandboxnet"
	"github.com/airlockdev/airlock/internal/model"
)

// fakeUpstream is a recursive DNS server on loopback answering from a fixed zone, following
// CNAMEs like a recursive resolver does, and counting what it is asked.
type fakeUpstream struct {
	addr string
	zone map[string][]dns.RR // by owner name (FQDN, lower case)
	big  map[string]bool     // names answered truncated over UDP

	mu   sync.Mutex
	seen map[string]int // by lower-case FQDN
	tcp  int
}

func newFakeUpstream(t testing.TB, records []string, big ...string) *fakeUpstream {
	t.Helper()
	u := &fakeUpstream{zone: map[string][]dns.RR{}, big: map[string]bool{}, seen: map[string]int{}}
	for _, s := range records {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatalf("record %q: %v", s, err)
		}
		n := strings.ToLower(rr.Header().Name)
		u.zone[n] = append(u.zone[n], rr)
	}
	for _, b := range big {
		u.big[dns.Fqdn(b)] = true
	}
	// UDP and TCP on one port, as the resolver binds its own (listen): the
	// port UDP got may be taken for TCP, so try again.
	pc, ln, err := listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.addr = pc.LocalAddr().String()
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // runs after the shutdowns below (cleanups run last-in first-out)
	for _, s := range []*dns.Server{
		{PacketConn: pc, Handler: u.handler(false)},
		{Listener: ln, Handler: u.handler(true)},
	} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.ActivateAndServe()
		}()
		<-started
		t.Cleanup(func() { _ = s.Shutdown() })
	}
	return u
}

func (u *fakeUpstream) handler(tcp bool) dns.Handler {
	return dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		q := req.Question[0]
		name := strings.ToLower(q.Name)
		u.mu.Lock()
		u.seen[name]++
		if tcp {
			u.tcp++
		}
		u.mu.Unlock()
		m := new(dns.Msg)
		m.SetReply(req)
		m.RecursionAvailable = true
		if u.big[name] && !tcp {
			m.Truncated = true
			_ = w.WriteMsg(m)
			return
		}
		cur, found := name, false
		for range 20 {
			next := ""
			for _, rr := range u.zone[cur] {
				found = true
				switch {
				case rr.Header().Rrtype == q.Qtype:
					m.Answer = append(m.Answer, dns.Copy(rr))
				case rr.Header().Rrtype == dns.TypeCNAME:
					m.Answer = append(m.Answer, dns.Copy(rr))
					next = strings.ToLower(rr.(*dns.CNAME).Target)
				}
			}
			if next == "" {
				break
			}
			cur = next
		}
		if !found {
			m.Rcode = dns.RcodeNameError
			soa, _ := dns.NewRR("example. 900 IN SOA ns.example. admin.example. 1 7200 3600 86400 300")
			m.Ns = append(m.Ns, soa)
		}
		// Glue the resolver must not pass on.
		glue, _ := dns.NewRR("ns.elsewhere.example. 300 IN A 203.0.113.250")
		m.Extra = append(m.Extra, glue)
		_ = w.WriteMsg(m)
	})
}

func (u *fakeUpstream) count(name string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seen[dns.Fqdn(strings.ToLower(name))]
}

func (u *fakeUpstream) tcpCount() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.tcp
}

// clock is a settable clock shared by the registry and the resolver.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type env struct {
	up    *fakeUpstream
	reg   *egress.Registry
	sb    *egress.Sandbox
	res   *Resolver
	clock *clock
}

var (
	guest      = netip.MustParseAddr("127.0.0.2")
	stranger   = netip.MustParseAddr("127.0.0.3")
	hostAddr   = netip.MustParseAddr("198.51.100.99")
	testPolicy = `{"default":"none",
		"allow":["ok.example","*.ok.example","cdn.example.net","rebind.example","big.example","dns.google","cnamedoh.example"],
		"deny":["bad.ok.example","203.0.113.66"]}`
)

// hostOrPool is what the server's registry denies beyond the policy: the host's own address
// and the sandbox pool.
func hostOrPool(a netip.Addr) bool { return a == hostAddr || sandboxnet.DefaultPrefix.Contains(a) }

// newEnv starts a fake upstream with records, a registry with one sandbox at guest under
// testPolicy, and a Resolver serving on 127.0.0.1:0 until the test ends.
func newEnv(t testing.TB, cfg Config, records []string, big ...string) *env {
	t.Helper()
	e := &env{up: newFakeUpstream(t, records, big...), clock: &clock{now: time.Unix(1_800_000_000, 0)}}
	e.reg = egress.NewRegistry(egress.RegistryConfig{Now: e.clock.Now, Denied: hostOrPool})
	spec, err := policy.ParseSpec([]byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(spec, nil, policy.Public)
	if err != nil {
		t.Fatal(err)
	}
	e.sb = e.reg.Add(model.SandboxID("sbx_resolver_test"), guest, p)
	cfg.Listen = "127.0.0.1:0"
	if cfg.Upstream == "" {
		cfg.Upstream = e.up.addr
	}
	cfg.Registry = e.reg
	cfg.Now = e.clock.Now
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.AttemptTimeout == 0 {
		cfg.AttemptTimeout = time.Second
	}
	e.res, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.res.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return e
}

// query sends one query from src over "udp" or "tcp" and returns the reply.
func (e *env) query(t *testing.T, src netip.Addr, netw, name string, qtype uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.SetEdns0(1232, false)
	in, err := exchange(src, netw, e.res.Addr().String(), m)
	if err != nil {
		t.Fatalf("query %s %s over %s: %v", name, dns.Type(qtype), netw, err)
	}
	return in
}

func exchange(src netip.Addr, netw, server string, m *dns.Msg) (*dns.Msg, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	if netw == "tcp" {
		d.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
	} else {
		d.LocalAddr = &net.UDPAddr{IP: src.AsSlice()}
	}
	c := &dns.Client{Net: netw, Dialer: d, Timeout: 5 * time.Second}
	in, _, err := c.Exchange(m, server)
	return in, err
}

func answerAddrs(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			out = append(out, rr.A.String())
		case *dns.AAAA:
			out = append(out, rr.AAAA.String())
		}
	}
	return out
}
