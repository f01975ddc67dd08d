// Package egress holds what the egress layer knows about each running sandbox: its guest
// address, its compiled policy (swapped live), its DNS bindings, its decision log and its open
// connections. The resolver and the proxy find a sandbox by the source address of a packet
// (Registry.BySource) and ask it to decide (Sandbox.Decide, Sandbox.DecideAddr), which checks
// the address and the policy, requires a live DNS binding for an allowance by name, and logs
// the decision. The API reads and changes the same state by sandbox ID.
package egress

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockdev/airlock/internal/egress/bindings"
	"github.com/airlockdev/airlock/internal/egress/decisionlog"
	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
)

// ErrTooManyConns is returned by Track at a sandbox's connection limit.
var ErrTooManyConns = errors.New("egress: too many open connections for this sandbox")

// DefaultMaxConns is the per-sandbox limit of open proxied connections when the config sets none.
const DefaultMaxConns = 512

// RegistryConfig configures a Registry.
type RegistryConfig struct {
	// MaxConnsPerSandbox bounds each sandbox's open proxied connections (DefaultMaxConns when 0).
	MaxConnsPerSandbox int
	// LogCapacity is each sandbox's decision log size (decisionlog.DefaultCapacity when 0).
	LogCapacity int
	// MaxNames bounds each sandbox's DNS bindings (bindings.DefaultMaxNames when 0).
	MaxNames int
	// Denied reports addresses no sandbox may reach that the policy cannot know: the host's own
	// addresses and the sandbox pool. Nil: none beyond the policy's always-denied ranges.
	Denied func(netip.Addr) bool
	// Now is the clock (time.Now when nil).
	Now    func() time.Time
	Logger *slog.Logger
	// OnDecision, if set, is told of every decision logged (metrics).
	OnDecision func(decisionlog.Event)
}

// Registry maps guest addresses and sandbox IDs to Sandboxes. It is safe for concurrent use.
type Registry struct {
	cfg RegistryConfig

	mu    sync.RWMutex
	bySrc map[netip.Addr]*Sandbox
	byID  map[model.SandboxID]*Sandbox
}

// NewRegistry returns an empty Registry.
func NewRegistry(cfg RegistryConfig) *Registry {
	if cfg.MaxConnsPerSandbox <= 0 {
		cfg.MaxConnsPerSandbox = DefaultMaxConns
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Denied == nil {
		cfg.Denied = func(netip.Addr) bool { return false }
	}
	return &Registry{cfg: cfg, bySrc: map[netip.Addr]*Sandbox{}, byID: map[model.SandboxID]*Sandbox{}}
}

// Add registers a sandbox (or replaces its guest address and policy when already registered,
// keeping its bindings, log and connections) and returns it.
func (r *Registry) Add(id model.SandboxID, guest netip.Addr, p *policy.Policy) *Sandbox {
	guest = guest.Unmap()
	r.mu.Lock()
	defer r.mu.Unlock()
	if sb, ok := r.byID[id]; ok {
		if sb.Guest != guest {
			delete(r.bySrc, sb.Guest)
			sb.Guest = guest
			r.bySrc[guest] = sb
		}
		sb.policy.Store(p)
		return sb
	}
	sb := &Sandbox{
		ID:       id,
		Guest:    guest,
		Bindings: bindings.NewTable(r.cfg.MaxNames),
		Log:      decisionlog.NewObserved(r.cfg.LogCapacity, r.cfg.OnDecision),
		reg:      r,
		conns:    map[*tracked]struct{}{},
	}
	sb.policy.Store(p)
	r.byID[id] = sb
	r.bySrc[guest] = sb
	return sb
}

// Remove forgets a sandbox, closes its open connections and its decision log. Removing an
// unknown sandbox does nothing.
func (r *Registry) Remove(id model.SandboxID) {
	r.mu.Lock()
	sb, ok := r.byID[id]
	if ok {
		delete(r.byID, id)
		if r.bySrc[sb.Guest] == sb {
			delete(r.bySrc, sb.Guest)
		}
	}
	r.mu.Unlock()
	if !ok {
		return
	}
	sb.closeAll()
	sb.Log.Close()
}

// BySource returns the sandbox whose guest address is addr.
func (r *Registry) BySource(addr netip.Addr) (*Sandbox, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	sb, ok := r.bySrc[addr.Unmap().WithZone("")]
	return sb, ok
}

// ByID returns a registered sandbox.
func (r *Registry) ByID(id model.SandboxID) (*Sandbox, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	sb, ok := r.byID[id]
	return sb, ok
}

// GuestAddr returns the guest address of a registered sandbox: the one
// address of its network namespace the host may connect to (the API's
// port proxy dials it, and nothing else of the sandbox's).
func (r *Registry) GuestAddr(id model.SandboxID) (netip.Addr, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	sb, ok := r.byID[id]
	if !ok {
		return netip.Addr{}, false
	}
	return sb.Guest, true
}

// Denied reports whether addr is one no sandbox may reach that the policy cannot know: the
// host's own addresses and the sandbox pool (RegistryConfig.Denied). The resolver and the
// proxy ask it of every address they would hand out or dial.
func (r *Registry) Denied(addr netip.Addr) bool { return r.cfg.Denied(addr.Unmap().WithZone("")) }

// IDs lists the registered sandboxes.
func (r *Registry) IDs() []model.SandboxID {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]model.SandboxID, 0, len(r.byID))
	for id := range r.byID {
		out = append(out, id)
	}
	return out
}

