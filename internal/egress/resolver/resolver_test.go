package resolver

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlockdev/airlock/internal/egress/bindings"
	"github.com/airlockdev/airlock/internal/egress/decisionlog"
)

var zone = []string{
	"ok.example. 300 IN A 203.0.113.10",
	"ok.example. 300 IN AAAA 2001:db8::10",
	"ok.example. 300 IN TXT \"hello\"",
	"ok.example. 300 IN MX 10 mail.ok.example.",
	"www.ok.example. 600 IN CNAME cdn.example.net.",
	"cdn.example.net. 120 IN A 198.51.100.7",
	"evilalias.ok.example. 300 IN CNAME evil.example.",
	"evil.example. 300 IN A 203.0.113.99",
	"dohalias.ok.example. 300 IN CNAME dns.google.",
	"dns.google. 300 IN A 203.0.113.8",
	"rebind.example. 300 IN A 10.0.0.5",
	"rebind.example. 300 IN A 127.0.0.1",
	"rebind.example. 300 IN A 169.254.169.254",
	"rebind.example. 300 IN A 198.51.100.99", // the host's own address
	"rebind.example. 300 IN A 10.213.0.6",    // a sandbox
	"rebind.example. 300 IN A 203.0.113.66",  // denied by an address rule
	"rebind.example. 300 IN A 203.0.113.20",
	"rebind.example. 300 IN AAAA ::ffff:127.0.0.1",
	"rebind.example. 300 IN AAAA fd00::1",
	"private.ok.example. 300 IN A 192.168.1.1",
	"long.ok.example. 86400 IN A 203.0.113.30",
	"short.ok.example. 5 IN A 203.0.113.31",
	"svc.ok.example. 300 IN HTTPS 1 . alpn=h2 ipv4hint=203.0.113.40,10.0.0.1 ipv6hint=::1",
	"loop.ok.example. 300 IN CNAME loop2.ok.example.",
	"loop2.ok.example. 300 IN CNAME loop.ok.example.",
}

func bigZone() []string {
	var rs []string
	for i := range 60 {
		rs = append(rs, "big.example. 300 IN A 203.0.113."+strconv.Itoa(i+1))
	}
	return rs
}

