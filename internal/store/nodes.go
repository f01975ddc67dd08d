package store

import (
	"context"
	"errors"
	"time"

	"github.com/airlockdev/airlock/internal/model"
)

var (
	// ErrFenced: a node wrote with an incarnation that is not its current
	// one, or after it was declared dead. The process must stop: another
	// incarnation owns the node's records, or its sandboxes were declared
	// lost.
	ErrFenced = errors.New("node fenced: its incarnation is not current or it was declared dead")
	// ErrNodeFull: the node a sandbox was to be placed on has no room left,
	// takes no new sandboxes (cordoned, draining, dead) or does not run
	// sandboxes.
	ErrNodeFull = errors.New("node cannot take the sandbox")
)

// Fence is the fencing token of a node's writes: its ID and current
// incarnation.
type Fence struct {
	Node        model.NodeID
	Incarnation model.Incarnation
}

// NodeTemplate says that a node holds a template locally.
type NodeTemplate struct {
	Node   model.NodeID
	Digest model.TemplateDigest
}

// NodeLoss is what DeclareDeadNodes did.
type NodeLoss struct {
	Nodes []model.NodeID // declared dead in this call
	// Failed counts the sandboxes that became failed ("node lost"),
	// Replaced the creates that were not started and lost their node (to be
	// placed again), Deleted the deletes that were completed (nothing is
	// left of a sandbox on a dead node; unclaimed pool sandboxes too).
	Failed, Replaced, Deleted int
}

// Nodes is the store's part of running several nodes on one database.
// Times of heartbeats and liveness are the database's clock.
type Nodes interface {
	// DatabaseNow returns the database's clock (to microseconds).
	DatabaseNow(ctx context.Context) (time.Time, error)
	// RegisterNode records n as its node's current incarnation (inserted,
	// or replacing the last one's row), with StartedAt and HeartbeatAt the
	// database's now. A dead node becomes active; cordoned and draining are
	// kept (an operator's decision outlives a restart). The node's list of
	// local templates is cleared. The stored record is returned.
	RegisterNode(ctx context.Context, n model.Node) (model.NodeStatus, error)
	// Heartbeat sets the node's heartbeat to the database's now and
	// returns it, only for its current incarnation while it is not dead:
	// ErrFenced otherwise.
	Heartbeat(ctx context.Context, f Fence) (time.Time, error)
	// GetNode returns one node, ErrNotFound if unknown.
	GetNode(ctx context.Context, id model.NodeID) (model.NodeStatus, error)
	// GetNodeRecord returns one node's own record (no usage: a read of
	// its row alone, for a forward to it), ErrNotFound if unknown.
	GetNodeRecord(ctx context.Context, id model.NodeID) (model.Node, error)
	// ListNodes returns every node, in ID order, with its usage and the
	// age of its heartbeat by the database's clock.
	ListNodes(ctx context.Context) ([]model.NodeStatus, error)
	// SetNodeState cordons (cordoned), drains (draining) or uncordons
	// (active) a node; a dead node is refused with
	// model.ErrInvalidTransition (it becomes active when it starts again).
	SetNodeState(ctx context.Context, id model.NodeID, state model.NodeState) (model.NodeStatus, error)
	// SetNodeTemplates replaces the node's list of local templates
	// (fenced: ErrFenced for a stale incarnation).
	SetNodeTemplates(ctx context.Context, f Fence, digests []model.TemplateDigest) error
	// NodesWithTemplate returns the nodes that hold the template locally.
	NodesWithTemplate(ctx context.Context, digest model.TemplateDigest) ([]model.NodeID, error)
	// DeclareDeadNodes declares dead every node that is not dead and whose
	// heartbeat is older than after by the database's clock and, in the
	// same transaction, settles the sandboxes on dead nodes: creates that
	// had not started are unplaced (to be placed again; their leases
	// released), deletes complete (the sandbox becomes deleted), every
	// other live sandbox becomes failed with reason model.NodeLostReason,
	// and the unfinished operations of the failed ones fail with code
	// "node_lost". Unclaimed pool sandboxes (any state) are deleted, not
	// failed or placed again: nobody else would remove them. It settles
	// sandboxes of nodes declared dead earlier too
	// (a delete requested after the loss), so it is safe to call from
	// every process, often. The node self (the caller's own, or "") is
	// never declared dead: a node whose heartbeat cannot be written (the
	// store slow or down) is alive, and declaring itself dead would fail
	// every sandbox it runs; another node declares it dead if it is gone.
	DeclareDeadNodes(ctx context.Context, after time.Duration, self model.NodeID) (NodeLoss, error)
	// HoldDutyLease takes, or renews, the lease on the cluster-wide duty
	// name for f's node run, for ttl by the database's clock, and reports
	// whether f holds it now. It is taken when nobody holds it, its holder
	// let it expire, or f already holds it; fenced (false, nil) when f is
	// not the node's current incarnation or the node is dead.
	HoldDutyLease(ctx context.Context, name string, f Fence, ttl time.Duration) (bool, error)
	// TransitionOnNode is TransitionSandbox for the node that hosts the
	// sandbox: fenced (ErrFenced when the sandbox is not placed on f.Node,
	// e.g. its node was declared dead and it was placed again, or f is not
	// the node's current incarnation), and it records runtime as the
	// sandbox's runtime when it has none yet ("" leaves it).
	TransitionOnNode(ctx context.Context, id model.SandboxID, f Fence, from, to model.SandboxState, reason, runtime string, now time.Time) error
	// ListUnplaced returns up to limit sandboxes whose create has no node
	// yet (pending, node_id empty), oldest first.
	ListUnplaced(ctx context.Context, limit int) ([]model.Sandbox, error)
	// AssignNode places an unplaced pending sandbox on node, checking the
	// node's room in the same transaction (ErrNodeFull);
	// ErrStateChanged if it was placed or left pending meanwhile.
	AssignNode(ctx context.Context, id model.SandboxID, node model.NodeID) error
}
