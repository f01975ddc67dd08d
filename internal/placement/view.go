package placement

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// view is what one Place decides on: the nodes with their usage, the
// environment each may run the sandbox in, the nodes holding its template.
type view struct {
	nodes   []model.NodeStatus
	envOf   map[model.NodeID]model.EnvironmentRef
	holders []model.NodeID
	snap    *snapshot // the cached snapshot it came from; nil if read afresh
}

// view reads the nodes for req, from the store or from the cache
// (Config.NodeCache).
func (p *Placer) view(ctx context.Context, req Request) (view, error) {
	if p.cfg.NodeCache <= 0 {
		return p.readView(ctx, req)
	}
	snap, err := p.cache.get(ctx, p)
	if err != nil {
		return view{}, err
	}
	if req.Environment == (environment.Selector{}) {
		holders, err := p.cache.holders(ctx, p, snap, req.Template)
		if err != nil {
			return view{}, err
		}
		return view{nodes: p.cache.current(snap), holders: holders, snap: snap}, nil
	}
	refs, err := snap.environmentRefs(req.Environment)
	if err != nil {
		// Maybe recorded since the snapshot: ask the store.
		if refs, err = p.environmentRefs(ctx, req.Environment); err != nil {
			return view{}, err
		}
	}
	holders, err := p.cache.holders(ctx, p, snap, req.Template)
	if err != nil {
		return view{}, err
	}
	return view{nodes: p.cache.current(snap), envOf: envOf(snap.envRows, refs), holders: holders, snap: snap}, nil
}

// readView reads everything from the store.
func (p *Placer) readView(ctx context.Context, req Request) (view, error) {
	nodes, err := p.cfg.Store.ListNodes(ctx)
	if err != nil {
		return view{}, fmt.Errorf("place: %w", err)
	}
	holders, err := p.cfg.Store.NodesWithTemplate(ctx, req.Template)
	if err != nil {
		return view{}, fmt.Errorf("place: %w", err)
	}
	if req.Environment == (environment.Selector{}) {
		// A server of one runtime that records no environments: any node.
		return view{nodes: nodes, holders: holders}, nil
	}
	refs, err := p.environmentRefs(ctx, req.Environment)
	if err != nil {
		return view{}, err
	}
	rows, err := p.cfg.Store.ListNodeEnvironments(ctx, store.NodeEnvironmentQuery{})
	if err != nil {
		return view{}, fmt.Errorf("place: %w", err)
	}
	return view{nodes: nodes, envOf: envOf(rows, refs), holders: holders}, nil
}

// envOf maps every node that has one of refs enabled and working to the
// first such reference.
func envOf(rows []store.NodeEnvironment, refs []model.EnvironmentRef) map[model.NodeID]model.EnvironmentRef {
	out := map[model.NodeID]model.EnvironmentRef{}
	for _, r := range rows {
		if r.Enabled && r.Available && slices.Contains(refs, r.Ref) {
			if _, ok := out[r.NodeID]; !ok {
				out[r.NodeID] = r.Ref
			}
		}
	}
	return out
}

// nodeCache holds the last snapshot; one caller refreshes it at a time.
type nodeCache struct {
	load sync.Mutex // held while a snapshot is read
	mu   sync.Mutex // guards snap and every snapshot's placed and holders
	snap *snapshot
}

// snapshot is what was read of the nodes at one moment, plus the
// sandboxes this placer placed since.
type snapshot struct {
	at      time.Time
	nodes   []model.NodeStatus
	envRows []store.NodeEnvironment
	envRecs []store.EnvironmentRecord
	holders map[model.TemplateDigest][]model.NodeID
	placed  map[model.NodeID]model.NodeUsage
}

// get returns a snapshot younger than NodeCache, reading a new one if
// needed.
func (c *nodeCache) get(ctx context.Context, p *Placer) (*snapshot, error) {
	if s := c.fresh(p.cfg.NodeCache); s != nil {
		return s, nil
	}
	c.load.Lock()
	defer c.load.Unlock()
	if s := c.fresh(p.cfg.NodeCache); s != nil {
		return s, nil // another caller read it meanwhile
	}
	s := &snapshot{at: time.Now(), holders: map[model.TemplateDigest][]model.NodeID{}, placed: map[model.NodeID]model.NodeUsage{}}
	var err error
	if s.nodes, err = p.cfg.Store.ListNodes(ctx); err != nil {
		return nil, fmt.Errorf("place: %w", err)
	}
	if s.envRows, err = p.cfg.Store.ListNodeEnvironments(ctx, store.NodeEnvironmentQuery{}); err != nil {
		return nil, fmt.Errorf("place: %w", err)
	}
	if s.envRecs, err = p.cfg.Store.ListEnvironments(ctx); err != nil {
		return nil, fmt.Errorf("place: %w", err)
	}
	c.mu.Lock()
	c.snap = s
	c.mu.Unlock()
	return s, nil
}

func (c *nodeCache) fresh(ttl time.Duration) *snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.snap != nil && time.Since(c.snap.at) < ttl {
		return c.snap
	}
	return nil
}

// holders returns the nodes holding digest as of the snapshot, reading
// them once per snapshot and digest.
func (c *nodeCache) holders(ctx context.Context, p *Placer, s *snapshot, digest model.TemplateDigest) ([]model.NodeID, error) {
	c.mu.Lock()
	h, ok := s.holders[digest]
	c.mu.Unlock()
	if ok {
		return h, nil
	}
	h, err := p.cfg.Store.NodesWithTemplate(ctx, digest)
	if err != nil {
		return nil, fmt.Errorf("place: %w", err)
	}
	c.mu.Lock()
	s.holders[digest] = h
	c.mu.Unlock()
	return h, nil
}

// placed adds a decision to the usage of v's snapshot (nothing for a view
// read afresh).
func (c *nodeCache) placed(v view, node model.NodeID, r model.Resources) {
	if v.snap == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	u := v.snap.placed[node]
	u.Sandboxes++
	u.CPUs += r.CPUs
	u.MemoryMiB += r.MemoryMiB
	u.Pids += r.HostPids
	v.snap.placed[node] = u
}

// current returns the snapshot's nodes with the placements since added to
// their usage and their heartbeat ages aged by the snapshot's.
func (c *nodeCache) current(s *snapshot) []model.NodeStatus {
	age := time.Since(s.at)
	out := slices.Clone(s.nodes)
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range out {
		d := s.placed[out[i].ID]
		out[i].Usage.Sandboxes += d.Sandboxes
		out[i].Usage.CPUs += d.CPUs
		out[i].Usage.MemoryMiB += d.MemoryMiB
		out[i].Usage.Pids += d.Pids
		out[i].HeartbeatAge += age
	}
	return out
}

// environmentRefs is Placer.environmentRefs from the snapshot's
// definitions; an unknown name or reference is an error (the caller then
// asks the store).
func (s *snapshot) environmentRefs(sel environment.Selector) ([]model.EnvironmentRef, error) {
	var refs []model.EnvironmentRef
	for _, r := range s.envRecs {
		if (sel.Ref != "" && r.Ref == sel.Ref) || (sel.Ref == "" && r.Name == sel.Name) {
			refs = append(refs, r.Ref)
		}
	}
	if len(refs) == 0 {
		return nil, ErrUnknownEnvironment
	}
	return refs, nil
}