func TestResolve(t *testing.T) {
	e := newEnv(t, Config{}, append(slices.Clone(zone), bigZone()...), "big.example")
	hex32 := "0123456789abcdef0f1e2d3c4b5a6978"
	for _, tc := range []struct {
		name  string
		src   netip.Addr
		netw  string
		qname string
		qtype uint16
		rcode int
		addrs []string // A/AAAA in the answer (nil: none)
		nAns  int      // -1: do not check
		seen  bool     // the upstream was asked
		rule  string   // rule of the last logged decision ("" = do not check)
		bound []string // names bound to addrs[0]
	}{
		{"allowed A", guest, "udp", "ok.example", dns.TypeA, dns.RcodeSuccess, []string{"203.0.113.10"}, 1, true, "allow ok.example", []string{"ok.example"}},
		{"allowed A, mixed case and TCP", guest, "tcp", "OK.Example", dns.TypeA, dns.RcodeSuccess, []string{"203.0.113.10"}, 1, true, "", []string{"ok.example"}},
		{"allowed AAAA", guest, "udp", "ok.example", dns.TypeAAAA, dns.RcodeSuccess, []string{"2001:db8::10"}, 1, true, "", []string{"ok.example"}},
		{"allowed TXT", guest, "udp", "ok.example", dns.TypeTXT, dns.RcodeSuccess, nil, 1, true, "", nil},
		{"allowed MX", guest, "udp", "ok.example", dns.TypeMX, dns.RcodeSuccess, nil, 1, true, "", nil},
		{"NXDOMAIN passes", guest, "udp", "nothing.ok.example", dns.TypeA, dns.RcodeNameError, nil, 0, true, "", nil},
		{"denied by default", guest, "udp", "blocked.example", dns.TypeA, dns.RcodeRefused, nil, 0, false, "default none", nil},
		{"denied by rule", guest, "udp", "bad.ok.example", dns.TypeA, dns.RcodeRefused, nil, 0, false, "deny bad.ok.example", nil},
		{"exfil long label", guest, "udp", strings.Repeat("a", 41) + ".ok.example", dns.TypeA, dns.RcodeRefused, nil, 0, false, RuleExfil, nil},
		{"exfil entropy", guest, "udp", hex32 + ".ok.example", dns.TypeA, dns.RcodeRefused, nil, 0, false, RuleExfil, nil},
		{"exfil many labels", guest, "udp", strings.Repeat("ab.", 12) + "ok.example", dns.TypeA, dns.RcodeRefused, nil, 0, false, RuleExfil, nil},
		{"DoH resolver allowed by policy", guest, "udp", "dns.google", dns.TypeA, dns.RcodeRefused, nil, 0, false, RuleDoH, nil},
		{"DoH subdomain", guest, "udp", "mozilla.cloudflare-dns.com", dns.TypeA, dns.RcodeRefused, nil, 0, false, RuleDoH, nil},
		{"ANY refused", guest, "udp", "ok.example", dns.TypeANY, dns.RcodeRefused, nil, 0, false, RuleQType, nil},
		{"PTR refused", guest, "udp", "10.113.0.203.in-addr.arpa", dns.TypePTR, dns.RcodeRefused, nil, 0, false, RuleQType, nil},
		{"numeric name refused", guest, "udp", "203.0.113.10", dns.TypeA, dns.RcodeRefused, nil, 0, false, RuleBadName, nil},
		{"CNAME chain allowed and bound", guest, "udp", "www.ok.example", dns.TypeA, dns.RcodeSuccess, []string{"198.51.100.7"}, 2, true, "", []string{"www.ok.example", "cdn.example.net"}},
		{"CNAME to a denied name", guest, "udp", "evilalias.ok.example", dns.TypeA, dns.RcodeRefused, nil, 0, true, "default none", nil},
		{"CNAME to a DoH resolver", guest, "udp", "dohalias.ok.example", dns.TypeA, dns.RcodeRefused, nil, 0, true, RuleDoH, nil},
		{"CNAME loop", guest, "udp", "loop.ok.example", dns.TypeA, dns.RcodeServerFailure, nil, 0, true, RuleChain, nil},
		{"rebinding stripped", guest, "udp", "rebind.example", dns.TypeA, dns.RcodeSuccess, []string{"203.0.113.20"}, 1, true, "", []string{"rebind.example"}},
		{"rebinding AAAA stripped to NODATA", guest, "udp", "rebind.example", dns.TypeAAAA, dns.RcodeSuccess, nil, 0, true, "always-denied", nil},
		{"private only: NODATA", guest, "udp", "private.ok.example", dns.TypeA, dns.RcodeSuccess, nil, 0, true, "always-denied", nil},
		{"truncated upstream retried over TCP", guest, "udp", "big.example", dns.TypeA, dns.RcodeSuccess, nil, -1, true, "", nil},
		{"big answer over TCP (as many addresses as a name may bind)", guest, "tcp", "big.example", dns.TypeA, dns.RcodeSuccess, nil, bindings.MaxAddrsPerName, true, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.up.count(tc.qname)
			in := e.query(t, tc.src, tc.netw, tc.qname, tc.qtype)
			if in.Rcode != tc.rcode {
				t.Fatalf("rcode %s, want %s\n%v", dns.RcodeToString[in.Rcode], dns.RcodeToString[tc.rcode], in)
			}
			if got := e.up.count(tc.qname) > before; got != tc.seen {
				t.Errorf("upstream asked: %v, want %v", got, tc.seen)
			}
			if tc.addrs != nil || tc.nAns == 0 {
				if got := answerAddrs(in); !slices.Equal(got, tc.addrs) {
					t.Errorf("addresses %v, want %v", got, tc.addrs)
				}
			}
			if tc.nAns >= 0 && len(in.Answer) != tc.nAns {
				t.Errorf("%d answer records, want %d:\n%v", len(in.Answer), tc.nAns, in)
			}
			if len(in.Extra) > 1 || (len(in.Extra) == 1 && in.Extra[0].Header().Rrtype != dns.TypeOPT) {
				t.Errorf("additional section passed on: %v", in.Extra)
			}
			if !strings.EqualFold(in.Question[0].Name, dns.Fqdn(tc.qname)) || in.Question[0].Name != dns.Fqdn(tc.qname) {
				t.Errorf("question %q not echoed as asked", in.Question[0].Name)
			}
			if tc.rule != "" {
				ev, _ := e.sb.Log.Since(0)
				if len(ev) == 0 || ev[len(ev)-1].Rule != tc.rule || ev[len(ev)-1].Kind != decisionlog.KindDNS {
					t.Errorf("last decision %+v, want rule %q", ev[len(ev)-1:], tc.rule)
				}
			}
			for _, n := range tc.bound {
				if !e.sb.Bindings.Has(n, netip.MustParseAddr(tc.addrs[0]), e.clock.Now()) {
					t.Errorf("no binding %s -> %s", n, tc.addrs[0])
				}
			}
		})
	}

	t.Run("truncated upstream answer came over TCP", func(t *testing.T) {
		if e.up.tcpCount() == 0 {
			t.Fatal("the upstream never saw TCP")
		}
		// The UDP reply to the guest was cut to its buffer; the binding has as many addresses
		// as a name may bind.
		if got := len(e.sb.Bindings.Addrs("big.example", e.clock.Now())); got != bindings.MaxAddrsPerName {
			t.Fatalf("%d bindings for big.example, want %d", got, bindings.MaxAddrsPerName)
		}
	})
	t.Run("rebinding drops are logged", func(t *testing.T) {
		ev, _ := e.sb.Log.Since(0)
		dropped := map[string]string{}
		for _, x := range ev {
			if x.Host == "rebind.example" && x.Addr != "" && !x.Allowed {
				dropped[x.Addr] = x.Rule
			}
		}
		for _, a := range []string{"10.0.0.5", "127.0.0.1", "169.254.169.254", "198.51.100.99", "10.213.0.6", "fd00::1"} {
			if _, ok := dropped[a]; !ok {
				t.Errorf("drop of %s not logged (%v)", a, dropped)
			}
		}
		if dropped["203.0.113.66"] != "deny 203.0.113.66" {
			t.Errorf("drop of 203.0.113.66 by the address rule: %q", dropped["203.0.113.66"])
		}
		for _, a := range []string{"10.0.0.5", "127.0.0.1", "169.254.169.254", "198.51.100.99", "203.0.113.66"} {
			if e.sb.Bindings.Has("rebind.example", netip.MustParseAddr(a), e.clock.Now()) {
				t.Errorf("binding to dropped %s", a)
			}
		}
	})
}

