// Package nftrules owns Airlock's own nftables table (family inet, name "airlock"): the kernel half
// of sandbox egress. A sandbox's host-side interface joins the set "sandboxes"; from then on
//
//   - a packet from it whose source address does not route back through it (strict reverse-path,
//     "fib saddr . iif oif missing", IPv4 and IPv6) is dropped in the chain "antispoof" at
//     prerouting, priority raw, before conntrack and the redirect: a guest is root in its
//     namespace and can forge any source, and a forged packet redirected to the resolver or the
//     proxy would have its reply sent to that address out of the host's default route (an
//     egress bypass and a reflector), or pass for another sandbox;
//   - its DNS (UDP and TCP port 53) is redirected to the resolver's port and all its other TCP, to
//     any port, to the host proxy's port, whatever address the guest dialled (the proxy recovers
//     it with OriginalDst); UDP other than DNS goes nowhere (it is neither redirected nor routed);
//   - the host accepts from it only those redirected connections, established/related traffic and
//     IPv6 neighbour discovery: it cannot reach the host's own services (the Airlock API included);
//   - nothing is routed from or to it (Airlock never turns on ip_forward; this is the second lock);
//   - with Config.InterfacePrefix, an interface of that prefix that is missing from the set is
//     dropped at input and never forwarded (fail closed), and its forged sources are dropped at
//     prerouting like a sandbox's;
//   - the proxy's and the resolver's ports are closed to every other interface: they listen on
//     all addresses (the redirect delivers to each host end) but serve sandboxes only.
//
// The table also carries the always-denied destinations (policy.AlwaysDeniedPrefixes, which the
// egress policy owns) as the interval sets "denied4" and "denied6", for operators and for rules
// that forward traffic later; the proxy checks the same list with policy.AlwaysDenied.
//
// Nothing outside the table is touched: not other tables, not sysctls. Calls on one table must not
// run concurrently (the server serializes them); every function takes the *nftables.Conn to use,
// so tests hand in one bound to a network namespace (nftables.WithNetNSFd). After an error, use a
// fresh Conn: a failed call may have left unsent messages in the Conn's batch.
package nftrules

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/egress/policy"
)

// Names of the table and its objects.
const (
	TableName      = "airlock"
	SandboxSet     = "sandboxes"
	Denied4Set     = "denied4"
	Denied6Set     = "denied6"
	AntispoofName  = "antispoof"
	PreroutingName = "prerouting"
	InputName      = "input"
	ForwardName    = "forward"
)

// Config is what the rules depend on: the host ports that redirected traffic lands on.
type Config struct {
	// ProxyPort receives the sandboxes' TCP (every port but 53).
	ProxyPort uint16
	// ResolverPort receives the sandboxes' DNS, UDP and TCP.
	ResolverPort uint16
	// InterfacePrefix, if set, makes the table fail closed: traffic from
	// any interface whose name starts with it and that is not in the set
	// (a sandbox whose AddSandbox failed, or was lost) is dropped at input
	// and never forwarded, instead of being ordinary host traffic.
	InterfacePrefix string
}

func (c Config) validate() error {
	if c.ProxyPort == 0 || c.ResolverPort == 0 {
		return fmt.Errorf("nftrules: proxy port %d and resolver port %d must both be set", c.ProxyPort, c.ResolverPort)
	}
	if c.InterfacePrefix != "" {
		if err := validIfname(c.InterfacePrefix); err != nil {
			return fmt.Errorf("nftrules: interface prefix: %w", err)
		}
	}
	return nil
}

var table = &nftables.Table{Family: nftables.TableFamilyINet, Name: TableName}

// ifnameSize is IFNAMSIZ: an interface name with its terminating NUL.
const ifnameSize = 16

func validIfname(name string) error {
	if name == "" || len(name) >= ifnameSize || strings.ContainsAny(name, "/\x00 ") {
		return fmt.Errorf("nftrules: invalid interface name %q", name)
	}
	return nil
}

func ifnameKey(name string) []byte {
	b := make([]byte, ifnameSize)
	copy(b, name)
	return b
}

