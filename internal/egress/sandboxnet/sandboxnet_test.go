package sandboxnet

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"

	"github.com/airlockdev/airlock/internal/egress/netnstest"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/nldump"
	"github.com/airlockdev/airlock/internal/rootfs/mountinfo"
)

// testPrefix is a pool no other Airlock component or common host tool uses
// by default; tests use it instead of DefaultPrefix so they do not collide
// with a server running on this host.
var testPrefix = netip.MustParsePrefix("10.214.0.0/16")

// hostState is what the tests must leave as they found it.
type hostState struct {
	threadsNetns string // the netns every thread of the process is in
	ipForward    string
	hostIPv6Off  string
}

func readHostState(t *testing.T) hostState {
	t.Helper()
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	fw, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	v6, _ := os.ReadFile("/proc/sys/net/ipv6/conf/all/disable_ipv6")
	return hostState{threadsNetns: self, ipForward: string(fw), hostIPv6Off: string(v6)}
}

// newTestPool makes a pool in a temporary directory and, at cleanup, proves
// that nothing the test made is left: no veth, no netns file, no mount, no
// thread in another netns, no host setting changed.
func newTestPool(t *testing.T) (*Pool, *idSet) {
	t.Helper()
	netnstest.RequireNetAdmin(t)
	before := readHostState(t)
	dir := filepath.Join(t.TempDir(), "netns")
	p, err := NewPool(testPrefix, dir)
	if err != nil {
		t.Fatal(err)
	}
	ids := &idSet{}
	t.Cleanup(func() {
		if _, err := p.Reconcile(context.Background(), func(model.SandboxID) bool { return false }); err != nil {
			t.Errorf("cleanup reconcile: %v", err)
		}
		assertClean(t, p, ids.all())
		after := readHostState(t)
		if after.ipForward != before.ipForward || after.hostIPv6Off != before.hostIPv6Off {
			t.Errorf("host settings changed: %+v → %+v", before, after)
		}
		assertThreadsInNetns(t, before.threadsNetns)
	})
	return p, ids
}

type idSet struct {
	mu  sync.Mutex
	ids []model.SandboxID
}

func (s *idSet) new() model.SandboxID {
	id := model.NewSandboxID()
	s.mu.Lock()
	s.ids = append(s.ids, id)
	s.mu.Unlock()
	return id
}

func (s *idSet) all() []model.SandboxID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]model.SandboxID(nil), s.ids...)
}

// assertClean fails if any veth of ids, any file in the pool directory or any
// mount under it exists.
func assertClean(t *testing.T, p *Pool, ids []model.SandboxID) {
	t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want[HostIfName(id)] = true
	}
	links, err := nldump.Retry(netlink.LinkList)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if n := l.Attrs().Name; strings.HasPrefix(n, IfPrefix) && want[n] {
			t.Errorf("veth %s left behind", n)
		}
	}
	ents, err := os.ReadDir(p.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("file %s left in the pool directory", e.Name())
	}
	mounts, err := mountinfo.Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		if m.MountPoint == p.dir || strings.HasPrefix(m.MountPoint, p.dir+"/") {
			t.Errorf("mount %s left behind", m.MountPoint)
		}
	}
}

// assertThreadsInNetns fails if any thread of this process is in another
// network namespace than want (a goroutine left locked in a sandbox's).
func assertThreadsInNetns(t *testing.T, want string) {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		got, err := os.Readlink("/proc/self/task/" + task.Name() + "/ns/net")
		if err != nil {
			continue // the thread exited
		}
		if got != want {
			t.Errorf("thread %s is in %s, want %s", task.Name(), got, want)
		}
	}
}

// inNetns runs fn on a thread inside the netns at path.
func inNetns(t *testing.T, path string, fn func() error) error {
	t.Helper()
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return err
	}
	defer ns.Close()
	return inNewThread(func() error {
		if err := netns.Set(ns); err != nil {
			return err
		}
		return fn()
	})
}