// TestUnknownSourceGetsNothing: a packet from an address that is no sandbox (which, through the
// redirect, may be a forged one) gets no reply at all, whatever it holds: not REFUSED for a
// query, not NOTIMP for another opcode, not FORMERR for a malformed message. Over TCP the
// connection is closed without a byte. Nothing reaches the upstream or a decision log, and the
// sandbox's own address is still answered.
func TestUnknownSourceGetsNothing(t *testing.T) {
	e := newEnv(t, Config{}, zone)
	server := e.res.Addr()
	query := func(mod func(*dns.Msg)) []byte {
		m := new(dns.Msg)
		m.SetQuestion("ok.example.", dns.TypeA)
		if mod != nil {
			mod(m)
		}
		b, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	seenBefore := e.up.count("ok.example")
	logBefore, _ := e.sb.Log.Since(0)
	for _, tc := range []struct {
		name string
		pkt  []byte
	}{
		{"query", query(nil)},
		{"query with EDNS", query(func(m *dns.Msg) { m.SetEdns0(1232, false) })},
		{"long name", query(func(m *dns.Msg) {
			m.Question[0].Name = strings.Repeat(strings.Repeat("x", 63)+".", 3) + "ok.example."
		})},
		{"notify opcode", query(func(m *dns.Msg) { m.Opcode = dns.OpcodeNotify })},
		{"update opcode", query(func(m *dns.Msg) { m.Opcode = dns.OpcodeUpdate })},
		{"two questions", query(func(m *dns.Msg) { m.Question = append(m.Question, m.Question[0]) })},
		{"no question", query(func(m *dns.Msg) { m.Question = nil })},
		{"ANY", query(func(m *dns.Msg) { m.Question[0].Qtype = dns.TypeANY })},
		{"header only", make([]byte, 12)},
		{"truncated question", query(nil)[:15]},
		{"garbage", []byte("GET / HTTP/1.1\r\n\r\n")},
	} {
		t.Run(tc.name+"/udp", func(t *testing.T) {
			c, err := net.DialUDP("udp", &net.UDPAddr{IP: stranger.AsSlice()}, net.UDPAddrFromAddrPort(server))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write(tc.pkt); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			buf := make([]byte, 2048)
			if n, err := c.Read(buf); err == nil {
				t.Fatalf("unknown source got a %d-byte reply", n)
			} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
				t.Fatalf("read: %v, want a timeout", err)
			}
		})
		t.Run(tc.name+"/tcp", func(t *testing.T) {
			c, err := net.DialTCP("tcp", &net.TCPAddr{IP: stranger.AsSlice()}, net.TCPAddrFromAddrPort(server))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			n := len(tc.pkt)
			_, _ = c.Write(append([]byte{byte(n >> 8), byte(n)}, tc.pkt...))
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			buf := make([]byte, 2048)
			if n, err := c.Read(buf); n > 0 {
				t.Fatalf("unknown source got %d bytes over TCP", n)
			} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("connection from an unknown source left open")
			}
		})
	}
	if e.up.count("ok.example") != seenBefore {
		t.Error("a query from an unknown source reached the upstream")
	}
	if ev, _ := e.sb.Log.Since(0); len(ev) != len(logBefore) {
		t.Errorf("decisions logged for an unknown source: %+v", ev[len(logBefore):])
	}
	// The sandbox itself is still answered, on both transports.
	for _, netw := range []string{"udp", "tcp"} {
		if in := e.query(t, guest, netw, "ok.example", dns.TypeA); in.Rcode != dns.RcodeSuccess {
			t.Errorf("guest over %s: %v", netw, in)
		}
	}
	// The handler's own check, below the sockets' readers: nothing, whatever the message.
	for _, op := range []int{dns.OpcodeQuery, dns.OpcodeNotify, dns.OpcodeStatus} {
		m := new(dns.Msg)
		m.SetQuestion("ok.example.", dns.TypeA)
		m.Opcode = op
		for _, tcp := range []bool{false, true} {
			if resp := e.res.answer(context.Background(), stranger, tcp, m); resp != nil {
				t.Errorf("answer to an unknown source, opcode %s: %v", dns.OpcodeToString[op], resp)
			}
		}
	}
}