// Ensure creates the table or repairs it so that it holds exactly what cfg asks for, keeping the
// sandboxes already in the set. When the table already matches, it changes nothing. The rebuild is
// one netlink batch (delete and re-create the table), which the kernel applies atomically; open
// connections keep their NAT through conntrack. The result is read back and checked.
func Ensure(conn *nftables.Conn, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	if err := Check(conn, cfg); err == nil {
		return nil
	}
	keep, err := keptSandboxes(conn)
	if err != nil {
		return err
	}
	// Adding before deleting makes the delete valid whether or not the table exists.
	conn.AddTable(table)
	conn.DelTable(table)
	if err := build(conn, cfg, keep); err != nil {
		return err
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("nftrules: write table %s: %w", TableName, err)
	}
	if err := Check(conn, cfg); err != nil {
		return fmt.Errorf("nftrules: table written but does not read back as expected: %w", err)
	}
	got, err := Sandboxes(conn)
	if err != nil {
		return err
	}
	if !slices.Equal(got, keep) {
		return fmt.Errorf("nftrules: sandboxes %v before rebuild, %v after", keep, got)
	}
	return nil
}

// ErrNoTable is returned (wrapped) when Airlock's table does not exist.
var ErrNoTable = errors.New("nftrules: no table inet " + TableName)

// Remove deletes the whole table; it is not an error when there is none.
func Remove(conn *nftables.Conn) error {
	conn.AddTable(table)
	conn.DelTable(table)
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("nftrules: delete table %s: %w", TableName, err)
	}
	if ok, err := exists(conn); err != nil {
		return err
	} else if ok {
		return fmt.Errorf("nftrules: table %s still present after delete", TableName)
	}
	return nil
}

// AddSandbox puts a sandbox's host-side interface into the set; adding one already there is no
// error. The interface need not exist yet. Ensure must have run.
func AddSandbox(conn *nftables.Conn, ifname string) error {
	return changeSandbox(conn, ifname, true)
}

// RemoveSandbox takes a sandbox's host-side interface out of the set; removing one that is not
// there is no error.
func RemoveSandbox(conn *nftables.Conn, ifname string) error {
	return changeSandbox(conn, ifname, false)
}

func changeSandbox(conn *nftables.Conn, ifname string, add bool) error {
	if err := validIfname(ifname); err != nil {
		return err
	}
	set, err := sandboxSet(conn)
	if err != nil {
		return err
	}
	elem := []nftables.SetElement{{Key: ifnameKey(ifname)}}
	if add {
		// NLM_F_CREATE without NLM_F_EXCL: an existing element is fine.
		err = conn.SetAddElements(set, elem)
	} else {
		// Add then delete in one batch: valid whether or not the element exists.
		if err = conn.SetAddElements(set, elem); err == nil {
			err = conn.SetDeleteElements(set, elem)
		}
	}
	if err != nil {
		return fmt.Errorf("nftrules: sandbox %s: %w", ifname, err)
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("nftrules: sandbox %s: %w", ifname, err)
	}
	names, err := Sandboxes(conn)
	if err != nil {
		return err
	}
	if _, found := slices.BinarySearch(names, ifname); found != add {
		return fmt.Errorf("nftrules: sandbox %s: set reads back as %v", ifname, names)
	}
	return nil
}

// Sandboxes lists the interface names in the set, sorted: after a crash, the ones without a live
// sandbox are leftovers to remove. Without a table it returns an error wrapping ErrNoTable.
func Sandboxes(conn *nftables.Conn) ([]string, error) {
	set, err := sandboxSet(conn)
	if err != nil {
		return nil, err
	}
	elems, err := conn.GetSetElements(set)
	if err != nil {
		return nil, fmt.Errorf("nftrules: read set %s: %w", SandboxSet, err)
	}
	names := make([]string, 0, len(elems))
	for _, e := range elems {
		name, _, _ := strings.Cut(string(e.Key), "\x00")
		names = append(names, name)
	}
	sort.Strings(names)
	return names, nil
}