// checkAttachment verifies the kernel state of a.
func checkAttachment(t *testing.T, a Attachment) {
	t.Helper()
	hl, err := netlink.LinkByName(a.HostIf)
	if err != nil {
		t.Fatalf("host end: %v", err)
	}
	if _, ok := hl.(*netlink.Veth); !ok || hl.Attrs().Flags&net.FlagUp == 0 {
		t.Fatalf("host end %s: %T flags %v", a.HostIf, hl, hl.Attrs().Flags)
	}
	addrs, err := nldump.Retry(func() ([]netlink.Addr, error) { return netlink.AddrList(hl, netlink.FAMILY_ALL) })
	if err != nil {
		t.Fatal(err)
	}
	if len(addrs) != 1 || addrs[0].IPNet.String() != a.HostAddr.String() {
		t.Fatalf("host end addresses %v, want only %s", addrs, a.HostAddr)
	}
	ns, err := netns.GetFromPath(a.NetnsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	gh, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer gh.Close()
	lo, err := gh.LinkByName("lo")
	if err != nil || lo.Attrs().Flags&net.FlagUp == 0 {
		t.Fatalf("guest lo not up: %v", err)
	}
	gl, err := gh.LinkByName("eth0")
	if err != nil || gl.Attrs().Flags&net.FlagUp == 0 {
		t.Fatalf("guest eth0 not up: %v", err)
	}
	gaddrs, err := nldump.Retry(func() ([]netlink.Addr, error) { return gh.AddrList(gl, netlink.FAMILY_ALL) })
	if err != nil {
		t.Fatal(err)
	}
	if len(gaddrs) != 1 || gaddrs[0].IPNet.String() != a.GuestAddr.String() {
		t.Fatalf("guest addresses %v, want only %s (no IPv6)", gaddrs, a.GuestAddr)
	}
	routes, err := nldump.Retry(func() ([]netlink.Route, error) { return gh.RouteList(nil, netlink.FAMILY_V4) })
	if err != nil {
		t.Fatal(err)
	}
	var gw bool
	for _, r := range routes {
		if (r.Dst == nil || r.Dst.String() == "0.0.0.0/0") && r.Gw.Equal(a.HostAddr.Addr().AsSlice()) {
			gw = true
		}
	}
	if !gw {
		t.Fatalf("no default route via %s in %v", a.HostAddr.Addr(), routes)
	}
	err = inNetns(t, a.NetnsPath, func() error {
		for _, k := range []string{"all", "default", "eth0"} {
			v, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + k + "/disable_ipv6")
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return err
			}
			if strings.TrimSpace(string(v)) != "1" {
				return errors.New("IPv6 enabled on " + k)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("guest IPv6: %v", err)
	}
}

func TestChurn(t *testing.T) {
	p, ids := newTestPool(t)
	ctx := context.Background()
	const n = 20
	for round := 0; round < 2; round++ {
		var wg sync.WaitGroup
		atts := make([]Attachment, n)
		errs := make([]error, n)
		sbx := make([]model.SandboxID, n)
		for i := range n {
			sbx[i] = ids.new()
			wg.Add(1)
			go func() {
				defer wg.Done()
				a, err := p.Attach(ctx, sbx[i])
				if err == nil {
					var again Attachment
					again, err = p.Attach(ctx, sbx[i])
					if err == nil && again != a {
						err = errors.New("repeat Attach returned a different attachment")
					}
				}
				atts[i], errs[i] = a, err
			}()
		}
		wg.Wait()
		hosts := map[netip.Addr]bool{}
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("attach %s: %v", sbx[i], errs[i])
			}
			checkAttachment(t, atts[i])
			for _, a := range []netip.Addr{atts[i].HostAddr.Addr(), atts[i].GuestAddr.Addr()} {
				if hosts[a] || !testPrefix.Contains(a) {
					t.Fatalf("address %s reused or outside the pool", a)
				}
				hosts[a] = true
			}
		}
		left, err := p.Leftovers()
		if err != nil || len(left) != n {
			t.Fatalf("Leftovers = %d, %v; want %d", len(left), err, n)
		}
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = p.Detach(ctx, sbx[i])
				if errs[i] == nil {
					errs[i] = p.Detach(ctx, sbx[i]) // idempotent
				}
			}()
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("detach %s: %v", sbx[i], errs[i])
			}
		}
		assertClean(t, p, ids.all())
	}
}

