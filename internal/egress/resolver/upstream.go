package resolver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"

	"github.com/miekg/dns"

	"github.com/airlockdev/airlock/internal/egress"
	"github.com/airlockdev/airlock/internal/egress/policy"
)

// errBusy is returned when a sandbox's upstream slots stayed full until its query's deadline.
var errBusy = errors.New("too many queries in flight for this sandbox")

// inflight bounds the upstream queries of each sandbox: one counting semaphore per sandbox,
// created on first use and dropped when its last holder leaves, so removed sandboxes leave
// nothing behind.
type inflight struct {
	max int
	mu  sync.Mutex
	by  map[*egress.Sandbox]*slot
}

type slot struct {
	sem   chan struct{}
	users int // holders and waiters
}

func (f *inflight) init(max int) {
	f.max = max
	f.by = map[*egress.Sandbox]*slot{}
}

// maxWaitersFactor bounds the queries of one sandbox waiting for a slot, as a multiple of the
// slots: beyond it a query fails at once instead of parking a goroutine for its whole timeout.
const maxWaitersFactor = 4

// acquire waits for one of sb's slots until ctx ends; release gives it back.
func (f *inflight) acquire(ctx context.Context, sb *egress.Sandbox) (release func(), err error) {
	f.mu.Lock()
	s, ok := f.by[sb]
	if !ok {
		s = &slot{sem: make(chan struct{}, f.max)}
		f.by[sb] = s
	}
	if s.users >= f.max*(1+maxWaitersFactor) {
		f.mu.Unlock()
		return nil, errBusy
	}
	s.users++
	f.mu.Unlock()
	leave := func() {
		f.mu.Lock()
		s.users--
		if s.users == 0 {
			delete(f.by, sb)
		}
		f.mu.Unlock()
	}
	select {
	case s.sem <- struct{}{}:
		return func() { <-s.sem; leave() }, nil
	case <-ctx.Done():
		leave()
		return nil, errBusy
	}
}

// forward asks the upstream about name (normalized, no trailing dot) and qtype: over UDP
// first, once more over UDP when the first attempt fails, then over TCP when an answer came
// back truncated. It checks that the answer is a response to this very question.
func (r *Resolver) forward(ctx context.Context, name string, qtype uint16) (*dns.Msg, error) {
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), qtype)
	q.RecursionDesired = true
	q.SetEdns0(upstreamUDPSize, false)

	var resp *dns.Msg
	var err error
	udp := &dns.Client{Net: "udp", Timeout: r.cfg.AttemptTimeout, UDPSize: upstreamUDPSize}
	for attempt := 0; attempt < 2; attempt++ {
		resp, _, err = udp.ExchangeContext(ctx, q, r.cfg.Upstream)
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	if err == nil && resp.Truncated {
		tcp := &dns.Client{Net: "tcp", Timeout: r.cfg.AttemptTimeout}
		resp, _, err = tcp.ExchangeContext(ctx, q, r.cfg.Upstream)
	}
	if err != nil {
		return nil, fmt.Errorf("upstream %s: %w", r.cfg.Upstream, err)
	}
	if !resp.Response || resp.Opcode != dns.OpcodeQuery || len(resp.Question) != 1 ||
		!strings.EqualFold(resp.Question[0].Name, q.Question[0].Name) ||
		resp.Question[0].Qtype != qtype || resp.Question[0].Qclass != dns.ClassINET {
		return nil, fmt.Errorf("upstream %s: the answer is not for the question asked", r.cfg.Upstream)
	}
	return resp, nil
}

// Lookup resolves name (A, then AAAA) through the upstream, as the proxy must: its own
// resolution, from the same server the sandboxes' queries go to, and never the host's
// /etc/hosts or the guest's answers. The addresses come unfiltered (the proxy judges each
// one); an answer with neither record type is an error.
func (r *Resolver) Lookup(ctx context.Context, name string) ([]netip.Addr, error) {
	name, err := policy.NormalizeName(name)
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	var errs []error
	for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA} {
		resp, err := r.forward(ctx, name, qtype)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, rr := range resp.Answer {
			var ip net.IP
			switch v := rr.(type) {
			case *dns.A:
				ip = v.A
			case *dns.AAAA:
				ip = v.AAAA
			default:
				continue
			}
			if a, ok := netip.AddrFromSlice(ip); ok {
				out = append(out, a.Unmap())
			}
		}
	}
	if len(out) == 0 {
		if len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		return nil, fmt.Errorf("%s: no address", name)
	}
	return out, nil
}
