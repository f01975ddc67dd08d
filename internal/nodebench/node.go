package nodebench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/airlockdev/airlock/internal/controller"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/worker"
)

// simNode is one simulated `airlock server --role node`: its node record,
// environment and template rows, heartbeats, dead-node sweeps and the real
// controller over a simulated runtime.
type simNode struct {
	id    model.NodeID
	inc   model.Incarnation
	st    store.Store // the recording wrapper of the nodes' store
	agent *simAgent
	set   *worker.Set

	cancel context.CancelFunc
	wg     sync.WaitGroup
	errMu  sync.Mutex
	err    error // first failure of its heartbeat loop
}

// nodeSetup is what every simulated node of a step shares.
type nodeSetup struct {
	store     store.Store
	env       store.EnvironmentRecord
	template  model.TemplateDigest
	tracker   *tracker
	parallel  int
	heartbeat time.Duration
	deadAfter time.Duration
	logger    *slog.Logger
}

// Slots and memory of a simulated node: far more than a step creates, so
// room never refuses a placement (the store's room check still runs).
const (
	nodeSlots     = 1_000_000
	nodeMemoryMiB = nodeSlots * sandboxMemoryMiB
	nodeCPUs      = 64
)

// startNode registers a node with a fresh incarnation, records its
// environment and template, and starts its heartbeat loop and controller.
func startNode(ctx context.Context, i int, s nodeSetup) (*simNode, error) {
	n := &simNode{id: model.NewNodeID(), inc: model.NewIncarnation(), agent: newSimAgent()}
	n.st = &recordingStore{Store: s.store, node: n.id, tracker: s.tracker}
	fail := func(err error) (*simNode, error) {
		n.agent.Close()
		return nil, fmt.Errorf("simulated node %d (%s): %w", i, n.id, err)
	}
	_, err := s.store.RegisterNode(ctx, model.Node{
		ID: n.id, Incarnation: n.inc, Role: model.RoleNode,
		AdvertiseURL: fmt.Sprintf("http://sim-node-%d.invalid:7878", i),
		Slots:        nodeSlots, CPUs: nodeCPUs, MemoryMiB: nodeMemoryMiB,
		CanPull: true,
	})
	if err != nil {
		return fail(err)
	}
	now := time.Now()
	if err := s.store.SetNodeEnvironments(ctx, n.id, []store.NodeEnvironment{{
		NodeID: n.id, Ref: s.env.Ref, Enabled: true, Available: true, CheckedAt: now,
	}}); err != nil {
		return fail(err)
	}
	fence := store.Fence{Node: n.id, Incarnation: n.inc}
	if err := s.store.SetNodeTemplates(ctx, fence, []model.TemplateDigest{s.template}); err != nil {
		return fail(err)
	}
	wk, err := worker.New(worker.Config{
		Runtime:     newSimRuntime(n.agent),
		TemplateDir: func(model.TemplateDigest) (string, error) { return "/nonexistent/simulated-template", nil },
		AgentBinary: "/nonexistent/simulated-airlock-agent",
		AgentWait:   10 * time.Second,
		Environment: s.env.Ref,
		Logger:      s.logger,
	})
	if err != nil {
		return fail(err)
	}
	n.set, err = worker.NewSet([]worker.Environment{{Name: environment.NameRunc, Ref: s.env.Ref, Worker: wk}}, s.store.GetSandboxByID)
	if err != nil {
		return fail(err)
	}
	ctrl, err := controller.New(controller.Config{
		Store:       n.st,
		Workers:     n.set,
		NodeID:      n.id,
		Incarnation: n.inc,
		Parallel:    s.parallel,
		Resync:      time.Hour, // a step is short; the initial resync runs
		Logger:      s.logger,
	})
	if err != nil {
		return fail(err)
	}
	nctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.cancel = cancel
	n.wg.Add(2)
	go func() {
		defer n.wg.Done()
		_ = ctrl.Run(nctx)
	}()
	go func() {
		defer n.wg.Done()
		n.heartbeats(nctx, fence, s)
	}()
	return n, nil
}