func TestTTL(t *testing.T) {
	e := newEnv(t, Config{}, zone)
	for _, tc := range []struct {
		name     string
		guestTTL uint32
		alive    time.Duration // the binding is still live this long after the answer
		dead     time.Duration // and gone after this long
	}{
		{"long.ok.example", 3600, time.Hour, time.Hour + DefaultBindingGrace + time.Second},
		{"short.ok.example", 5, DefaultMinBindingTTL, DefaultMinBindingTTL + DefaultBindingGrace + time.Second},
		// www (600 s) -> cdn.example.net (120 s): both handed out for 120 s.
		{"www.ok.example", 120, 120 * time.Second, 120*time.Second + DefaultBindingGrace + time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := e.clock.Now()
			in := e.query(t, guest, "udp", tc.name, dns.TypeA)
			for _, rr := range in.Answer {
				if rr.Header().Ttl != tc.guestTTL {
					t.Fatalf("answer %v, want TTL %d", in.Answer, tc.guestTTL)
				}
			}
			a := netip.MustParseAddr(answerAddrs(in)[0])
			if !e.sb.Bindings.Has(tc.name, a, start.Add(tc.alive)) {
				t.Errorf("binding gone after %s", tc.alive)
			}
			if e.sb.Bindings.Has(tc.name, a, start.Add(tc.dead)) {
				t.Errorf("binding still live after %s", tc.dead)
			}
		})
	}
}

func TestHTTPSHints(t *testing.T) {
	e := newEnv(t, Config{}, zone)
	in := e.query(t, guest, "udp", "svc.ok.example", dns.TypeHTTPS)
	if in.Rcode != dns.RcodeSuccess || len(in.Answer) != 1 {
		t.Fatalf("answer %v", in)
	}
	h := in.Answer[0].(*dns.HTTPS)
	var v4 []string
	for _, kv := range h.Value {
		switch kv := kv.(type) {
		case *dns.SVCBIPv4Hint:
			for _, ip := range kv.Hint {
				v4 = append(v4, ip.String())
			}
		case *dns.SVCBIPv6Hint:
			t.Errorf("ipv6hint with only ::1 kept: %v", kv)
		}
	}
	if !slices.Equal(v4, []string{"203.0.113.40"}) {
		t.Errorf("ipv4hint %v, want [203.0.113.40]", v4)
	}
	// Hints are no bindings.
	if e.sb.Bindings.Has("svc.ok.example", netip.MustParseAddr("203.0.113.40"), e.clock.Now()) {
		t.Error("a hint was bound")
	}
}