// keptSandboxes is what Ensure carries over into a rebuilt table: the set's elements, or none when
// there is no table, no such set, or a set of another type (a foreign or half-made table).
func keptSandboxes(conn *nftables.Conn) ([]string, error) {
	names, err := Sandboxes(conn)
	switch {
	case err == nil:
		return names, nil
	case errors.Is(err, ErrNoTable), errors.Is(err, errNoSet):
		return nil, nil
	default:
		return nil, err
	}
}

var errNoSet = errors.New("nftrules: no set " + SandboxSet + " of type ifname")

func exists(conn *nftables.Conn) (bool, error) {
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return false, fmt.Errorf("nftrules: list tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == TableName {
			return true, nil
		}
	}
	return false, nil
}

func sandboxSet(conn *nftables.Conn) (*nftables.Set, error) {
	if ok, err := exists(conn); err != nil {
		return nil, err
	} else if !ok {
		return nil, ErrNoTable
	}
	set, err := conn.GetSetByName(table, SandboxSet)
	if errors.Is(err, unix.ENOENT) {
		return nil, errNoSet
	}
	if err != nil {
		return nil, fmt.Errorf("nftrules: set %s: %w", SandboxSet, err)
	}
	if set.KeyType.Name != nftables.TypeIFName.Name {
		return nil, errNoSet
	}
	return set, nil
}

// Check reads the table back and compares it with what cfg asks for: the chains (hook, priority,
// type, policy), every rule expression by expression, and the always-denied sets. The sandbox set's
// elements are not compared.
func Check(conn *nftables.Conn, cfg Config) error {
	if ok, err := exists(conn); err != nil {
		return err
	} else if !ok {
		return ErrNoTable
	}
	want := desired(cfg)
	chains, err := conn.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return fmt.Errorf("list chains: %w", err)
	}
	var have []*nftables.Chain
	for _, c := range chains {
		if c.Table.Name == TableName {
			have = append(have, c)
		}
	}
	if len(have) != len(want) {
		return fmt.Errorf("%d chains, want %d", len(have), len(want))
	}
	for _, w := range want {
		i := slices.IndexFunc(have, func(c *nftables.Chain) bool { return c.Name == w.chain.Name })
		if i < 0 {
			return fmt.Errorf("chain %s missing", w.chain.Name)
		}
		c := have[i]
		if c.Type != w.chain.Type || !eqPtr(c.Hooknum, w.chain.Hooknum) || !eqPtr(c.Priority, w.chain.Priority) || !eqPtr(c.Policy, w.chain.Policy) {
			return fmt.Errorf("chain %s: type/hook/priority/policy differ", c.Name)
		}
		rules, err := conn.GetRules(table, c)
		if err != nil {
			return fmt.Errorf("chain %s: rules: %w", c.Name, err)
		}
		if len(rules) != len(w.rules) {
			return fmt.Errorf("chain %s: %d rules, want %d", c.Name, len(rules), len(w.rules))
		}
		for j, r := range rules {
			if !sameExprs(r.Exprs, w.rules[j]) {
				return fmt.Errorf("chain %s: rule %d differs: have %s, want %s", c.Name, j, dump(r.Exprs), dump(w.rules[j]))
			}
		}
	}
	sets, err := conn.GetSets(table)
	if err != nil {
		return fmt.Errorf("list sets: %w", err)
	}
	if len(sets) != 3 {
		return fmt.Errorf("%d sets, want 3", len(sets))
	}
	for _, s := range sets {
		switch s.Name {
		case SandboxSet:
			if s.KeyType.Name != nftables.TypeIFName.Name || s.Interval {
				return fmt.Errorf("set %s: wrong type", s.Name)
			}
		case Denied4Set, Denied6Set:
			want, typ := deniedElements(false), nftables.TypeIPAddr
			if s.Name == Denied6Set {
				want, typ = deniedElements(true), nftables.TypeIP6Addr
			}
			if s.KeyType.Name != typ.Name || !s.Interval {
				return fmt.Errorf("set %s: wrong type", s.Name)
			}
			got, err := conn.GetSetElements(s)
			if err != nil {
				return fmt.Errorf("set %s: elements: %w", s.Name, err)
			}
			if err := sameIntervals(got, want); err != nil {
				return fmt.Errorf("set %s: %w", s.Name, err)
			}
		default:
			return fmt.Errorf("unexpected set %s", s.Name)
		}
	}
	return nil
}

func eqPtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// sameExprs compares rule expressions as the kernel returns them with the ones written. The kernel
// does not echo a lookup's set id, so it is ignored.
func sameExprs(have, want []expr.Any) bool {
	if len(have) != len(want) {
		return false
	}
	for i := range have {
		h, w := have[i], want[i]
		if hl, ok := h.(*expr.Lookup); ok {
			if wl, ok := w.(*expr.Lookup); ok {
				a, b := *hl, *wl
				a.SetID, b.SetID = 0, 0
				h, w = &a, &b
			}
		}
		if !reflect.DeepEqual(h, w) {
			return false
		}
	}
	return true
}

func dump(es []expr.Any) string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%T%+v", e, e)
	}
	return b.String()
}

func sameIntervals(have, want []nftables.SetElement) error {
	key := func(e nftables.SetElement) string { return fmt.Sprintf("%x/%v", e.Key, e.IntervalEnd) }
	h := make([]string, 0, len(have))
	for _, e := range have {
		h = append(h, key(e))
	}
	w := make([]string, 0, len(want))
	for _, e := range want {
		w = append(w, key(e))
	}
	sort.Strings(h)
	sort.Strings(w)
	if !slices.Equal(h, w) {
		return fmt.Errorf("elements %v, want %v", h, w)
	}
	return nil
}

// ----- the desired table -----

type chainSpec struct {
	chain *nftables.Chain
	rules [][]expr.Any
}