// TestGuestReachesHostEnd: from inside the netns, ping and a TCP connection
// reach a listener on the host end's address (an address on an interface the
// test made; no traffic goes anywhere else).
func TestGuestReachesHostEnd(t *testing.T) {
	p, ids := newTestPool(t)
	a, err := p.Attach(context.Background(), ids.new())
	if err != nil {
		t.Fatal(err)
	}
	checkAttachment(t, a)
	assertGuestReachesHost(t, a)
}

func assertGuestReachesHost(t *testing.T, a Attachment) {
	t.Helper()
	ln, err := net.Listen("tcp4", netip.AddrPortFrom(a.HostAddr.Addr(), 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		peer string
		line string
	}
	got := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- result{}
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		line, _ := bufio.NewReader(c).ReadString('\n')
		_, _ = io.WriteString(c, "pong\n")
		got <- result{c.RemoteAddr().String(), line}
	}()

	err = inNetns(t, a.NetnsPath, func() error {
		// ICMP echo to the host end.
		pc, err := icmp.ListenPacket("ip4:icmp", a.GuestAddr.Addr().String())
		if err != nil {
			return err
		}
		defer pc.Close()
		msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: 0x4a4c, Seq: 1, Data: []byte("airlock")}}
		b, _ := msg.Marshal(nil)
		if _, err := pc.WriteTo(b, &net.IPAddr{IP: a.HostAddr.Addr().AsSlice()}); err != nil {
			return err
		}
		_ = pc.SetReadDeadline(time.Now().Add(5 * time.Second))
		for {
			buf := make([]byte, 1500)
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return errors.New("no echo reply: " + err.Error())
			}
			m, err := icmp.ParseMessage(1, buf[:n])
			if err == nil && m.Type == ipv4.ICMPTypeEchoReply && from.String() == a.HostAddr.Addr().String() {
				break
			}
		}
		// TCP to the host's listener.
		c, err := net.DialTimeout("tcp4", ln.Addr().String(), 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "ping\n"); err != nil {
			return err
		}
		reply, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || reply != "pong\n" {
			return errors.New("bad reply " + reply)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("from the guest: %v", err)
	}
	r := <-got
	if r.line != "ping\n" || !strings.HasPrefix(r.peer, a.GuestAddr.Addr().String()+":") {
		t.Fatalf("listener saw %+v, want ping from %s", r, a.GuestAddr.Addr())
	}
}

