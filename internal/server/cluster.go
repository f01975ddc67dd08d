package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/placement"
	"github.com/airlockdev/airlock/internal/store"
)

// Defaults of the cluster options.
const (
	DefaultMaxSandboxes      = 256
	DefaultHeartbeatInterval = 2 * time.Second
	DefaultNodeDeadAfter     = 20 * time.Second
)

// placeBatch is how many unplaced sandboxes one pass places at most.
const placeBatch = 100

// membership is this process's life as a node among others on one
// database: its record, its heartbeat and clock, the templates it reports,
// and the cluster-wide duties any process may do (declaring nodes dead,
// placing again what a dead node left unstarted), which the store makes
// safe to run everywhere at once.
type membership struct {
	st                 store.Store
	node               model.Node
	interval           time.Duration
	deadAfter          time.Duration
	placer             *placement.Placer
	defaultEnvironment environment.Name
	// templates lists what this node holds (nil: it runs no sandboxes).
	templates func() ([]model.TemplateDigest, error)
	log       *slog.Logger

	offset   atomic.Int64 // the database's clock minus ours, in nanoseconds
	clockMu  sync.Mutex
	samples  []clockSample          // the last heartbeats', for offset
	reported []model.TemplateDigest // what reportTemplates last told the store
	// dutyHolder is whether the last duty pass held the lease on the
	// cluster-wide duties (for logging a change).
	dutyHolder bool
	// passes are the leases of the other cluster-wide passes (the purge,
	// template collection), renewed with the duties' lease and run where
	// held (duty.every, duty.Held).
	passes []*duty
}