// Sandbox is one sandbox's egress state.
type Sandbox struct {
	ID       model.SandboxID
	Guest    netip.Addr // guarded by the registry's lock once registered
	Bindings *bindings.Table
	Log      *decisionlog.Log

	reg    *Registry
	policy atomic.Pointer[policy.Policy]

	mu    sync.Mutex
	conns map[*tracked]struct{}

	reloadMu sync.Mutex // one Reload at a time, so the last one wins with the latest policy
}

// Policy is the sandbox's current policy.
func (s *Sandbox) Policy() *policy.Policy { return s.policy.Load() }

// Conn describes an open proxied connection.
type Conn struct {
	Host  string // the name it was allowed by; "" for a connection by address
	Addr  netip.Addr
	Port  uint16
	Close func() error
}

type tracked struct{ c Conn }

// Track registers an open connection so that SetPolicy can cut it; release unregisters it.
// At the sandbox's limit it returns ErrTooManyConns (and logs a denial).
func (s *Sandbox) Track(c Conn) (release func(), err error) {
	t := &tracked{c: c}
	s.mu.Lock()
	if len(s.conns) >= s.reg.cfg.MaxConnsPerSandbox {
		n := len(s.conns)
		s.mu.Unlock()
		s.Log.Append(decisionlog.Event{Kind: decisionlog.KindConnect, Host: c.Host, Addr: addrString(c.Addr), Port: c.Port,
			Rule: "connection-limit", Reason: fmt.Sprintf("the sandbox already has %d open connections, its limit", n)})
		return nil, ErrTooManyConns
	}
	s.conns[t] = struct{}{}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.conns, t)
		s.mu.Unlock()
	}, nil
}

// OpenConns is the number of tracked connections.
func (s *Sandbox) OpenConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// SetPolicy swaps the sandbox's policy: new connections follow it at once, and every open
// connection the new policy denies is closed (and logged as a cut).
func (s *Sandbox) SetPolicy(p *policy.Policy) {
	s.policy.Store(p)
	s.mu.Lock()
	var cut []*tracked
	for t := range s.conns {
		var d policy.Decision
		if t.c.Host != "" {
			d = p.Dest(t.c.Host, t.c.Addr, t.c.Port)
		} else {
			d = p.Addr(t.c.Addr, t.c.Port)
		}
		if !d.Allowed {
			cut = append(cut, t)
			delete(s.conns, t)
		}
	}
	s.mu.Unlock()
	for _, t := range cut {
		d := p.Dest(t.c.Host, t.c.Addr, t.c.Port)
		if t.c.Host == "" {
			d = p.Addr(t.c.Addr, t.c.Port)
		}
		s.Log.Append(decisionlog.Event{Kind: decisionlog.KindCut, Host: t.c.Host, Addr: addrString(t.c.Addr), Port: t.c.Port,
			Rule: d.Rule, Reason: "open connection closed by a policy change: " + d.Reason})
		if t.c.Close != nil {
			_ = t.c.Close()
		}
	}
}