func desired(cfg Config) []chainSpec {
	// Every base chain accepts by default: the table decides only about sandbox interfaces and
	// leaves the host's own traffic to the host's own ruleset.
	accept := nftables.ChainPolicyAccept
	redirect := func(proto byte, dport, to uint16) []expr.Any {
		return concat(fromSandbox(), l4proto(proto), dportIs(dport),
			[]expr.Any{
				&expr.Immediate{Register: 1, Data: be16(to)},
				// as nft writes it (and the kernel reads it back): min = max, port range given
				&expr.Redir{RegisterProtoMin: 1, RegisterProtoMax: 1, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED},
			})
	}
	redirectAll := func(proto byte, to uint16) []expr.Any {
		return concat(fromSandbox(), l4proto(proto),
			[]expr.Any{
				&expr.Immediate{Register: 1, Data: be16(to)},
				&expr.Redir{RegisterProtoMin: 1, RegisterProtoMax: 1, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED},
			})
	}
	acceptRedirected := func(proto byte, port uint16) []expr.Any {
		return concat(fromSandbox(), ctStatusDNAT(), l4proto(proto), dportIs(port), verdict(expr.VerdictAccept))
	}
	icmp6 := func(typ byte) []expr.Any {
		return concat(fromSandbox(), l4proto(unix.IPPROTO_ICMPV6),
			[]expr.Any{
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{typ}},
			}, verdict(expr.VerdictAccept))
	}
	return []chainSpec{
		{
			// Before conntrack and NAT: a packet whose source address does not route back
			// through the sandbox interface it came in on (a forged one) is dropped before the
			// redirect can deliver it and before a reply can go to that address.
			chain: &nftables.Chain{Name: AntispoofName, Table: table, Type: nftables.ChainTypeFilter,
				Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRaw, Policy: &accept},
			rules: append([][]expr.Any{
				concat(fromSandbox(), sourceNotViaInput(), verdict(expr.VerdictDrop)),
			}, prefixRPF(cfg)...),
		},
		{
			chain: &nftables.Chain{Name: PreroutingName, Table: table, Type: nftables.ChainTypeNAT,
				Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &accept},
			rules: [][]expr.Any{
				// DNS first: TCP 53 goes to the resolver, not the proxy.
				redirect(unix.IPPROTO_UDP, 53, cfg.ResolverPort),
				redirect(unix.IPPROTO_TCP, 53, cfg.ResolverPort),
				redirectAll(unix.IPPROTO_TCP, cfg.ProxyPort),
			},
		},
		{
			chain: &nftables.Chain{Name: InputName, Table: table, Type: nftables.ChainTypeFilter,
				Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept},
			rules: append([][]expr.Any{
				concat(fromSandbox(), ctStateEstablishedRelated(), verdict(expr.VerdictAccept)),
				acceptRedirected(unix.IPPROTO_TCP, cfg.ProxyPort),
				acceptRedirected(unix.IPPROTO_UDP, cfg.ResolverPort),
				acceptRedirected(unix.IPPROTO_TCP, cfg.ResolverPort),
				icmp6(135), // neighbour solicitation
				icmp6(136), // neighbour advertisement
				concat(fromSandbox(), verdict(expr.VerdictDrop)),
				// The proxy and the resolver listen on every address (the
				// redirect delivers to each host end); only sandboxes reach them.
				concat(notFromSandbox(), l4proto(unix.IPPROTO_TCP), dportIs(cfg.ProxyPort), verdict(expr.VerdictDrop)),
				concat(notFromSandbox(), l4proto(unix.IPPROTO_UDP), dportIs(cfg.ResolverPort), verdict(expr.VerdictDrop)),
				concat(notFromSandbox(), l4proto(unix.IPPROTO_TCP), dportIs(cfg.ResolverPort), verdict(expr.VerdictDrop)),
			}, prefixDrops(cfg, expr.MetaKeyIIFNAME)...),
		},
		{
			chain: &nftables.Chain{Name: ForwardName, Table: table, Type: nftables.ChainTypeFilter,
				Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept},
			rules: append([][]expr.Any{
				concat(fromSandbox(), verdict(expr.VerdictDrop)),
				concat(toSandbox(), verdict(expr.VerdictDrop)),
			}, append(prefixDrops(cfg, expr.MetaKeyIIFNAME), prefixDrops(cfg, expr.MetaKeyOIFNAME)...)...),
		},
	}
}

func build(conn *nftables.Conn, cfg Config, sandboxes []string) error {
	conn.AddTable(table)
	sbx := &nftables.Set{Table: table, Name: SandboxSet, KeyType: nftables.TypeIFName}
	elems := make([]nftables.SetElement, 0, len(sandboxes))
	for _, n := range sandboxes {
		elems = append(elems, nftables.SetElement{Key: ifnameKey(n)})
	}
	if err := conn.AddSet(sbx, elems); err != nil {
		return fmt.Errorf("nftrules: set %s: %w", SandboxSet, err)
	}
	for _, v6 := range []bool{false, true} {
		s := &nftables.Set{Table: table, Name: Denied4Set, KeyType: nftables.TypeIPAddr, Interval: true}
		if v6 {
			s = &nftables.Set{Table: table, Name: Denied6Set, KeyType: nftables.TypeIP6Addr, Interval: true}
		}
		if err := conn.AddSet(s, deniedElements(v6)); err != nil {
			return fmt.Errorf("nftrules: set %s: %w", s.Name, err)
		}
	}
	for _, spec := range desired(cfg) {
		c := conn.AddChain(spec.chain)
		for _, r := range spec.rules {
			conn.AddRule(&nftables.Rule{Table: table, Chain: c, Exprs: withSetID(r, sbx.ID)})
		}
	}
	return nil
}

// withSetID fills in the id of the sandbox set created in the same batch.
func withSetID(es []expr.Any, id uint32) []expr.Any {
	out := make([]expr.Any, len(es))
	for i, e := range es {
		if l, ok := e.(*expr.Lookup); ok {
			c := *l
			c.SetID = id
			e = &c
		}
		out[i] = e
	}
	return out
}

