package model

import (
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/textclip"
)

// Incarnation identifies one run of a node process: "inc_…", new on every
// start. It is the fencing token of the node's writes: the store refuses a
// write whose incarnation is not the node's current one, or whose node was
// declared dead, so a process that was declared dead and comes back cannot
// overwrite what happened meanwhile.
type Incarnation string

// NewIncarnation returns a fresh random incarnation.
func NewIncarnation() Incarnation { return Incarnation(newID("inc")) }

// ParseIncarnation parses s as an incarnation.
func ParseIncarnation(s string) (Incarnation, error) {
	v, err := parseID("incarnation", "inc", s)
	return Incarnation(v), err
}

func (i Incarnation) String() string { return string(i) }

// NodeRole is what an `airlock server` process does.
type NodeRole string

const (
	// RoleAll serves the API and runs sandboxes (one host, the default).
	RoleAll NodeRole = "all"
	// RoleAPI serves the API and routes the data plane; it holds no
	// sandboxes and no state of its own.
	RoleAPI NodeRole = "api"
	// RoleNode runs sandboxes; it serves the data plane of its own
	// sandboxes (and its own API, for operators).
	RoleNode NodeRole = "node"
)

// ParseNodeRole parses all, api or node.
func ParseNodeRole(s string) (NodeRole, error) {
	switch r := NodeRole(s); r {
	case RoleAll, RoleAPI, RoleNode:
		return r, nil
	}
	return "", fmt.Errorf("%w: role %q must be all, api or node", ErrInvalid, textclip.Bytes(s, maxEcho))
}

// RunsSandboxes reports whether sandboxes are placed on processes of the role.
func (r NodeRole) RunsSandboxes() bool { return r == RoleAll || r == RoleNode }

// NodeState is where a node stands for placement.
type NodeState string

const (
	// NodeActive takes new sandboxes.
	NodeActive NodeState = "active"
	// NodeCordoned takes no new sandboxes; its sandboxes run on.
	NodeCordoned NodeState = "cordoned"
	// NodeDraining takes no new sandboxes and is done when its last
	// sandbox has ended (Node.Drained).
	NodeDraining NodeState = "draining"
	// NodeDead missed its heartbeats: its sandboxes were declared lost and
	// nothing it writes with its incarnation is accepted. It becomes active
	// again when it starts anew (a new incarnation).
	NodeDead NodeState = "dead"
)

// ParseNodeState parses one of the node states.
func ParseNodeState(s string) (NodeState, error) {
	switch st := NodeState(s); st {
	case NodeActive, NodeCordoned, NodeDraining, NodeDead:
		return st, nil
	}
	return "", fmt.Errorf("%w: node state %q must be active, cordoned, draining or dead", ErrInvalid, textclip.Bytes(s, maxEcho))
}

// PlacementStrategy chooses among the nodes that fit a sandbox.
type PlacementStrategy string

const (
	// PlaceSpread picks the node with the most room left (the default):
	// load is spread and one node's loss loses the fewest sandboxes.
	PlaceSpread PlacementStrategy = "spread"
	// PlacePack picks the fullest node that still fits: the others stay
	// empty (to be drained, scaled in, or kept for big sandboxes).
	PlacePack PlacementStrategy = "pack"
)

// ParsePlacementStrategy parses spread or pack.
func ParsePlacementStrategy(s string) (PlacementStrategy, error) {
	switch p := PlacementStrategy(s); p {
	case PlaceSpread, PlacePack:
		return p, nil
	}
	return "", fmt.Errorf("%w: placement %q must be spread or pack", ErrInvalid, textclip.Bytes(s, maxEcho))
}

// NodeLabels are a node's key=value labels, matched by a sandbox's node
// selector.
type NodeLabels map[string]string

// labelKey and labelValue follow Kubernetes label syntax, loosely: an
// optional DNS prefix and a name of letters, digits, '-', '_' and '.'.
var (
	labelKey   = regexp.MustCompile(`^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)
	labelValue = regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$`)
)

// MaxNodeLabels bounds the labels of a node and the terms of a selector.
const MaxNodeLabels = 32

// ParseNodeLabels checks every key and value.
func ParseNodeLabels(m map[string]string) (NodeLabels, error) {
	if len(m) > MaxNodeLabels {
		return nil, fmt.Errorf("%w: %d labels, at most %d", ErrInvalid, len(m), MaxNodeLabels)
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !labelKey.MatchString(k) {
			return nil, fmt.Errorf("%w: label key %q: letters, digits, '-', '_' and '.' (at most 63), with an optional DNS prefix and '/'", ErrInvalid, textclip.Bytes(k, maxEcho))
		}
		if !labelValue.MatchString(m[k]) {
			return nil, fmt.Errorf("%w: label %s=%q: the value must be letters, digits, '-', '_' and '.' (at most 63)", ErrInvalid, k, textclip.Bytes(m[k], maxEcho))
		}
	}
	if len(m) == 0 {
		return nil, nil
	}
	return NodeLabels(maps.Clone(m)), nil
}

