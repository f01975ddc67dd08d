package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/egress/netnstest"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/nldump"
	"github.com/airlockdev/airlock/internal/pgtest"
	"github.com/airlockdev/airlock/internal/runtime/oci"
)

// The cluster harness: three `airlock server --role node` processes and two
// `--role api` replicas on one PostgreSQL, each process in a network
// namespace of its own (a node owns its namespace's egress: nftables table,
// sandbox veths), joined by a "fabric" namespace that holds a bridge:
//
//	fabric netns:  albr0 (bridge) ── alfN (veth) ─┐
//	process netns: fab0 10.77.0.N/24 ─────────────┘  + lo
//
// Each process listens on its fabric address, port 7070, and advertises
// it; PostgreSQL is reached over its unix socket (a path, the same in every
// network namespace). The test reaches a process by dialing from inside its
// namespace. Nothing leaves the namespaces the harness made, and closing
// them (after the processes stopped) destroys every link in them.

// Timings of the cluster: short, so that a lost node is noticed quickly;
// four times as long when the servers are built with the race detector
// (scripts/test.sh --race-servers), which start and answer several times
// slower: a restart then outlasted 3 s and the node was declared dead.
var (
	clusterHeartbeat = raceScaled(200 * time.Millisecond)
	clusterDeadAfter = raceScaled(3 * time.Second)
)

func raceScaled(d time.Duration) time.Duration {
	if raceServers() {
		return 4 * d
	}
	return d
}

// raceServers reports whether the servers the tests start are built with
// the race detector (scripts/test.sh --race-servers).
func raceServers() bool { return os.Getenv(airtest.RaceServersEnv) != "" }

const (
	clusterPort  = 7070
	clusterSlots = 8 // --max-sandboxes of each node
	fabricBridge = "albr0"
	fabricIf     = "fab0"
)

// memberNetns is one process's network namespace, joined to the fabric; it
// is a serverNetns (the harness's servers run in it).
type memberNetns struct {
	f    *os.File
	addr net.IP
}

// Command runs name inside the namespace (nsenter execs it: the process is
// name itself, so signals reach it).
func (n *memberNetns) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	path := fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), n.f.Fd())
	return exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + path, "--", name}, args...)...)
}

func (n *memberNetns) dial(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := netnstest.Run(n.f, func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	return c, err
}

// HostTransport dials from inside the namespace.
func (n *memberNetns) HostTransport() *http.Transport {
	return &http.Transport{DialContext: n.dial, MaxIdleConnsPerHost: 16}
}

// InHost runs fn on a thread inside the namespace.
func (n *memberNetns) InHost(fn func() error) error { return netnstest.Run(n.f, fn) }

// fabric is the namespace with the bridge that joins the members.
type fabric struct {
	f       *os.File
	members []*memberNetns
}

// newFabric makes the fabric namespace and its bridge; it is destroyed when
// the test ends, after checking that the members' veths went with them.
func newFabric(t *testing.T) *fabric {
	t.Helper()
	f, err := netnstest.Make()
	if err != nil {
		t.Fatalf("fabric namespace: %v", err)
	}
	fab := &fabric{f: f}
	t.Cleanup(fab.close(t))
	h := fab.handle(t)
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil {
		t.Fatalf("fabric loopback: %v", err)
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: fabricBridge}}
	if err := h.LinkAdd(br); err != nil {
		t.Fatalf("fabric bridge: %v", err)
	}
	if err := h.LinkSetUp(br); err != nil {
		t.Fatalf("fabric bridge up: %v", err)
	}
	return fab
}

func (fab *fabric) handle(t *testing.T) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandleAt(netns.NsHandle(fab.f.Fd()))
	if err != nil {
		t.Fatalf("netlink in the fabric namespace: %v", err)
	}
	return h
}

