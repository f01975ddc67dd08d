// Package placement chooses the node a new sandbox runs on: among the live,
// active nodes that run sandboxes, carry the sandbox's node selector, have
// its execution environment enabled and working, hold its template (or can
// pull it from the shared blob store) and have room, the one the strategy
// prefers. The store checks the room again in the transaction that places
// the sandbox, so a decision raced by another create is refused there
// (store.ErrNodeFull) and placed again.
package placement

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

var (
	// ErrNoRoom: nodes could run the sandbox, but none has room now.
	ErrNoRoom = errors.New("no node has room for the sandbox")
	// ErrNoNode: no live node can run the sandbox at all (its environment,
	// template or node selector).
	ErrNoNode = errors.New("no node can run the sandbox")
	// ErrUnknownEnvironment: no node knows the environment named.
	ErrUnknownEnvironment = errors.New("unknown execution environment")
)

// ErrRefusedEverywhere: every node placement chose refused the sandbox
// when it was committed (store.ErrNodeFull: it filled up meanwhile).
var ErrRefusedEverywhere = errors.New("every node chosen filled up before the sandbox was placed on it")

// Decider chooses nodes (a *Placer).
type Decider interface {
	Place(ctx context.Context, req Request) (Decision, error)
}

// commitAttempts bounds how often a sandbox is placed again after the
// store refused the node chosen for it.
const commitAttempts = 3

// PlaceAndCommit places req and commits the decision (the insert or
// assignment that records the sandbox's node, whose transaction checks the
// room again); a node the commit refuses with store.ErrNodeFull is
// excluded and the sandbox placed again, up to commitAttempts times
// (ErrRefusedEverywhere then). Place's and commit's other errors are
// returned as they are.
func PlaceAndCommit(ctx context.Context, p Decider, req Request, commit func(Decision) error) error {
	for range commitAttempts {
		d, err := p.Place(ctx, req)
		if err != nil {
			return err
		}
		err = commit(d)
		if !errors.Is(err, store.ErrNodeFull) {
			return err
		}
		req.Exclude = append(req.Exclude, d.Node)
	}
	return ErrRefusedEverywhere
}

// Request is what a new sandbox needs of its node.
type Request struct {
	Environment environment.Selector
	Template    model.TemplateDigest
	Resources   model.Resources
	Selector    model.NodeLabels
	// Exclude are nodes not to pick (a placement the store refused).
	Exclude []model.NodeID
	// Only, if set, is the one node that may take the sandbox (the node
	// that holds the volumes it mounts).
	Only model.NodeID
}

// Decision is where the sandbox goes, and the environment it runs in there
// (a name resolves to that node's reference).
type Decision struct {
	Node        model.NodeID
	Environment model.EnvironmentRef
}

// Config configures a Placer.
type Config struct {
	Store store.Store
	// Strategy: spread (default) or pack.
	Strategy model.PlacementStrategy
	// DeadAfter: a node whose heartbeat is older is not placed on (it is
	// about to be declared dead).
	DeadAfter time.Duration
	// Self and HasLocal, if set, say what this process's own node holds
	// right now (a template built a moment ago, not yet reported).
	Self     model.NodeID
	HasLocal func(model.TemplateDigest) bool
	// NodeCache, if positive, is how long Place reuses what it read of the
	// nodes (their records and usage, environment rows, environment
	// definitions, template holders) instead of reading it for every
	// sandbox. Meanwhile the placer adds the sandboxes it placed to the
	// usage it read, and a node's heartbeat age grows with the cache's age.
	// A stale view costs at most a refused placement: the store checks the
	// node's room and state again in the transaction that places the
	// sandbox (store.ErrNodeFull), and the caller places it again with the
	// node excluded. 0 reads everything for every sandbox.
	NodeCache time.Duration
}

// Placer places sandboxes. It is safe for concurrent use.
type Placer struct {
	cfg   Config
	cache nodeCache
}