// ParseNodeLabel parses one KEY=VALUE.
func ParseNodeLabel(s string) (key, value string, err error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return "", "", fmt.Errorf("%w: label %q must be KEY=VALUE", ErrInvalid, textclip.Bytes(s, maxEcho))
	}
	if _, err := ParseNodeLabels(map[string]string{k: v}); err != nil {
		return "", "", err
	}
	return k, v, nil
}

// Matches reports whether every term of the selector is among the labels.
func (l NodeLabels) Matches(selector NodeLabels) bool {
	for k, v := range selector {
		if got, ok := l[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// ParseAdvertiseURL parses the URL other processes reach a node at: http
// or https, a host, no query (not even an empty one), fragment or user
// info; trailing slashes are dropped, so the result parses to itself.
func ParseAdvertiseURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("%w: advertise URL %q: %v", ErrInvalid, textclip.Bytes(s, maxEcho), err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.Opaque != "" {
		return "", fmt.Errorf("%w: advertise URL %q must be http(s)://HOST[:PORT][/PATH]", ErrInvalid, textclip.Bytes(s, maxEcho))
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// Node is one `airlock server` process's record: what it is, what it
// offers and when it last said it was alive (by the database's clock).
type Node struct {
	ID           NodeID
	Incarnation  Incarnation
	Role         NodeRole
	AdvertiseURL string // where other processes reach its API and data plane
	// Capacity for placement: sandboxes at most, CPUs and memory (MiB,
	// after overcommit) its sandboxes may ask for in all, and the host
	// tasks their host cgroups may hold in all (PidsBudget: the sum of
	// their Resources.HostPids); 0 fields bound nothing.
	Slots      int
	CPUs       int
	MemoryMiB  int
	PidsBudget int
	Labels     NodeLabels
	// CanPull: the node reaches the shared blob store, so a template it
	// lacks can be pulled by digest.
	CanPull     bool
	State       NodeState
	StartedAt   time.Time
	HeartbeatAt time.Time
	// StateReason says why a node is dead ("no heartbeat for 30s").
	StateReason string
}

// NodeUsage is what a node's live sandboxes (every state but deleted and
// failed) hold.
type NodeUsage struct {
	Sandboxes int
	CPUs      int
	MemoryMiB int
	Pids      int // the sum of their Resources.HostPids
}

// NodeStatus is a node with its usage.
type NodeStatus struct {
	Node
	Usage NodeUsage
	// HeartbeatAge is how long ago its last heartbeat was, by the
	// database's clock when it was read.
	HeartbeatAge time.Duration
}

// Drained reports whether a draining node has no live sandbox left.
func (n NodeStatus) Drained() bool { return n.State == NodeDraining && n.Usage.Sandboxes == 0 }

// Fits reports whether one more sandbox of r fits the node's room: its
// slots, memory and pids budget. CPUs are time-shared, not reserved: they
// bound what one sandbox may ask for, not how many fit.
func (n NodeStatus) Fits(r Resources) bool { return n.Lacks(r) == "" }

// Lacks says what of the node's room one more sandbox of r would exceed
// ("" if it fits), with the numbers: "sandboxes 256 of 256", "memory 900
// + 512 of 1024 MiB", "pids 30000 + 1088 of 30720".
func (n NodeStatus) Lacks(r Resources) string {
	var out []string
	if n.Slots > 0 && n.Usage.Sandboxes+1 > n.Slots {
		out = append(out, fmt.Sprintf("sandboxes %d of %d", n.Usage.Sandboxes, n.Slots))
	}
	if n.MemoryMiB > 0 && n.Usage.MemoryMiB+r.MemoryMiB > n.MemoryMiB {
		out = append(out, fmt.Sprintf("memory %d + %d of %d MiB", n.Usage.MemoryMiB, r.MemoryMiB, n.MemoryMiB))
	}
	if n.PidsBudget > 0 && n.Usage.Pids+r.HostPids > n.PidsBudget {
		out = append(out, fmt.Sprintf("pids %d + %d of %d", n.Usage.Pids, r.HostPids, n.PidsBudget))
	}
	return strings.Join(out, ", ")
}

// NodeLostReason is the state reason of a sandbox whose node was declared
// dead.
const NodeLostReason = "node lost"