// join makes a member namespace with address 10.77.0.host/24 on a veth to
// the bridge.
func (fab *fabric) join(t *testing.T, host int) *memberNetns {
	t.Helper()
	f, err := netnstest.Make()
	if err != nil {
		t.Fatalf("member namespace: %v", err)
	}
	m := &memberNetns{f: f, addr: net.IPv4(10, 77, 0, byte(host))}
	fab.members = append(fab.members, m)
	h := fab.handle(t)
	defer h.Close()
	br, err := h.LinkByName(fabricBridge)
	if err != nil {
		t.Fatal(err)
	}
	outer := fmt.Sprintf("alf%d", host)
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: outer, MasterIndex: br.Attrs().Index},
		PeerName:      fabricIf,
		PeerNamespace: netlink.NsFd(int(f.Fd())),
	}
	if err := h.LinkAdd(veth); err != nil {
		t.Fatalf("veth %s: %v", outer, err)
	}
	if l, err := h.LinkByName(outer); err != nil || h.LinkSetUp(l) != nil {
		t.Fatalf("veth %s up: %v", outer, err)
	}
	mh, err := netlink.NewHandleAt(netns.NsHandle(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer mh.Close()
	for _, name := range []string{"lo", fabricIf} {
		l, err := mh.LinkByName(name)
		if err != nil {
			t.Fatalf("%s in the member namespace: %v", name, err)
		}
		if name == fabricIf {
			addr := &netlink.Addr{IPNet: &net.IPNet{IP: m.addr, Mask: net.CIDRMask(24, 32)}}
			if err := mh.AddrAdd(l, addr); err != nil {
				t.Fatalf("address %s: %v", addr, err)
			}
		}
		if err := mh.LinkSetUp(l); err != nil {
			t.Fatalf("%s up: %v", name, err)
		}
	}
	return m
}

// close runs when the test ends, after every server stopped (their cleanups
// were registered later): the members' namespaces are closed, which
// destroys them with their veths; the fabric must then hold only its
// loopback and bridge, and is closed too.
func (fab *fabric) close(t *testing.T) func() {
	return func() {
		for _, m := range fab.members {
			m.f.Close()
		}
		h, err := netlink.NewHandleAt(netns.NsHandle(fab.f.Fd()))
		if err != nil {
			t.Errorf("netlink in the fabric namespace: %v", err)
		} else {
			var left []string
			deadline := time.Now().Add(10 * time.Second)
			for {
				left = left[:0]
				links, err := nldump.Retry(h.LinkList)
				if err != nil {
					t.Errorf("links of the fabric: %v", err)
					break
				}
				for _, l := range links {
					if n := l.Attrs().Name; n != "lo" && n != fabricBridge {
						left = append(left, n)
					}
				}
				// The kernel destroys a namespace a moment after its
				// last reference went.
				if len(left) == 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if len(left) > 0 {
				t.Errorf("links left in the fabric after its members were closed (a member namespace outlived the test?): %v", left)
			}
			h.Close()
		}
		fab.f.Close()
	}
}

// cluster is three nodes and two api replicas on one database.
type cluster struct {
	t      *testing.T
	bins   binaries
	dsn    string
	fabric *fabric
	nodes  []*server
	apis   []*server
}

// newCluster starts the cluster; everything is stopped, checked and removed
// when t ends (every sandbox deleted, no container, mount, cgroup, veth or
// nftables table left in any node's namespace).
func newCluster(t *testing.T) *cluster {
	t.Helper()
	return newClusterOf(t, clusterSpec{runtime: "runc", nodes: 3, apis: 2})
}

// clusterSpec says what newClusterOf starts: nodes running runtime, api
// replicas, and arguments every process gets besides the cluster's own.
type clusterSpec struct {
	runtime     string
	nodes, apis int
	extraArgs   []string
}

// newClusterOf starts a cluster as spec says (newCluster: TestCluster's).
func newClusterOf(t *testing.T, spec clusterSpec) *cluster {
	t.Helper()
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "nsenter")
	airtest.RequireBinary(t, spec.runtime)
	netnstest.RequireNetAdmin(t)
	if err := pgtest.Available(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	c := &cluster{t: t, bins: build(t)}
	// Cleanups run last-registered first: the servers' (deleting every
	// sandbox while the nodes still run), then the fabric's, then the
	// database's.
	c.dsn = pgtest.SocketDSN(t)
	c.fabric = newFabric(t)

	keys := t.TempDir()
	token, _, _ := auth.GenerateAPIKey()
	adminKey := filepath.Join(keys, "admin.key")
	if err := os.WriteFile(adminKey, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	secretsKey := filepath.Join(keys, "secrets.key") // made by the first process, read by the others

	common := func(ns *memberNetns, role model.NodeRole) serverConfig {
		cfg := serverConfig{
			runtime:      spec.runtime,
			databaseURL:  c.dsn,
			netns:        ns,
			adminKeyFile: adminKey,
			extraArgs: []string{
				"--role", string(role),
				"--listen", net.JoinHostPort(ns.addr.String(), fmt.Sprint(clusterPort)),
				"--heartbeat-interval", clusterHeartbeat.String(),
				"--node-dead-after", clusterDeadAfter.String(),
				"--secrets-key-file", secretsKey,
				"--shutdown-grace", "2s",
			},
		}
		cfg.extraArgs = append(cfg.extraArgs, spec.extraArgs...)
		return cfg
	}
	// The api replicas first: their cleanups run after the nodes'.
	for i := range spec.apis {
		s := newServer(t, c.bins, common(c.fabric.join(t, 21+i), model.RoleAPI))
		c.apis = append(c.apis, s)
	}
	for i := range spec.nodes {
		cfg := common(c.fabric.join(t, 11+i), model.RoleNode)
		// Each node its own user-namespace id ranges, as separate hosts
		// would not share them either.
		cfg.extraArgs = append(cfg.extraArgs,
			"--max-sandboxes", fmt.Sprint(clusterSlots),
			"--userns-base", fmt.Sprint(oci.DefaultIDBase+uint32(i)*64*oci.IDRangeSize),
			"--userns-ranges", "64")
		// The node ID is chosen here, so that the node carries it as the
		// label name=ID (tests place sandboxes on a node by selector).
		id := model.NewNodeID()
		cfg.extraArgs = append(cfg.extraArgs, "--label", "name="+id.String())
		if i != 1 {
			cfg.extraArgs = append(cfg.extraArgs, "--label", "pool=b") // see testNodeLoss
		}
		s := newServer(t, c.bins, cfg)
		if err := os.WriteFile(filepath.Join(s.dataDir, "node-id"), []byte(id.String()+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, s)
	}
	start := time.Now()
	// The first node makes the secrets key; the others start together.
	c.nodes[0].start()
	rest := append(slices.Clone(c.nodes[1:]), c.apis...)
	for _, s := range rest {
		s.launch()
	}
	for _, s := range rest {
		s.awaitReady()
	}
	t.Logf("cluster of %d nodes and %d api replicas started in %v", len(c.nodes), len(c.apis), time.Since(start).Round(time.Millisecond))
	c.waitActive(ctxFor(t, 30*time.Second), t)
	return c
}

// use makes the servers report to t (a subtest) until it ends, and starts
// any that an earlier subtest left stopped (one that failed half-way), so
// that each subtest begins with the whole cluster up.
func (c *cluster) use(t *testing.T) {
	t.Helper()
	restarted := false
	for _, s := range c.all() {
		s.t = t
		if !s.running() {
			s.start()
			restarted = true
		}
	}
	if restarted {
		c.waitActive(ctxFor(t, 30*time.Second), t)
	}
	t.Cleanup(func() {
		for _, s := range c.all() {
			s.t = c.t
		}
	})
}

func (c *cluster) all() []*server { return append(slices.Clone(c.nodes), c.apis...) }

// nodeID is the node ID of a server (from its data dir).
func (s *server) nodeID() model.NodeID {
	s.t.Helper()
	b, err := os.ReadFile(filepath.Join(s.dataDir, "node-id"))
	if err != nil {
		s.t.Fatalf("read node_id: %v", err)
	}
	return model.NodeID(strings.TrimSpace(string(b)))
}

// nodeOf returns the node server with the given ID.
func (c *cluster) nodeOf(t *testing.T, id string) *server {
	t.Helper()
	for _, s := range c.nodes {
		if string(s.nodeID()) == id {
			return s
		}
	}
	t.Fatalf("no node server has ID %q", id)
	return nil
}

// waitActive waits until every node process is registered, active and
// heartbeating, as the first api replica sees it.
func (c *cluster) waitActive(ctx context.Context, t *testing.T) {
	t.Helper()
	want := map[model.NodeID]bool{}
	for _, s := range c.nodes {
		want[s.nodeID()] = true
	}
	for {
		list, err := c.apis[0].client().ListNodes(ctx)
		ok := 0
		if err == nil {
			for _, n := range list.Nodes {
				if want[model.NodeID(n.ID)] && n.State == string(model.NodeActive) && n.HeartbeatAgeMS < clusterDeadAfter.Milliseconds()/2 {
					ok++
				}
			}
		}
		if ok == len(want) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the nodes did not all become active: %+v (err %v)", list, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// deleteAll deletes the sandboxes (through a replica) and waits until each
// is deleted, then checks that nothing of them is left on any node: no
// container, sandbox dir, cgroup, veth or nftables set member.
func (c *cluster) deleteAll(ctx context.Context, t *testing.T, ids []model.SandboxID) {
	t.Helper()
	cl := c.apis[0].client()
	for _, id := range ids {
		sb, err := cl.GetSandbox(ctx, id)
		if err != nil {
			t.Errorf("get %s: %v", id, err)
			continue
		}
		if sb.State == string(model.StateDeleted) || sb.State == string(model.StateDeleting) {
			continue
		}
		if _, err := cl.DeleteSandbox(ctx, id); err != nil {
			t.Errorf("delete %s: %v", id, err)
		}
	}
	for _, id := range ids {
		c.apis[0].waitState(ctx, id, model.StateDeleted)
	}
	for _, s := range c.nodes {
		s.inNetns(func() { assertNoLeftovers(t, s.dataDir, ids, false) })
		for _, id := range ids {
			for _, rt := range []string{"runc"} {
				if _, err := os.Stat(filepath.Join(s.dataDir, "runtime", rt, "state", id.String())); err == nil {
					t.Errorf("container %s left on node %s", id, s.nodeID())
				}
			}
		}
	}
}

// createWait creates a sandbox through cl (a replica's or a node's API)
// and waits for the create to end; it returns the sandbox and the final
// operation.
func createWait(ctx context.Context, t *testing.T, cl *client.Client, req apiv1.CreateSandboxRequest) (apiv1.Sandbox, apiv1.Operation) {
	t.Helper()
	res, err := cl.CreateSandbox(ctx, req)
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	op, err := cl.WaitOperation(ctx, model.OperationID(res.Operation.ID))
	if err != nil {
		t.Fatalf("wait for create %s: %v", res.Operation.ID, err)
	}
	sb, err := cl.GetSandbox(ctx, model.SandboxID(res.Sandbox.ID))
	if err != nil {
		t.Fatal(err)
	}
	return sb, op
}

// nodeRole is the --role the server was started with.
func (s *server) nodeRole() string {
	for i, a := range s.cfg.extraArgs {
		if a == "--role" && i+1 < len(s.cfg.extraArgs) {
			return s.cfg.extraArgs[i+1]
		}
	}
	return string(model.RoleAll)
}

// containerStatus is runc's status of the sandbox's container on the node
// ("running", "stopped", …), or "none".
func (s *server) containerStatus(id model.SandboxID) string {
	out, err := exec.Command("runc", "--root", filepath.Join(s.dataDir, "runtime", "runc", "state"), "state", id.String()).Output()
	if err != nil {
		return "none"
	}
	var st struct {
		Status string `json:"status"`
	}
	if json.Unmarshal(out, &st) != nil {
		return "unknown"
	}
	return st.Status
}