func concat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// fromSandbox: meta iifname @sandboxes
func fromSandbox() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Lookup{SourceRegister: 1, SetName: SandboxSet},
	}
}

// notFromSandbox: meta iifname != @sandboxes
func notFromSandbox() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Lookup{SourceRegister: 1, SetName: SandboxSet, Invert: true},
	}
}

// prefixDrops: meta iifname (or oifname) "PREFIX*" drop, when cfg has a prefix.
func prefixDrops(cfg Config, key expr.MetaKey) [][]expr.Any {
	if cfg.InterfacePrefix == "" {
		return nil
	}
	return [][]expr.Any{{
		&expr.Meta{Key: key, Register: 1},
		// A comparison of the prefix's bytes only: how nft writes "PREFIX*".
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(cfg.InterfacePrefix)},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}}
}

// sourceNotViaInput: fib saddr . iif oif missing — strict reverse-path: the packet's source
// address has no route back out of the interface it came in on (the lookup is limited to the
// input interface; no route, or a route through another interface, gives oif 0). The same
// expression covers IPv4 and IPv6 in the inet table.
func sourceNotViaInput() []expr.Any {
	return []expr.Any{
		&expr.Fib{Register: 1, FlagSADDR: true, FlagIIF: true, ResultOIF: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: make([]byte, 4)},
	}
}

// prefixRPF: meta iifname "PREFIX*" fib saddr . iif oif missing drop, when cfg has a prefix:
// the fail-closed guard of an interface missing from the set covers forged sources too.
func prefixRPF(cfg Config) [][]expr.Any {
	if cfg.InterfacePrefix == "" {
		return nil
	}
	return [][]expr.Any{concat([]expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(cfg.InterfacePrefix)},
	}, sourceNotViaInput(), verdict(expr.VerdictDrop))}
}

// toSandbox: meta oifname @sandboxes
func toSandbox() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Lookup{SourceRegister: 1, SetName: SandboxSet},
	}
}

// l4proto: meta l4proto PROTO
func l4proto(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

// dportIs: th dport PORT (TCP and UDP keep it at the same offset)
func dportIs(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: be16(port)},
	}
}

// ctStateEstablishedRelated: ct state established,related
func ctStateEstablishedRelated() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binary.NativeEndian.AppendUint32(nil, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED),
			Xor:  make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}
}

// ctStatusDNAT: ct status dnat (the packet's destination was rewritten, here by our redirect)
func ctStatusDNAT() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binary.NativeEndian.AppendUint32(nil, ipsDstNAT),
			Xor:  make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}
}

// ipsDstNAT is IPS_DST_NAT from linux/netfilter/nf_conntrack_common.h.
const ipsDstNAT = 1 << 5

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }

// deniedElements turns policy.AlwaysDeniedPrefixes of one family into interval-set elements: adjacent or
// overlapping prefixes merged, each range a start element and an end element one past its last
// address (none for a range that runs to the end of the address space).
func deniedElements(v6 bool) []nftables.SetElement {
	type rng struct{ lo, hi netip.Addr }
	var rs []rng
	for _, p := range policy.AlwaysDeniedPrefixes {
		if p.Addr().Is6() != v6 {
			continue
		}
		p = p.Masked()
		rs = append(rs, rng{p.Addr(), lastAddr(p)})
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].lo.Less(rs[j].lo) })
	var merged []rng
	for _, r := range rs {
		if n := len(merged); n > 0 {
			last := &merged[n-1]
			if next := last.hi.Next(); !next.IsValid() || !next.Less(r.lo) {
				if last.hi.Less(r.hi) {
					last.hi = r.hi
				}
				continue
			}
		}
		merged = append(merged, r)
	}
	var out []nftables.SetElement
	for _, r := range merged {
		out = append(out, nftables.SetElement{Key: r.lo.AsSlice()})
		if end := r.hi.Next(); end.IsValid() {
			out = append(out, nftables.SetElement{Key: end.AsSlice(), IntervalEnd: true})
		}
	}
	return out
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