// heartbeats beats and sweeps for dead nodes every interval, as a node
// process does.
func (n *simNode) heartbeats(ctx context.Context, f store.Fence, s nodeSetup) {
	t := time.NewTicker(s.heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := s.store.Heartbeat(ctx, f); err != nil && ctx.Err() == nil {
			n.fail(fmt.Errorf("heartbeat: %w", err))
		}
		if _, err := s.store.DeclareDeadNodes(ctx, s.deadAfter, f.Node); err != nil && ctx.Err() == nil {
			n.fail(fmt.Errorf("declare dead nodes: %w", err))
		}
	}
}

func (n *simNode) fail(err error) {
	n.errMu.Lock()
	defer n.errMu.Unlock()
	if n.err == nil {
		n.err = err
	}
}

// stop stops the controller and the heartbeats and returns the first
// heartbeat failure.
func (n *simNode) stop() error {
	n.cancel()
	n.wg.Wait()
	_ = n.set.Close()
	_ = n.agent.Close()
	n.errMu.Lock()
	defer n.errMu.Unlock()
	return n.err
}

// recordingStore is the store a simulated node's controller uses: the real
// one, with its claims and finished operations recorded.
type recordingStore struct {
	store.Store
	node    model.NodeID
	tracker *tracker
}

func (s *recordingStore) ClaimOperation(ctx context.Context, c store.Claim) (model.Operation, error) {
	op, err := s.Store.ClaimOperation(ctx, c)
	if err == nil {
		s.tracker.claimed(op.ID, s.node)
	}
	return op, err
}

func (s *recordingStore) FinishOperation(ctx context.Context, f store.Finish) error {
	err := s.Store.FinishOperation(ctx, f)
	if err == nil {
		s.tracker.finished(f.OperationID, s.node, f.State, time.Now())
	}
	return err
}

// tracker follows every create of a step from its request to its
// operation's end.
type tracker struct {
	mu    sync.Mutex
	ops   map[model.OperationID]*createRecord
	done  int
	doneC chan struct{} // closed when done reaches want
	want  int
	// unknown counts claims of operations the driver did not issue.
	unknown int
}

type createRecord struct {
	node       model.NodeID // the node it was placed on
	requested  time.Time
	placed     time.Time // its row committed
	claims     int
	claimedBy  model.NodeID
	finished   time.Time
	finishedBy model.NodeID
	state      model.OperationState
}

func newTracker(want int) *tracker {
	return &tracker{ops: make(map[model.OperationID]*createRecord, want), doneC: make(chan struct{}), want: want}
}

// requested records a create about to be inserted (before the insert: its
// node may claim it before CreateSandbox returns).
func (t *tracker) requested(id model.OperationID, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ops[id] = &createRecord{requested: at}
}

func (t *tracker) placed(id model.OperationID, node model.NodeID, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.ops[id]; r != nil {
		r.node, r.placed = node, at
	}
}

func (t *tracker) claimed(id model.OperationID, node model.NodeID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.ops[id]
	if r == nil {
		t.unknown++
		return
	}
	r.claims++
	r.claimedBy = node
}

func (t *tracker) finished(id model.OperationID, node model.NodeID, state model.OperationState, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.ops[id]
	if r == nil || !r.finished.IsZero() {
		return
	}
	r.finished, r.finishedBy, r.state = at, node, state
	t.done++
	if t.done == t.want {
		close(t.doneC)
	}
}

// wait waits until every create finished, ctx ends or timeout passes.
func (t *tracker) wait(ctx context.Context, timeout time.Duration) error {
	tm := time.NewTimer(timeout)
	defer tm.Stop()
	select {
	case <-t.doneC:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		t.mu.Lock()
		defer t.mu.Unlock()
		return fmt.Errorf("%w: %d of %d creates finished within %s", errStuck, t.done, t.want, timeout)
	}
}

var errStuck = errors.New("creates did not finish")
