// Package sandboxnet gives every sandbox its own network namespace wired to
// the host by a veth pair. It is the foundation of the egress layer: it
// creates, repairs and removes the kernel objects (a netns persisted as a
// bind mount of its nsfs file, a veth pair, addresses, a default route) and
// allocates addresses; NAT, filtering and the runtime wiring live elsewhere.
//
// Layout under the caller's directory, per sandbox:
//
//	<dir>/<id>       the netns (a bind mount of /proc/<tid>/ns/net)
//	<dir>/<id>.slot  the allocation file: which /30 of the pool it owns
//
// The host end ("alk" + 12 hex of SHA-256(id)) gets the slot's first address,
// the guest end is created directly inside the netns as eth0 with the second
// address and a default route via the host end; lo is up; IPv6 is disabled
// inside the netns (net.ipv6.conf.{all,default}.disable_ipv6=1 there) and on
// the host end alone (net.ipv6.conf.<host end>.disable_ipv6=1). Nothing
// changes the host's global settings: no ip_forward, no global or default
// sysctl, no ruleset.
//
// Crash safety: Attach writes the allocation file before it creates anything
// and Detach removes it last, so every leftover netns or veth is findable from
// the directory; Attach repairs what a crash half-made and Reconcile removes
// what no live sandbox owns.
package sandboxnet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/atomicfile"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/nldump"
)

// Attachment describes one sandbox's network.
type Attachment struct {
	NetnsPath string       // bind-mounted netns file, for the runtime's spec
	HostIf    string       // host end of the veth, in the host netns
	GuestIf   string       // guest end, inside NetnsPath (always "eth0")
	HostAddr  netip.Prefix // e.g. 10.213.0.1/30; the guest's gateway
	GuestAddr netip.Prefix // e.g. 10.213.0.2/30
}

// Pool hands out sandbox networks from one IPv4 prefix, persisting state in
// one directory. Its methods are safe for concurrent use; one process should
// own a directory at a time.
type Pool struct {
	prefix netip.Prefix
	dir    string
	mu     sync.Mutex // serialises allocation and kernel changes
}

// NewPool returns a pool over prefix (IPv4, private, at most /30; the zero
// Prefix means DefaultPrefix) keeping its state in dir, which it creates. It
// refuses a prefix that overlaps an address or a (non-default) route of the
// host on an interface this package did not make: the sandboxes' /30 routes
// would shadow part of that network.
func NewPool(prefix netip.Prefix, dir string) (*Pool, error) {
	if !prefix.IsValid() {
		prefix = DefaultPrefix
	}
	if !prefix.Addr().Is4() || prefix.Bits() > slotBits || prefix.Bits() < 8 {
		return nil, fmt.Errorf("sandboxnet: pool %s must be an IPv4 prefix between /8 and /%d", prefix, slotBits)
	}
	if prefix != prefix.Masked() {
		return nil, fmt.Errorf("sandboxnet: pool %s has host bits set (want %s)", prefix, prefix.Masked())
	}
	if !prefix.Addr().IsPrivate() {
		return nil, fmt.Errorf("sandboxnet: pool %s is not a private (RFC 1918) range", prefix)
	}
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("sandboxnet: directory %q must be absolute", dir)
	}
	if err := checkHostOverlap(prefix); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("sandboxnet: %w", err)
	}
	return &Pool{prefix: prefix, dir: filepath.Clean(dir)}, nil
}

// Prefix returns the pool's address range.
func (p *Pool) Prefix() netip.Prefix { return p.prefix }

func (p *Pool) nsPath(id model.SandboxID) string    { return filepath.Join(p.dir, string(id)) }
func (p *Pool) allocPath(id model.SandboxID) string { return filepath.Join(p.dir, string(id)+".slot") }

