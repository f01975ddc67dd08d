package fakenet

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/airlockdev/airlock/internal/egress/netnstest"
)

// Record is what a zone answers for one name: a CNAME (followed inside the
// zone) or addresses (A and AAAA by family).
type Record struct {
	CNAME string
	Addrs []netip.Addr
	TTL   time.Duration // 0: 60s
}

// Query is one question a fake DNS server received.
type Query struct {
	Server netip.AddrPort // the fake server's address that received it
	From   netip.AddrPort
	Name   string // lower case, fully qualified ("a.example.")
	Type   string // "A", "AAAA", "TXT", …
	Proto  string // "udp" or "tcp"
}

// Zone is the authoritative data of one fake DNS server: names the test
// sets, answered NXDOMAIN otherwise; every question is recorded.
type Zone struct {
	mu      sync.Mutex
	records map[string]Record
	queries []Query
}

// NewZone returns a zone with records (name → record; names with or without
// the final dot, any case).
func NewZone(records map[string]Record) *Zone {
	z := &Zone{records: map[string]Record{}}
	for n, r := range records {
		z.Set(n, r)
	}
	return z
}

// Set adds or replaces the record of name (for rebinding tests).
func (z *Zone) Set(name string, r Record) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if r.CNAME != "" {
		r.CNAME = dns.Fqdn(strings.ToLower(r.CNAME))
	}
	z.records[dns.Fqdn(strings.ToLower(name))] = r
}

// Delete removes name's record.
func (z *Zone) Delete(name string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	delete(z.records, dns.Fqdn(strings.ToLower(name)))
}

// Queries returns every question received so far.
func (z *Zone) Queries() []Query {
	z.mu.Lock()
	defer z.mu.Unlock()
	return append([]Query(nil), z.queries...)
}

// QueriesUnder returns the questions for suffix or any name below it.
func (z *Zone) QueriesUnder(suffix string) []Query {
	suffix = dns.Fqdn(strings.ToLower(suffix))
	var out []Query
	for _, q := range z.Queries() {
		if q.Name == suffix || strings.HasSuffix(q.Name, "."+suffix) {
			out = append(out, q)
		}
	}
	return out
}

// ResetQueries forgets the recorded questions.
func (z *Zone) ResetQueries() {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.queries = nil
}

// answer builds the reply to req and records its question.
func (z *Zone) answer(server, from netip.AddrPort, proto string, req *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	if len(req.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		return m
	}
	q := req.Question[0]
	name := strings.ToLower(q.Name)
	z.mu.Lock()
	defer z.mu.Unlock()
	z.queries = append(z.queries, Query{Server: server, From: from, Name: name, Type: dns.TypeToString[q.Qtype], Proto: proto})
	found := false
	for hops := 0; hops < 8; hops++ {
		r, ok := z.records[name]
		if !ok {
			break
		}
		found = true
		ttl := uint32(60)
		if r.TTL > 0 {
			ttl = uint32(max(r.TTL/time.Second, 1))
		}
		hdr := func(t uint16) dns.RR_Header {
			return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: ttl}
		}
		if r.CNAME != "" {
			m.Answer = append(m.Answer, &dns.CNAME{Hdr: hdr(dns.TypeCNAME), Target: r.CNAME})
			if q.Qtype == dns.TypeCNAME {
				break
			}
			name = r.CNAME
			continue
		}
		for _, a := range r.Addrs {
			switch {
			case a.Is4() && (q.Qtype == dns.TypeA || q.Qtype == dns.TypeANY):
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr(dns.TypeA), A: net.IP(a.AsSlice())})
			case a.Is6() && (q.Qtype == dns.TypeAAAA || q.Qtype == dns.TypeANY):
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr(dns.TypeAAAA), AAAA: net.IP(a.AsSlice())})
			}
		}
		break
	}
	if !found {
		m.Rcode = dns.RcodeNameError
	}
	return m
}

// dnsServer serves one zone on one address, UDP and TCP port 53.
type dnsServer struct {
	addr    netip.AddrPort
	servers []*dns.Server
}

func (n *Net) startDNS(addr netip.Addr, z *Zone) error {
	ap := netip.AddrPortFrom(addr, 53)
	var pc net.PacketConn
	var ln net.Listener
	err := netnstest.Run(n.inet, func() error {
		var err error
		if pc, err = net.ListenPacket("udp", ap.String()); err != nil {
			return err
		}
		if ln, err = net.Listen("tcp", ap.String()); err != nil {
			pc.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		proto := "udp"
		if _, ok := w.RemoteAddr().(*net.TCPAddr); ok {
			proto = "tcp"
		}
		from, _ := netip.ParseAddrPort(w.RemoteAddr().String())
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		_ = w.WriteMsg(z.answer(ap, from, proto, req))
	})
	s := &dnsServer{addr: ap, servers: []*dns.Server{
		{PacketConn: pc, Handler: handler},
		{Listener: ln, Handler: handler},
	}}
	n.dns = append(n.dns, s) // closed by Close from here on, started or not
	for _, srv := range s.servers {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		errc := make(chan error, 1)
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			errc <- srv.ActivateAndServe()
		}()
		select {
		case <-started:
		case err := <-errc:
			return fmt.Errorf("dns server %s: %w", ap, err)
		}
	}
	return nil
}

func (s *dnsServer) close() {
	for _, srv := range s.servers {
		_ = srv.Shutdown()
	}
}