// clusterConfig checks the cluster options and fills in defaults.
func clusterConfig(opts Options, listenAddr string) (model.Node, time.Duration, time.Duration, error) {
	role, err := roleOf(opts)
	if err != nil {
		return model.Node{}, 0, 0, err
	}
	adv := opts.AdvertiseURL
	if adv == "" {
		host, _, err := net.SplitHostPort(listenAddr)
		if err != nil {
			return model.Node{}, 0, 0, fmt.Errorf("listen address %q: %w", listenAddr, err)
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() && opts.DatabaseURL != "" {
			return model.Node{}, 0, 0, fmt.Errorf("--listen %s is a wildcard address: other nodes cannot reach it; give --advertise-url", listenAddr)
		}
		adv = "http://" + listenAddr
	}
	adv, err = model.ParseAdvertiseURL(adv)
	if err != nil {
		return model.Node{}, 0, 0, fmt.Errorf("--advertise-url: %w", err)
	}
	interval, deadAfter := opts.HeartbeatInterval, opts.NodeDeadAfter
	if interval <= 0 {
		interval = DefaultHeartbeatInterval
	}
	if deadAfter <= 0 {
		deadAfter = DefaultNodeDeadAfter
	}
	if deadAfter < 3*interval {
		return model.Node{}, 0, 0, fmt.Errorf("--node-dead-after %s must be at least three heartbeats (--heartbeat-interval %s)", deadAfter, interval)
	}
	slots := opts.MaxSandboxes
	if slots <= 0 {
		slots = DefaultMaxSandboxes
	}
	return model.Node{Role: role, AdvertiseURL: adv, Labels: opts.Labels, Slots: slots}, interval, deadAfter, nil
}

// roleOf is opts.Role, all by default, checked against the store: SQLite
// is one node's embedded store.
func roleOf(opts Options) (model.NodeRole, error) {
	role := opts.Role
	if role == "" {
		role = model.RoleAll
	}
	if _, err := model.ParseNodeRole(string(role)); err != nil {
		return "", fmt.Errorf("--role: %w", err)
	}
	return role, checkSharedStore(role, opts.DatabaseURL)
}

// register records this run of the node (a new incarnation) and sets the
// clock offset from the database's clock.
func (m *membership) register(ctx context.Context) error {
	if m.st == nil {
		return errors.New("membership: no store")
	}
	before := time.Now()
	n, err := m.st.RegisterNode(ctx, m.node)
	if err != nil {
		return fmt.Errorf("register node: %w", err)
	}
	m.sync(before, time.Now(), n.HeartbeatAt)
	// Registering cleared the node's list of templates: report it at once,
	// not a heartbeat later, or placement passes over a node that just
	// started (or restarted) for that long. A failure is tried again after
	// each heartbeat.
	if m.templates != nil {
		if err := m.reportTemplates(ctx); err != nil {
			m.log.Warn("report templates", "err", err)
		}
	}
	m.log.Info("node registered", "incarnation", n.Incarnation, "role", n.Role, "advertise_url", n.AdvertiseURL,
		"state", n.State, "clock_offset", time.Duration(m.offset.Load()).Round(time.Microsecond))
	return nil
}

// clockSamples is how many heartbeats the clock offset is chosen from.
const clockSamples = 8

// sync records an offset sample from a database time read between before
// and after, and keeps the offset of the sample with the shortest round
// trip among the last clockSamples: one that waited on a lock says little
// about when the database read its clock.
func (m *membership) sync(before, after, db time.Time) {
	rtt := after.Sub(before)
	s := clockSample{rtt: rtt, offset: db.Sub(before.Add(rtt / 2))}
	m.clockMu.Lock()
	defer m.clockMu.Unlock()
	m.samples = append(m.samples, s)
	if len(m.samples) > clockSamples {
		m.samples = m.samples[1:]
	}
	best := m.samples[0]
	for _, c := range m.samples[1:] {
		if c.rtt < best.rtt {
			best = c
		}
	}
	m.offset.Store(int64(best.offset))
}

// clockSample is one heartbeat's estimate of the database's clock.
type clockSample struct{ rtt, offset time.Duration }

// Now is the database's clock, as this process estimates it: leases and
// not-before times are written in it, so nodes whose own clocks disagree
// still agree on when a lease ends.
func (m *membership) Now() time.Time { return time.Now().Add(time.Duration(m.offset.Load())) }

func (m *membership) fence() store.Fence {
	return store.Fence{Node: m.node.ID, Incarnation: m.node.Incarnation}
}

// run heartbeats until ctx ends, and does the duties in a loop of their
// own (a slow pass must not delay a heartbeat). It returns an error when
// the node was fenced (declared dead, or another run of it started): this
// process must stop, for nothing it writes is accepted any more.
func (m *membership) run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel (defers run last first)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		m.dutyLoop(ctx)
	}()
	t := time.NewTicker(m.interval)
	defer t.Stop()
	var failingSince time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		before := time.Now()
		// Each heartbeat gets one interval: a connection that hangs must
		// not hold the next ones back.
		hctx, done := context.WithTimeout(ctx, m.interval)
		at, err := m.st.Heartbeat(hctx, m.fence())
		done()
		switch {
		case errors.Is(err, store.ErrFenced):
			return fmt.Errorf("this node (%s, incarnation %s) was declared dead or started elsewhere: stopping; start it again to rejoin: %w", m.node.ID, m.node.Incarnation, err)
		case err != nil:
			if ctx.Err() != nil {
				return nil
			}
			if failingSince.IsZero() {
				failingSince = time.Now()
			}
			m.log.Warn("heartbeat failed", "err", err, "failing_for", time.Since(failingSince).Round(time.Second),
				"declared_dead_after", m.deadAfter)
			continue
		}
		failingSince = time.Time{}
		m.sync(before, time.Now(), at)
	}
}

// dutyLoop does the duties every heartbeat interval until ctx ends.
func (m *membership) dutyLoop(ctx context.Context) {
	t := time.NewTicker(m.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.duties(ctx)
	}
}

// dutyLease names the lease on the cluster-wide duties.
const dutyLease = "cluster-duties"

// dutyLeaseIntervals is how many heartbeat intervals the lease on the
// cluster-wide duties lasts: its holder renews it every interval, so a
// missed renewal or two keeps it, and another node takes over that long
// after the holder stopped.
const dutyLeaseIntervals = 3

