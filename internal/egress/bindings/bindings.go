// Package bindings keeps the DNS bindings of one sandbox: which addresses each name resolved to
// through Airlock's resolver, and until when. The proxy allows a connection by name only when
// the name is bound to the address the guest dialled, so a guest cannot make an allowed name
// point at an address of its choosing (a forged /etc/hosts, its own resolver), and an address
// shared by an allowed and a blocked name is reached only under the allowed name.
//
// A Table is bounded: beyond its capacity in names, the name whose bindings expire first is
// forgotten (counted in Evicted), and a later connection to it is denied until it is resolved
// again — a refusal the decision log shows, never a silent allowance. Each name keeps at most
// MaxAddrsPerName addresses (the first ones of an answer; more are counted in Dropped), so an
// answer of thousands of records cannot make one sandbox's table huge.
package bindings

import (
	"net/netip"
	"sync"
	"time"
)

// Table holds one sandbox's bindings. It is safe for concurrent use.
type Table struct {
	max int

	mu      sync.Mutex
	byName  map[string]map[netip.Addr]time.Time // name → address → expiry
	byAddr  map[netip.Addr]map[string]struct{}
	evicted uint64
	dropped uint64
}

// DefaultMaxNames is the capacity NewTable uses for a non-positive maxNames.
const DefaultMaxNames = 4096

// MaxAddrsPerName bounds the addresses one name is bound to at once (a CDN answers a handful).
const MaxAddrsPerName = 32

// NewTable returns an empty Table remembering at most maxNames names.
func NewTable(maxNames int) *Table {
	if maxNames <= 0 {
		maxNames = DefaultMaxNames
	}
	return &Table{max: maxNames, byName: map[string]map[netip.Addr]time.Time{}, byAddr: map[netip.Addr]map[string]struct{}{}}
}

// Record binds name to each of addrs until now+ttl (extending, never shortening, a binding
// that already exists). Names are used as given: callers pass them normalized.
func (t *Table) Record(name string, addrs []netip.Addr, ttl time.Duration, now time.Time) {
	if len(addrs) == 0 || ttl <= 0 {
		return
	}
	until := now.Add(ttl)
	t.mu.Lock()
	defer t.mu.Unlock()
	m, ok := t.byName[name]
	if !ok {
		if len(t.byName) >= t.max {
			// Full: sweep what expired (a pass over at most max names ×
			// MaxAddrsPerName bindings, only when full), then evict.
			t.expireLocked(now)
		}
		for len(t.byName) >= t.max {
			t.evictLocked()
		}
		m = map[netip.Addr]time.Time{}
		t.byName[name] = m
	}
	for _, a := range addrs {
		a = a.Unmap().WithZone("")
		if _, held := m[a]; !held && len(m) >= MaxAddrsPerName {
			t.dropped++
			continue
		}
		if m[a].Before(until) {
			m[a] = until
		}
		s, ok := t.byAddr[a]
		if !ok {
			s = map[string]struct{}{}
			t.byAddr[a] = s
		}
		s[name] = struct{}{}
	}
}

// Has reports whether name has a live binding to addr.
func (t *Table) Has(name string, addr netip.Addr, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	exp, ok := t.byName[name][addr.Unmap().WithZone("")]
	return ok && now.Before(exp)
}

// Names returns the names with a live binding to addr, in no particular order.
func (t *Table) Names(addr netip.Addr, now time.Time) []string {
	addr = addr.Unmap().WithZone("")
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for n := range t.byAddr[addr] {
		if now.Before(t.byName[n][addr]) {
			out = append(out, n)
		}
	}
	return out
}

// Addrs returns the addresses name is bound to now.
func (t *Table) Addrs(name string, now time.Time) []netip.Addr {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []netip.Addr
	for a, exp := range t.byName[name] {
		if now.Before(exp) {
			out = append(out, a)
		}
	}
	return out
}

// Len is the number of names held (live or not yet swept).
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byName)
}

// Evicted counts names forgotten, live, because the table was full.
func (t *Table) Evicted() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.evicted
}

// Dropped counts addresses not bound because their name already had MaxAddrsPerName.
func (t *Table) Dropped() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.dropped
}

// expireLocked drops every binding that has expired.
func (t *Table) expireLocked(now time.Time) {
	for n, m := range t.byName {
		for a, exp := range m {
			if !now.Before(exp) {
				t.dropLocked(n, a)
			}
		}
	}
}

// evictLocked forgets the name whose last binding expires first.
func (t *Table) evictLocked() {
	var victim string
	var victimExp time.Time
	for n, m := range t.byName {
		var last time.Time
		for _, exp := range m {
			if exp.After(last) {
				last = exp
			}
		}
		if victim == "" || last.Before(victimExp) {
			victim, victimExp = n, last
		}
	}
	for a := range t.byName[victim] {
		t.dropLocked(victim, a)
	}
	delete(t.byName, victim)
	t.evicted++
}

func (t *Table) dropLocked(name string, a netip.Addr) {
	delete(t.byName[name], a)
	if len(t.byName[name]) == 0 {
		delete(t.byName, name)
	}
	delete(t.byAddr[a], name)
	if len(t.byAddr[a]) == 0 {
		delete(t.byAddr, a)
	}
}