// New returns a Placer.
func New(cfg Config) (*Placer, error) {
	if cfg.Store == nil || cfg.DeadAfter <= 0 {
		return nil, errors.New("placement: store and a positive DeadAfter are required")
	}
	if cfg.Strategy == "" {
		cfg.Strategy = model.PlaceSpread
	}
	if _, err := model.ParsePlacementStrategy(string(cfg.Strategy)); err != nil {
		return nil, fmt.Errorf("placement: %w", err)
	}
	if cfg.NodeCache < 0 {
		return nil, errors.New("placement: NodeCache must not be negative")
	}
	return &Placer{cfg: cfg}, nil
}

// candidate is a node that passed every filter.
type candidate struct {
	node model.NodeStatus
	ref  model.EnvironmentRef
}

// Place picks a node for req: spread the one with more room of two picked
// at random among the nodes with about the most room (within SpreadSlack
// of it), pack the fullest that fits. Its errors wrap ErrUnknownEnvironment,
// ErrNoNode or ErrNoRoom and say what each node lacked. A cached view
// (Config.NodeCache) that fits no node is read again from the store before
// the sandbox is refused.
func (p *Placer) Place(ctx context.Context, req Request) (Decision, error) {
	v, err := p.view(ctx, req)
	if err != nil {
		return Decision{}, err
	}
	d, err := p.decide(v, req)
	if err != nil && v.snap != nil && (errors.Is(err, ErrNoRoom) || errors.Is(err, ErrNoNode)) {
		if v, err = p.readView(ctx, req); err != nil {
			return Decision{}, err
		}
		return p.decide(v, req)
	}
	return d, err
}

// decide picks a node of v for req.
func (p *Placer) decide(v view, req Request) (Decision, error) {
	nodes, envOf, holders := v.nodes, v.envOf, v.holders
	var (
		fits     []candidate
		rejected []string
		roomOnly int // nodes that lacked only room
	)
	for _, n := range nodes {
		why := p.reject(n, req, envOf, holders)
		if why == "" && slices.Contains(req.Exclude, n.ID) {
			// The store refused it a moment ago (store.ErrNodeFull): it
			// filled up, which is room, not a node that cannot run the
			// sandbox (a client retries no_capacity, not no_eligible_node).
			why = "full (it refused the placement a moment ago)"
			roomOnly++
		}
		if why == "" {
			if lacks := n.Lacks(req.Resources); lacks != "" {
				why = "full (" + lacks + ")"
				roomOnly++
			}
		}
		if why != "" {
			rejected = append(rejected, fmt.Sprintf("%s: %s", n.ID, why))
			continue
		}
		fits = append(fits, candidate{node: n, ref: envOf[n.ID]})
	}
	if len(fits) == 0 {
		detail := "no node is registered"
		if len(rejected) > 0 {
			detail = strings.Join(rejected, "; ")
		}
		if roomOnly > 0 {
			return Decision{}, fmt.Errorf("%w (%s)", ErrNoRoom, detail)
		}
		return Decision{}, fmt.Errorf("%w (%s)", ErrNoNode, detail)
	}
	slices.SortFunc(fits, func(a, b candidate) int {
		c := cmp.Compare(free(a.node), free(b.node))
		if p.cfg.Strategy == model.PlaceSpread {
			c = -c
		}
		if c != 0 {
			return c
		}
		return cmp.Compare(a.node.ID, b.node.ID)
	})
	pick := fits[0]
	if p.cfg.Strategy == model.PlaceSpread {
		// Two random choices among the nearly emptiest, the emptier
		// of them: concurrent creates rarely collide, and the spread
		// stays close to even.
		k := nearBest(fits)
		a, b := fits[rand.IntN(k)], fits[rand.IntN(k)]
		if free(b.node) > free(a.node) {
			a = b
		}
		pick = a
	}
	p.cache.placed(v, pick.node.ID, req.Resources)
	return Decision{Node: pick.node.ID, Environment: pick.ref}, nil
}