// Reload sets the policy load returns, one Reload at a time: when the stored policy changes
// while another Reload of the same sandbox is under way, the later Reload reads the later
// policy and is applied last. Writers store first and then Reload (registration, a PUT, a
// profile change), so the live policy ends as the stored one, whatever the interleaving.
func (s *Sandbox) Reload(load func() (*policy.Policy, error)) error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	p, err := load()
	if err != nil {
		return err
	}
	s.SetPolicy(p)
	return nil
}

func (s *Sandbox) closeAll() {
	s.mu.Lock()
	conns := s.conns
	s.conns = map[*tracked]struct{}{}
	s.mu.Unlock()
	for t := range conns {
		if t.c.Close != nil {
			_ = t.c.Close()
		}
	}
}

// Explain answers what Decide would, without logging and without the binding check (an
// explanation has no dialled address); an allowance by name says it needs a DNS binding.
func (s *Sandbox) Explain(host string, addr netip.Addr, port uint16) policy.Decision {
	return s.decide(host, addr, port, false)
}

// Decide judges a connection or a query and logs the decision as an event of kind:
//
//   - host set, addr invalid: may host be resolved (port 0) or used on port;
//   - host set, addr valid: a connection by name to the address the guest dialled; an
//     allowance by name also needs a live binding of host to addr;
//   - host empty: a connection by address (see DecideAddr for the binding fallback).
func (s *Sandbox) Decide(kind, host string, addr netip.Addr, port uint16) policy.Decision {
	d := s.decide(host, addr, port, true)
	s.logDecision(kind, host, addr, port, d)
	return d
}

// DecideAddr judges a connection with no name to addr:port: an address rule, or else a name
// bound to addr that an allow rule names with this very port (policy.NamedPort; the first such
// name is returned). Logged.
func (s *Sandbox) DecideAddr(kind string, addr netip.Addr, port uint16) (policy.Decision, string) {
	d := s.decide("", addr, port, true)
	name := ""
	if p := s.Policy(); !d.Allowed && d.Rule == "no-address-rule" && p != nil {
		for _, n := range s.Bindings.Names(addr, s.reg.cfg.Now()) {
			if nd := p.NamedPort(n, addr, port); nd.Allowed {
				d, name = nd, n
				break
			} else if nd.Rule == "no-port-rule" && p.Name(n, port).Allowed {
				d = nd // an allowed name: say that the port needs a rule of its own
			}
		}
	}
	s.logDecision(kind, name, addr, port, d)
	return d, name
}

func (s *Sandbox) decide(host string, addr netip.Addr, port uint16, checkBinding bool) policy.Decision {
	p := s.Policy()
	if p == nil {
		return policy.Decision{Rule: "no-policy", Reason: "the sandbox has no egress policy yet"}
	}
	if addr.IsValid() && s.reg.cfg.Denied(addr.Unmap().WithZone("")) {
		return policy.Decision{Rule: "always-denied", Reason: fmt.Sprintf("%s is an address of this host or of a sandbox, which no policy allows", addr)}
	}
	if host == "" {
		return p.Addr(addr, port)
	}
	name, err := policy.NormalizeName(host)
	if err != nil {
		return p.Name(host, port) // the policy's own "invalid-name" denial
	}
	d := p.Dest(name, addr, port)
	if !d.Allowed || !d.ByName {
		return d
	}
	if !addr.IsValid() {
		if port != 0 && !checkBinding {
			d.Reason += "; a connection also needs a live DNS binding of the name to the address dialled"
		}
		return d
	}
	if checkBinding && !s.Bindings.Has(name, addr, s.reg.cfg.Now()) {
		return policy.Decision{Rule: "no-binding", Reason: fmt.Sprintf("%s did not resolve to %s through Airlock's resolver for this sandbox (or the binding expired): %s", name, addr, d.Reason)}
	}
	return d
}

func (s *Sandbox) logDecision(kind, host string, addr netip.Addr, port uint16, d policy.Decision) {
	s.Log.Append(decisionlog.Event{Kind: kind, Host: host, Addr: addrString(addr), Port: port, Allowed: d.Allowed, Rule: d.Rule, Reason: d.Reason})
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}