// TestReconcileAfterCrash: a server that dies mid-create leaves a netns and a
// veth (or only part of them) that a new Pool on the same directory finds
// and removes; what keep reports live stays.
func TestReconcileAfterCrash(t *testing.T) {
	p, ids := newTestPool(t)
	ctx := context.Background()
	full, kept, half, bare := ids.new(), ids.new(), ids.new(), ids.new()
	for _, id := range []model.SandboxID{full, kept} {
		if _, err := p.Attach(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	// half: allocation and netns but no veth (killed between the two).
	if _, _, err := p.allocate(half); err != nil {
		t.Fatal(err)
	}
	if err := ensureNetns(p.nsPath(half)); err != nil {
		t.Fatal(err)
	}
	// bare: only the allocation file.
	if _, _, err := p.allocate(bare); err != nil {
		t.Fatal(err)
	}

	// "Restart": the old Pool is forgotten.
	p2, err := NewPool(testPrefix, p.dir)
	if err != nil {
		t.Fatal(err)
	}
	removed, err := p2.Reconcile(ctx, func(id model.SandboxID) bool { return id == kept })
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 3 {
		t.Fatalf("removed %v, want 3", removed)
	}
	left, err := p2.Leftovers()
	if err != nil || len(left) != 1 || left[0] != kept {
		t.Fatalf("Leftovers = %v, %v; want [%s]", left, err, kept)
	}
	for _, id := range []model.SandboxID{full, half} {
		if _, err := netlink.LinkByName(HostIfName(id)); err == nil {
			t.Errorf("veth of %s survived Reconcile", id)
		}
	}
	a, err := p2.Attach(ctx, kept)
	if err != nil {
		t.Fatal(err)
	}
	checkAttachment(t, a)
}

// TestAttachRepairs: Attach after a partial or damaged attachment restores it
// with the same addresses.
func TestAttachRepairs(t *testing.T) {
	p, ids := newTestPool(t)
	ctx := context.Background()
	id := ids.new()
	a, err := p.Attach(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		damage func() error
	}{
		{"veth deleted", func() error {
			l, err := netlink.LinkByName(a.HostIf)
			if err != nil {
				return err
			}
			return netlink.LinkDel(l)
		}},
		{"host end down and address gone", func() error {
			l, err := netlink.LinkByName(a.HostIf)
			if err != nil {
				return err
			}
			if err := netlink.LinkSetDown(l); err != nil {
				return err
			}
			return netlink.AddrDel(l, &netlink.Addr{IPNet: ipnet(a.HostAddr)})
		}},
		{"guest route gone", func() error {
			return inNetns(t, a.NetnsPath, func() error {
				return netlink.RouteDel(&netlink.Route{Gw: a.HostAddr.Addr().AsSlice()})
			})
		}},
		{"netns unmounted", func() error { return removeNetns(a.NetnsPath) }},
		{"netns file left unmounted", func() error {
			if err := removeNetns(a.NetnsPath); err != nil {
				return err
			}
			return os.WriteFile(a.NetnsPath, nil, 0o600)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.damage(); err != nil {
				t.Fatal(err)
			}
			again, err := p.Attach(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if again != a {
				t.Fatalf("repaired attachment %+v, want %+v", again, a)
			}
			checkAttachment(t, again)
			assertGuestReachesHost(t, again)
		})
	}
}

func TestAttachRejectsBadID(t *testing.T) {
	p, err := NewPool(testPrefix, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []model.SandboxID{"", "../x", "sbx_" + "short"} {
		if _, err := p.Attach(context.Background(), id); err == nil {
			t.Errorf("Attach(%q) accepted", id)
		}
		if err := p.Detach(context.Background(), id); err == nil {
			t.Errorf("Detach(%q) accepted", id)
		}
	}
}

// TestNewPoolRefusesHostOverlap: a pool overlapping a network the host
// already has would shadow it. The test makes its own veth pair (this kernel
// has no dummy driver) with an address; no traffic is sent.
func TestNewPoolRefusesHostOverlap(t *testing.T) {
	netnstest.RequireNetAdmin(t)
	name := "sbnt" + strconv.Itoa(os.Getpid()%100000)
	dummy := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}
	if err := netlink.LinkAdd(dummy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := netlink.LinkDel(dummy); err != nil {
			t.Errorf("delete %s: %v", name, err)
		}
	})
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: ipnet(netip.MustParsePrefix("10.215.3.1/24"))}); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	_, err = NewPool(netip.MustParsePrefix("10.215.0.0/16"), t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "overlaps") {
		t.Fatalf("NewPool over the host's 10.215.3.0/24: %v", err)
	}
	if _, err := NewPool(netip.MustParsePrefix("10.216.0.0/16"), t.TempDir()); err != nil {
		t.Fatalf("a disjoint pool: %v", err)
	}
}

// TestLookup: Lookup reports what Attach made, without touching the kernel,
// and nothing for a sandbox without an allocation.
func TestLookup(t *testing.T) {
	p, ids := newTestPool(t)
	ctx := context.Background()
	id := ids.new()
	if _, ok, err := p.Lookup(id); ok || err != nil {
		t.Fatalf("Lookup before Attach = %v, %v", ok, err)
	}
	a, err := p.Attach(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	got, ok, err := p.Lookup(id)
	if err != nil || !ok || got != a {
		t.Fatalf("Lookup = %+v, %v, %v; want %+v", got, ok, err, a)
	}
	if _, _, err := p.Lookup("../x"); err == nil {
		t.Error("Lookup of a bad ID accepted")
	}
	if err := p.Detach(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := p.Lookup(id); ok || err != nil {
		t.Fatalf("Lookup after Detach = %v, %v", ok, err)
	}
}