// duties are what a process does every heartbeat interval: report its
// templates (every process), take or renew the leases of the cluster-wide
// passes (which run in loops of their own where held) and, on the one node
// that holds the duty lease at a time, declare nodes dead and place what
// has no node.
func (m *membership) duties(ctx context.Context) {
	if m.templates != nil {
		if err := m.reportTemplates(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("report templates", "err", err)
		}
	}
	for _, d := range m.passes {
		m.holdPass(ctx, d)
	}
	held, err := m.st.HoldDutyLease(ctx, dutyLease, m.fence(), dutyLeaseIntervals*m.interval)
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("take the cluster duties' lease", "err", err)
		}
		return
	}
	if held != m.dutyHolder {
		m.log.Info("cluster duties", "held", held)
		m.dutyHolder = held
	}
	if held {
		m.clusterDuties(ctx)
	}
}

// holdPass takes or renews the lease of a cluster-wide pass. A failure to
// ask counts as not holding it: the lease may expire meanwhile and another
// node take it over.
func (m *membership) holdPass(ctx context.Context, d *duty) {
	held, err := m.st.HoldDutyLease(ctx, d.name, m.fence(), dutyLeaseIntervals*m.interval)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		m.log.Warn("take a cluster duty's lease", "duty", d.name, "err", err)
	}
	if d.set(held && err == nil) {
		m.log.Info("cluster duty", "duty", d.name, "held", held && err == nil)
	}
}

// clusterDuties declare nodes dead and place what has no node.
func (m *membership) clusterDuties(ctx context.Context) {
	loss, err := m.st.DeclareDeadNodes(ctx, m.deadAfter, m.node.ID)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			m.log.Warn("look for dead nodes", "err", err)
		}
	case len(loss.Nodes) > 0 || loss.Failed+loss.Replaced+loss.Deleted > 0:
		m.log.Warn("nodes declared dead", "nodes", loss.Nodes, "sandboxes_lost", loss.Failed,
			"creates_replaced", loss.Replaced, "deletes_completed", loss.Deleted)
	}
	if err := m.placeUnplaced(ctx); err != nil && ctx.Err() == nil {
		m.log.Warn("place sandboxes without a node", "err", err)
	}
}

// reportTemplates tells the store which templates this node holds, when
// that changed since the last report.
func (m *membership) reportTemplates(ctx context.Context) error {
	have, err := m.templates()
	if err != nil {
		return err
	}
	if m.reported != nil && slices.Equal(have, m.reported) {
		return nil
	}
	if err := m.st.SetNodeTemplates(ctx, m.fence(), have); err != nil {
		return err
	}
	m.reported = have
	if m.reported == nil {
		m.reported = []model.TemplateDigest{}
	}
	return nil
}

// placeUnplaced places sandboxes whose create has no node: ones a dead
// node had not started, and ones stored before nodes existed.
func (m *membership) placeUnplaced(ctx context.Context) error {
	list, err := m.st.ListUnplaced(ctx, placeBatch)
	if err != nil {
		return err
	}
	for _, sb := range list {
		sel := environment.Selector{Name: m.defaultEnvironment, Ref: sb.Environment}
		if sb.Environment == "" && sb.Runtime != "" {
			sel.Name = environment.Name(sb.Runtime)
		}
		req := placement.Request{Environment: sel, Template: sb.Template, Resources: sb.Resources, Selector: sb.NodeSelector}
		err := placement.PlaceAndCommit(ctx, m.placer, req, func(d placement.Decision) error { return m.st.AssignNode(ctx, sb.ID, d.Node) })
		if err != nil {
			m.log.Debug("sandbox waits for a node", "sandbox", sb.ID, "reason", err)
			continue
		}
		m.log.Info("sandbox placed again", "sandbox", sb.ID)
	}
	return nil
}

// component runs m; a fenced node's error stops the server.
func (m *membership) component() component {
	return component{name: "membership", run: m.run}
}