// Attach makes (or returns, or repairs) the network of sandbox id. A repeat
// returns the same Attachment; a half-made one is completed and a broken veth
// is rebuilt.
func (p *Pool) Attach(ctx context.Context, id model.SandboxID) (Attachment, error) {
	if _, err := model.ParseSandboxID(string(id)); err != nil {
		return Attachment{}, fmt.Errorf("sandboxnet: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return Attachment{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()

	slot, fresh, err := p.allocate(id)
	if err != nil {
		return Attachment{}, err
	}
	host, guest := slotAddrs(p.prefix, slot)
	a := Attachment{NetnsPath: p.nsPath(id), HostIf: HostIfName(id), GuestIf: GuestIf, HostAddr: host, GuestAddr: guest}
	if fresh {
		// A new allocation must not inherit a veth configured for another slot.
		if err := deleteLink(a.HostIf); err != nil {
			return Attachment{}, err
		}
	}
	if err := ensureNetns(a.NetnsPath); err != nil {
		return Attachment{}, fmt.Errorf("sandboxnet: netns of %s: %w", id, err)
	}
	if err := ensureLinks(a); err != nil {
		return Attachment{}, fmt.Errorf("sandboxnet: veth of %s: %w", id, err)
	}
	return a, nil
}

// Lookup returns sandbox id's Attachment as recorded in the pool without
// touching the kernel (ok false when the sandbox has no allocation): for a
// server that restarts while the sandbox runs, whose runtime may have taken
// over the guest end's configuration (runsc's --network=sandbox moves
// eth0's addresses into its own network stack), so Attach must not repair
// it.
func (p *Pool) Lookup(id model.SandboxID) (a Attachment, ok bool, err error) {
	if _, err := model.ParseSandboxID(string(id)); err != nil {
		return Attachment{}, false, fmt.Errorf("sandboxnet: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	data, err := os.ReadFile(p.allocPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return Attachment{}, false, nil
	}
	if err != nil {
		return Attachment{}, false, fmt.Errorf("sandboxnet: %w", err)
	}
	slot, err := parseAlloc(data, slotCount(p.prefix))
	if err != nil {
		return Attachment{}, false, nil
	}
	host, guest := slotAddrs(p.prefix, slot)
	return Attachment{NetnsPath: p.nsPath(id), HostIf: HostIfName(id), GuestIf: GuestIf, HostAddr: host, GuestAddr: guest}, true, nil
}

// allocate returns id's slot, recording a new one (fresh) if it had none.
// Callers hold p.mu.
func (p *Pool) allocate(id model.SandboxID) (slot int, fresh bool, err error) {
	n := slotCount(p.prefix)
	data, err := os.ReadFile(p.allocPath(id))
	if err == nil {
		if s, perr := parseAlloc(data, n); perr == nil {
			return s, false, nil
		}
		// Unreadable (another pool size, damage): allocate anew below.
	} else if !errors.Is(err, os.ErrNotExist) {
		return 0, false, fmt.Errorf("sandboxnet: %w", err)
	}
	used, err := p.usedSlots(id)
	if err != nil {
		return 0, false, err
	}
	start := preferredSlot(id, n)
	for i := 0; i < n; i++ {
		s := (start + i) % n
		if used[s] {
			continue
		}
		if err := atomicfile.Write(p.allocPath(id), formatAlloc(s), 0o600); err != nil {
			return 0, false, fmt.Errorf("sandboxnet: %w", err)
		}
		return s, true, nil
	}
	return 0, false, fmt.Errorf("sandboxnet: pool %s is full (%d sandboxes)", p.prefix, n)
}

// usedSlots reads every other sandbox's allocation file.
func (p *Pool) usedSlots(except model.SandboxID) (map[int]bool, error) {
	ids, err := p.known()
	if err != nil {
		return nil, err
	}
	n := slotCount(p.prefix)
	used := make(map[int]bool, len(ids))
	for _, id := range ids {
		if id == except {
			continue
		}
		data, err := os.ReadFile(p.allocPath(id))
		if err != nil {
			continue // a netns without an allocation holds no address
		}
		if s, err := parseAlloc(data, n); err == nil {
			used[s] = true
		}
	}
	return used, nil
}

// known lists the sandboxes with anything in the directory.
func (p *Pool) known() ([]model.SandboxID, error) {
	ents, err := os.ReadDir(p.dir)
	if err != nil {
		return nil, fmt.Errorf("sandboxnet: %w", err)
	}
	seen := map[model.SandboxID]bool{}
	var ids []model.SandboxID
	for _, e := range ents {
		name := strings.TrimSuffix(e.Name(), ".slot")
		id, err := model.ParseSandboxID(name)
		if err != nil || seen[id] {
			continue // atomicfile temporaries and foreign files
		}
		seen[id] = true
		ids = append(ids, id)
	}
	return ids, nil
}

// Detach removes sandbox id's veth and netns and frees its address. It is
// idempotent.
func (p *Pool) Detach(ctx context.Context, id model.SandboxID) error {
	if _, err := model.ParseSandboxID(string(id)); err != nil {
		return fmt.Errorf("sandboxnet: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.detachLocked(id)
}

func (p *Pool) detachLocked(id model.SandboxID) error {
	// The host end goes first: a netns kept alive by a process would keep
	// the pair otherwise.
	if err := deleteLink(HostIfName(id)); err != nil {
		return fmt.Errorf("sandboxnet: detach %s: %w", id, err)
	}
	if err := removeNetns(p.nsPath(id)); err != nil {
		return fmt.Errorf("sandboxnet: detach %s: %w", id, err)
	}
	if err := os.Remove(p.allocPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("sandboxnet: detach %s: %w", id, err)
	}
	return atomicfile.SyncDir(p.dir)
}

// Leftovers lists the sandboxes that have a netns, a veth or an address in
// this pool (attached ones included).
func (p *Pool) Leftovers() ([]model.SandboxID, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.known()
}

// Reconcile detaches every sandbox in the pool for which keep returns false,
// e.g. what a server killed mid-create left, and returns their IDs. It also
// removes the temporary files of interrupted allocation writes.
func (p *Pool) Reconcile(ctx context.Context, keep func(model.SandboxID) bool) ([]model.SandboxID, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids, err := p.known()
	if err != nil {
		return nil, err
	}
	var removed []model.SandboxID
	var errs []error
	// Temporaries of an allocation write that a crash interrupted (writes
	// happen under p.mu, so none is in progress now).
	if ents, err := os.ReadDir(p.dir); err == nil {
		for _, e := range ents {
			if n := e.Name(); strings.HasPrefix(n, ".") && strings.Contains(n, ".slot.tmp-") {
				if err := os.Remove(filepath.Join(p.dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
					errs = append(errs, err)
				}
			}
		}
	}
	for _, id := range ids {
		if keep(id) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return removed, err
		}
		if err := p.detachLocked(id); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, id)
	}
	return removed, errors.Join(errs...)
}

// ensureNetns makes path a bind mount of a fresh network namespace unless it
// already is one.
func ensureNetns(path string) error {
	if isNetnsMount(path) {
		return nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	err = inNewThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		src := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		if err := unix.Mount(src, path, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind mount: %w", err)
		}
		// Before eth0 exists, so it never gets an IPv6 address.
		return disableIPv6()
	})
	if err != nil {
		_ = removeNetns(path)
	}
	return err
}

// isNetnsMount reports whether path is a bind mount of a netns.
func isNetnsMount(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.NSFS_MAGIC
}

// disableIPv6 turns IPv6 off in the calling thread's netns: /proc/sys/net is
// resolved in the netns of the thread that opens it.
func disableIPv6() error {
	for _, k := range []string{"all", "default"} {
		f := "/proc/sys/net/ipv6/conf/" + k + "/disable_ipv6"
		if err := os.WriteFile(f, []byte("1\n"), 0); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil // kernel without IPv6
			}
			return err
		}
	}
	return nil
}

// disableIPv6On turns IPv6 off on one interface of the caller's netns.
func disableIPv6On(ifname string) error {
	err := os.WriteFile("/proc/sys/net/ipv6/conf/"+ifname+"/disable_ipv6", []byte("1\n"), 0)
	if errors.Is(err, os.ErrNotExist) {
		if _, serr := os.Stat("/proc/sys/net/ipv6"); errors.Is(serr, os.ErrNotExist) {
			return nil // kernel without IPv6
		}
	}
	return err
}

// inNewThread runs fn on a locked OS thread that fn may move into another
// network namespace. The thread's netns is restored afterwards; if that
// fails the thread is left locked so the Go runtime terminates it, and no
// goroutine ever runs in a namespace it did not ask for.
func inNewThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		err = fn()
		if rerr := netns.Set(orig); rerr != nil {
			errc <- errors.Join(err, fmt.Errorf("restore netns: %w", rerr))
			return // thread stays locked and dies with the goroutine
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// removeNetns unmounts (every layer of) path and removes the file.
func removeNetns(path string) error {
	for i := 0; i < 16; i++ {
		err := unix.Unmount(path, unix.MNT_DETACH)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			break // not a mount point (any more)
		}
		if err != nil {
			return fmt.Errorf("unmount %s: %w", path, err)
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// deleteLink deletes a host link by name if it exists (a veth's peer goes
// with it).
func deleteLink(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("look up %s: %w", name, err)
	}
	if err := netlink.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return nil
}

// ensureLinks makes the veth pair of a exist and be configured, rebuilding it
// when either end is missing or the ends are not each other's peers.
func ensureLinks(a Attachment) error {
	ns, err := netns.GetFromPath(a.NetnsPath)
	if err != nil {
		return err
	}
	defer ns.Close()
	gh, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink handle in netns: %w", err)
	}
	defer gh.Close()

	if !pairIntact(gh, a) {
		if err := deleteLink(a.HostIf); err != nil {
			return err
		}
		if l, err := gh.LinkByName(a.GuestIf); err == nil {
			if err := gh.LinkDel(l); err != nil {
				return fmt.Errorf("delete stale %s: %w", a.GuestIf, err)
			}
		}
		veth := &netlink.Veth{
			LinkAttrs:     netlink.LinkAttrs{Name: a.HostIf},
			PeerName:      a.GuestIf,
			PeerNamespace: netlink.NsFd(int(ns)),
		}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("add veth %s: %w", a.HostIf, err)
		}
	}

	hl, err := netlink.LinkByName(a.HostIf)
	if err != nil {
		return err
	}
	if err := netlink.AddrReplace(hl, &netlink.Addr{IPNet: ipnet(a.HostAddr)}); err != nil {
		return fmt.Errorf("address %s on %s: %w", a.HostAddr, a.HostIf, err)
	}
	// The host end carries no IPv6 either (not even a link-local address):
	// a per-interface setting of an interface this package owns, set before
	// it goes up; the host's global and default settings stay untouched.
	if err := disableIPv6On(a.HostIf); err != nil {
		return fmt.Errorf("disable IPv6 on %s: %w", a.HostIf, err)
	}
	if err := netlink.LinkSetUp(hl); err != nil {
		return fmt.Errorf("up %s: %w", a.HostIf, err)
	}

	lo, err := gh.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := gh.LinkSetUp(lo); err != nil {
		return fmt.Errorf("up lo: %w", err)
	}
	gl, err := gh.LinkByName(a.GuestIf)
	if err != nil {
		return err
	}
	if err := gh.AddrReplace(gl, &netlink.Addr{IPNet: ipnet(a.GuestAddr)}); err != nil {
		return fmt.Errorf("address %s on %s: %w", a.GuestAddr, a.GuestIf, err)
	}
	if err := gh.LinkSetUp(gl); err != nil {
		return fmt.Errorf("up %s: %w", a.GuestIf, err)
	}
	gw := a.HostAddr.Addr().AsSlice()
	if err := gh.RouteReplace(&netlink.Route{LinkIndex: gl.Attrs().Index, Gw: gw}); err != nil {
		return fmt.Errorf("default route via %s: %w", a.HostAddr.Addr(), err)
	}
	return nil
}

// pairIntact reports whether the host end exists and its peer is the guest
// end inside the netns. A veth reports its peer's ifindex as IFLA_LINK
// (ParentIndex); both directions are checked because a fresh netns's eth0
// usually has the same ifindex as one in a destroyed netns whose host end is
// still going away, while host ifindexes are not reused soon.
func pairIntact(gh *netlink.Handle, a Attachment) bool {
	hl, err := netlink.LinkByName(a.HostIf)
	if err != nil {
		return false
	}
	if _, ok := hl.(*netlink.Veth); !ok {
		return false
	}
	gl, err := gh.LinkByName(a.GuestIf)
	if err != nil {
		return false
	}
	if _, ok := gl.(*netlink.Veth); !ok {
		return false
	}
	return hl.Attrs().ParentIndex == gl.Attrs().Index && gl.Attrs().ParentIndex == hl.Attrs().Index
}

// checkHostOverlap fails if an address or a main-table route of the host
// overlaps prefix on an interface other than this package's host ends.
func checkHostOverlap(prefix netip.Prefix) error {
	links, err := nldump.Retry(netlink.LinkList)
	if err != nil {
		return fmt.Errorf("sandboxnet: list links: %w", err)
	}
	names := map[int]string{}
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	ours := func(index int) bool { return strings.HasPrefix(names[index], IfPrefix) }
	addrs, err := nldump.Retry(func() ([]netlink.Addr, error) { return netlink.AddrList(nil, netlink.FAMILY_V4) })
	if err != nil {
		return fmt.Errorf("sandboxnet: list addresses: %w", err)
	}
	for _, a := range addrs {
		if p, ok := toPrefix(a.IPNet); ok && p.Overlaps(prefix) && !ours(a.LinkIndex) {
			return fmt.Errorf("sandboxnet: pool %s overlaps address %s on %s", prefix, p, names[a.LinkIndex])
		}
	}
	routes, err := nldump.Retry(func() ([]netlink.Route, error) { return netlink.RouteList(nil, netlink.FAMILY_V4) })
	if err != nil {
		return fmt.Errorf("sandboxnet: list routes: %w", err)
	}
	for _, r := range routes {
		p, ok := toPrefix(r.Dst)
		if !ok || p.Bits() == 0 {
			continue // the default route overlaps everything
		}
		if p.Overlaps(prefix) && !ours(r.LinkIndex) {
			return fmt.Errorf("sandboxnet: pool %s overlaps route %s on %s", prefix, p, names[r.LinkIndex])
		}
	}
	return nil
}