// TestGarbage sends junk over UDP and TCP; the resolver must survive and keep answering.
func TestGarbage(t *testing.T) {
	e := newEnv(t, Config{}, zone)
	server := e.res.Addr().String()
	junk := [][]byte{
		{},
		{0},
		[]byte("GET / HTTP/1.1\r\n\r\n"),
		make([]byte, 12), // an empty header
		append([]byte{0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0}, 0xc0, 0x0c), // a compression loop
		make([]byte, 4000),
		make([]byte, 65000),
	}
	for _, b := range junk {
		for _, src := range []netip.Addr{guest, stranger} {
			c, err := net.DialUDP("udp", &net.UDPAddr{IP: src.AsSlice()}, net.UDPAddrFromAddrPort(e.res.Addr()))
			if err != nil {
				t.Fatal(err)
			}
			_, _ = c.Write(b)
			c.Close()
			tc, err := net.DialTCP("tcp", &net.TCPAddr{IP: src.AsSlice()}, net.TCPAddrFromAddrPort(e.res.Addr()))
			if err != nil {
				t.Fatal(err)
			}
			n := len(b)
			_, _ = tc.Write(append([]byte{byte(n >> 8), byte(n)}, b...))
			tc.Close()
		}
	}
	// A query with two questions, and a response sent to the resolver.
	m := new(dns.Msg)
	m.SetQuestion("ok.example.", dns.TypeA)
	m.Question = append(m.Question, m.Question[0])
	if in, err := exchange(guest, "udp", server, m); err != nil || in.Rcode != dns.RcodeFormatError {
		t.Errorf("two questions: %v %v", in, err)
	}
	in := e.query(t, guest, "udp", "ok.example", dns.TypeA)
	if in.Rcode != dns.RcodeSuccess {
		t.Fatalf("after junk: %v", in)
	}
}

func TestUpstreamDown(t *testing.T) {
	// An upstream that never answers: SERVFAIL within the query timeout.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	e := newEnv(t, Config{Upstream: pc.LocalAddr().String(), AttemptTimeout: 100 * time.Millisecond, QueryTimeout: 500 * time.Millisecond}, zone)
	start := time.Now()
	in := e.query(t, guest, "udp", "ok.example", dns.TypeA)
	if in.Rcode != dns.RcodeServerFailure {
		t.Fatalf("rcode %s", dns.RcodeToString[in.Rcode])
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %s", d)
	}
}

func TestNewErrors(t *testing.T) {
	e := newEnv(t, Config{}, zone)
	// The port is taken: both protocols must bind it.
	if _, err := New(Config{Listen: e.res.Addr().String(), Upstream: "127.0.0.1:53", Registry: e.reg}); err == nil {
		t.Error("New on a taken port succeeded")
	}
	for _, cfg := range []Config{
		{Listen: "127.0.0.1:0", Upstream: "127.0.0.1:53"},
		{Listen: "127.0.0.1:0", Upstream: "nowhere", Registry: e.reg},
		{Listen: "127.0.0.1:0", Upstream: "127.0.0.1:53", Registry: e.reg, MinBindingTTL: time.Hour, MaxTTL: time.Minute},
	} {
		if r, err := New(cfg); err == nil {
			r.Close()
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
	// New then Close without Serve releases the port.
	r, err := New(Config{Listen: "127.0.0.1:0", Upstream: "127.0.0.1:53", Registry: e.reg})
	if err != nil {
		t.Fatal(err)
	}
	addr := r.Addr().String()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r2, err := New(Config{Listen: addr, Upstream: "127.0.0.1:53", Registry: e.reg})
	if err != nil {
		t.Fatalf("port not released: %v", err)
	}
	r2.Close()
}

// Lookup is the proxy's own resolution: the upstream's addresses, CNAME chains followed by the
// upstream, unfiltered (the proxy judges them), whatever the sandbox's policy says.
func TestLookup(t *testing.T) {
	e := newEnv(t, Config{}, zone)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		want []string
	}{
		{"OK.example.", []string{"203.0.113.10", "2001:db8::10"}},
		{"evil.example", []string{"203.0.113.99"}},
	} {
		got, err := e.res.Lookup(ctx, tc.name)
		if err != nil {
			t.Fatalf("Lookup(%s): %v", tc.name, err)
		}
		var s []string
		for _, a := range got {
			s = append(s, a.String())
		}
		if !slices.Equal(s, tc.want) {
			t.Errorf("Lookup(%s) = %v, want %v", tc.name, s, tc.want)
		}
	}
	if got, err := e.res.Lookup(ctx, "rebind.example"); err != nil || !slices.Contains(got, netip.MustParseAddr("169.254.169.254")) {
		t.Errorf("Lookup(rebind.example) = %v, %v; want the metadata address among them, unfiltered", got, err)
	}
	if _, err := e.res.Lookup(ctx, "missing.example"); err == nil {
		t.Error("Lookup of a name with no address succeeded")
	}
	if _, err := e.res.Lookup(ctx, "bad name"); err == nil {
		t.Error("Lookup of an invalid name succeeded")
	}
	if n := len(e.sb.Bindings.Addrs("ok.example", e.clock.Now())); n != 0 {
		t.Errorf("Lookup recorded %d bindings; only the sandbox's own queries may", n)
	}
}