// SpreadSlack is how much less room (a share of the node's capacity) than
// the emptiest node a node may have and still be picked by spread: among
// those, the pick is random (the better of two random choices). Concurrent creates that read the same usage
// would otherwise all pick the one emptiest node, and the store's room
// check, which locks the node's row, would serialize them all.
const SpreadSlack = 0.02

// nearBest returns how many of fits (sorted by room, most first) are
// within SpreadSlack of the first.
func nearBest(fits []candidate) int {
	best := free(fits[0].node)
	n := 1
	for n < len(fits) && best-free(fits[n].node) <= SpreadSlack {
		n++
	}
	return n
}

// reject says why n cannot take the sandbox at all ("" if it can, room
// aside).
func (p *Placer) reject(n model.NodeStatus, req Request, envOf map[model.NodeID]model.EnvironmentRef, holders []model.NodeID) string {
	switch {
	case req.Only != "" && n.ID != req.Only:
		return "does not hold the sandbox's volumes (they are on " + string(req.Only) + ")"
	case !n.Role.RunsSandboxes():
		return "runs no sandboxes (role " + string(n.Role) + ")"
	case n.State != model.NodeActive:
		return string(n.State)
	case n.HeartbeatAge >= p.cfg.DeadAfter:
		return fmt.Sprintf("no heartbeat for %s", n.HeartbeatAge.Round(time.Second))
	case !n.Labels.Matches(req.Selector):
		return "its labels do not match the node selector"
	}
	if _, ok := envOf[n.ID]; !ok && envOf != nil {
		return "does not have the environment enabled and working"
	}
	if err := req.Resources.FitsNode(model.NodeCapacity{CPUs: n.CPUs, MemoryMiB: n.MemoryMiB, Pids: n.PidsBudget}); err != nil {
		return err.Error()
	}
	hasTemplate := slices.Contains(holders, n.ID) || n.CanPull ||
		(n.ID == p.cfg.Self && p.cfg.HasLocal != nil && p.cfg.HasLocal(req.Template))
	if !hasTemplate {
		return "does not hold the template and cannot pull it (no blob store)"
	}
	return ""
}

// free is the share of a node's room left after one more sandbox, the
// smallest of its slots', its memory's and its pids budget's (an unbounded
// one counts as 1).
func free(n model.NodeStatus) float64 {
	f := 1.0
	if n.Slots > 0 {
		f = min(f, float64(n.Slots-n.Usage.Sandboxes)/float64(n.Slots))
	}
	if n.MemoryMiB > 0 {
		f = min(f, float64(n.MemoryMiB-n.Usage.MemoryMiB)/float64(n.MemoryMiB))
	}
	if n.PidsBudget > 0 {
		f = min(f, float64(n.PidsBudget-n.Usage.Pids)/float64(n.PidsBudget))
	}
	return f
}

// environmentRefs are the references sel may run in: its own, or every
// recorded definition of its name.
func (p *Placer) environmentRefs(ctx context.Context, sel environment.Selector) ([]model.EnvironmentRef, error) {
	if sel.Ref != "" {
		if _, err := p.cfg.Store.GetEnvironment(ctx, sel.Ref); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return nil, fmt.Errorf("%w: no node has the environment %s", ErrUnknownEnvironment, sel.Ref)
			}
			return nil, fmt.Errorf("place: %w", err)
		}
		return []model.EnvironmentRef{sel.Ref}, nil
	}
	recs, err := p.cfg.Store.ListEnvironments(ctx)
	if err != nil {
		return nil, fmt.Errorf("place: %w", err)
	}
	var refs []model.EnvironmentRef
	for _, r := range recs {
		if r.Name == sel.Name {
			refs = append(refs, r.Ref)
		}
	}
	if len(refs) == 0 {
		return nil, fmt.Errorf("%w: no node has recorded an environment named %s", ErrUnknownEnvironment, sel.Name)
	}
	return refs, nil
}
