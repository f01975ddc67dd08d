package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// liveStatesSQL are the sandbox states that hold a node's room: every state
// but deleted and failed.
const liveStatesSQL = `s.state NOT IN ('deleted', 'failed')`

// dbNow is the database's clock in unix microseconds, as SQL.
func (s *Store) dbNow() string {
	if s.d.NowMicro != "" {
		return s.d.NowMicro
	}
	return `CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)`
}

const nodeColumns = `n.id, n.incarnation, n.role, n.advertise_url, n.slots, n.cpus, n.memory_mib, n.pids_budget, n.labels, n.can_pull,
	n.state, n.state_reason, n.started_at, n.heartbeat_at`

// nodeStatusQuery selects nodes with their usage and heartbeat age; the
// caller appends WHERE and ORDER BY.
func (s *Store) nodeStatusQuery() string {
	return `SELECT ` + nodeColumns + `, COALESCE(u.n, 0), COALESCE(u.cpus, 0), COALESCE(u.mem, 0), COALESCE(u.pids, 0), ` + s.dbNow() + ` - n.heartbeat_at
		FROM nodes n LEFT JOIN (
			SELECT s.node_id, COUNT(*) AS n, SUM(s.cpus) AS cpus, SUM(s.memory_mib) AS mem, SUM(s.host_pids) AS pids
			FROM sandboxes s WHERE s.node_id <> '' AND ` + liveStatesSQL + ` GROUP BY s.node_id) u ON u.node_id = n.id`
}

func scanNode(row interface{ Scan(...any) error }) (model.NodeStatus, error) {
	var (
		n                            model.NodeStatus
		id, inc, role, labels, state string
		canPull                      int
		started, heartbeat, ageMicro int64
	)
	err := row.Scan(&id, &inc, &role, &n.AdvertiseURL, &n.Slots, &n.CPUs, &n.MemoryMiB, &n.PidsBudget, &labels, &canPull,
		&state, &n.StateReason, &started, &heartbeat,
		&n.Usage.Sandboxes, &n.Usage.CPUs, &n.Usage.MemoryMiB, &n.Usage.Pids, &ageMicro)
	if err != nil {
		return model.NodeStatus{}, err
	}
	c := columns{row: "node " + id}
	n.ID = c.nodeID("id", id)
	if c.err != nil {
		return model.NodeStatus{}, c.err
	}
	if n.Incarnation, err = model.ParseIncarnation(inc); err != nil {
		return model.NodeStatus{}, fmt.Errorf("stored node %s: %w", id, err)
	}
	if n.Role, err = model.ParseNodeRole(role); err != nil {
		return model.NodeStatus{}, fmt.Errorf("stored node %s: %w", id, err)
	}
	if n.State, err = model.ParseNodeState(state); err != nil {
		return model.NodeStatus{}, fmt.Errorf("stored node %s: %w", id, err)
	}
	if n.Labels, err = decodeLabels(labels); err != nil {
		return model.NodeStatus{}, fmt.Errorf("stored node %s: %w", id, err)
	}
	n.CanPull = canPull == 1
	n.StartedAt = fromMicro(started)
	n.HeartbeatAt = fromMicro(heartbeat)
	n.HeartbeatAge = time.Duration(max(ageMicro, 0)) * time.Microsecond
	return n, nil
}

// encodeLabels checks labels as decodeLabels will and writes them as a
// JSON object ("" for none): labels the store could not read back would
// make their row unreadable.
func encodeLabels(l model.NodeLabels) (string, error) {
	if _, err := model.ParseNodeLabels(l); err != nil {
		return "", err
	}
	if len(l) == 0 {
		return "", nil
	}
	b, err := json.Marshal(l)
	return string(b), err
}

func decodeLabels(s string) (model.NodeLabels, error) {
	if s == "" {
		return nil, nil
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("labels: %w", err)
	}
	return model.ParseNodeLabels(m)
}

// DatabaseNow implements store.Nodes.
func (s *Store) DatabaseNow(ctx context.Context) (time.Time, error) {
	var v int64
	if err := s.queryRow(ctx, `SELECT `+s.dbNow()).Scan(&v); err != nil {
		return time.Time{}, fmt.Errorf("read the database's clock: %w", err)
	}
	return fromMicro(v), nil
}

// RegisterNode implements store.Nodes.
func (s *Store) RegisterNode(ctx context.Context, n model.Node) (model.NodeStatus, error) {
	if n.ID == "" || n.Incarnation == "" {
		return model.NodeStatus{}, fmt.Errorf("register node: %w: ID and incarnation are required", model.ErrInvalid)
	}
	// What scanNode parses must be valid, or one bad row would make
	// GetNode and ListNodes fail.
	if _, err := model.ParseNodeID(string(n.ID)); err != nil {
		return model.NodeStatus{}, fmt.Errorf("register node: %w", err)
	}
	if _, err := model.ParseIncarnation(string(n.Incarnation)); err != nil {
		return model.NodeStatus{}, fmt.Errorf("register node %s: %w", n.ID, err)
	}
	if _, err := model.ParseAdvertiseURL(n.AdvertiseURL); err != nil {
		return model.NodeStatus{}, fmt.Errorf("register node %s: %w", n.ID, err)
	}
	if _, err := model.ParseNodeRole(string(n.Role)); err != nil {
		return model.NodeStatus{}, fmt.Errorf("register node %s: %w", n.ID, err)
	}
	if n.Slots < 0 || n.CPUs < 0 || n.MemoryMiB < 0 || n.PidsBudget < 0 {
		return model.NodeStatus{}, fmt.Errorf("register node %s: %w: negative capacity", n.ID, model.ErrInvalid)
	}
	labels, err := encodeLabels(n.Labels)
	if err != nil {
		return model.NodeStatus{}, fmt.Errorf("register node %s: %w", n.ID, err)
	}
	canPull := 0
	if n.CanPull {
		canPull = 1
	}
	err = s.write(ctx, true, func(t tx) error {
		t.concerns(n.ID)
		var state string
		err := t.queryRow(ctx, `SELECT state FROM nodes WHERE id = ? `+s.d.RowLock, string(n.ID)).Scan(&state)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			_, err = t.exec(ctx, `INSERT INTO nodes (id, incarnation, role, advertise_url, slots, cpus, memory_mib, pids_budget, labels, can_pull,
				state, state_reason, started_at, heartbeat_at)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '', `+s.dbNow()+`, `+s.dbNow()+`)`,
				string(n.ID), string(n.Incarnation), string(n.Role), n.AdvertiseURL, n.Slots, n.CPUs, n.MemoryMiB, n.PidsBudget, labels, canPull,
				string(model.NodeActive))
			if err != nil {
				return fmt.Errorf("insert node: %w", s.insertErr(err))
			}
		case err != nil:
			return err
		default:
			if model.NodeState(state) == model.NodeDead {
				state = string(model.NodeActive)
			}
			_, err = t.exec(ctx, `UPDATE nodes SET incarnation = ?, role = ?, advertise_url = ?, slots = ?, cpus = ?, memory_mib = ?,
				pids_budget = ?, labels = ?, can_pull = ?, state = ?, state_reason = '', started_at = `+s.dbNow()+`, heartbeat_at = `+s.dbNow()+`
				WHERE id = ?`,
				string(n.Incarnation), string(n.Role), n.AdvertiseURL, n.Slots, n.CPUs, n.MemoryMiB, n.PidsBudget, labels, canPull, state,
				string(n.ID))
			if err != nil {
				return fmt.Errorf("update node: %w", err)
			}
		}
		_, err = t.exec(ctx, `DELETE FROM node_templates WHERE node_id = ?`, string(n.ID))
		return err
	})
	if err != nil {
		return model.NodeStatus{}, fmt.Errorf("register node %s: %w", n.ID, err)
	}
	return s.GetNode(ctx, n.ID)
}

// Heartbeat implements store.Nodes.
func (s *Store) Heartbeat(ctx context.Context, f store.Fence) (time.Time, error) {
	var at int64
	err := s.queryRow(ctx, `UPDATE nodes SET heartbeat_at = `+s.dbNow()+`
		WHERE id = ? AND incarnation = ? AND state <> 'dead' RETURNING heartbeat_at`,
		string(f.Node), string(f.Incarnation)).Scan(&at)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, fmt.Errorf("heartbeat of %s (%s): %w", f.Node, f.Incarnation, store.ErrFenced)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("heartbeat of %s: %w", f.Node, err)
	}
	return fromMicro(at), nil
}

// GetNode implements store.Nodes.
func (s *Store) GetNode(ctx context.Context, id model.NodeID) (model.NodeStatus, error) {
	n, err := scanNode(s.queryRow(ctx, s.nodeStatusQuery()+` WHERE n.id = ?`, string(id)))
	if err != nil {
		return model.NodeStatus{}, fmt.Errorf("get node %s: %w", id, errNotFound(err))
	}
	return n, nil
}

// GetNodeRecord implements store.Nodes: the nodes row alone, without the
// usage that GetNode sums over the live sandboxes.
func (s *Store) GetNodeRecord(ctx context.Context, id model.NodeID) (model.Node, error) {
	n, err := scanNode(s.queryRow(ctx, `SELECT `+nodeColumns+`, 0, 0, 0, 0, 0 FROM nodes n WHERE n.id = ?`, string(id)))
	if err != nil {
		return model.Node{}, fmt.Errorf("get node %s: %w", id, errNotFound(err))
	}
	return n.Node, nil
}

// ListNodes implements store.Nodes.
func (s *Store) ListNodes(ctx context.Context) ([]model.NodeStatus, error) {
	rows, err := s.query(ctx, s.nodeStatusQuery()+` ORDER BY n.id`)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	defer rows.Close()
	var out []model.NodeStatus
	for rows.Next() {
		n, err := scanNode(rows)
		if err != nil {
			return nil, fmt.Errorf("list nodes: %w", err)
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return out, nil
}

// SetNodeState implements store.Nodes.
func (s *Store) SetNodeState(ctx context.Context, id model.NodeID, state model.NodeState) (model.NodeStatus, error) {
	switch state {
	case model.NodeActive, model.NodeCordoned, model.NodeDraining:
	default:
		return model.NodeStatus{}, fmt.Errorf("set node %s %s: %w: only active, cordoned or draining can be set", id, state, model.ErrInvalid)
	}
	err := s.write(ctx, true, func(t tx) error {
		t.concerns(id)
		var cur string
		if err := t.queryRow(ctx, `SELECT state FROM nodes WHERE id = ? `+s.d.RowLock, string(id)).Scan(&cur); err != nil {
			return errNotFound(err)
		}
		if model.NodeState(cur) == model.NodeDead {
			return fmt.Errorf("%w: the node is dead; it becomes active when it starts again", model.ErrInvalidTransition)
		}
		_, err := t.exec(ctx, `UPDATE nodes SET state = ? WHERE id = ?`, string(state), string(id))
		return err
	})
	if err != nil {
		return model.NodeStatus{}, fmt.Errorf("set node %s %s: %w", id, state, err)
	}
	return s.GetNode(ctx, id)
}

// SetNodeTemplates implements store.Nodes.
func (s *Store) SetNodeTemplates(ctx context.Context, f store.Fence, digests []model.TemplateDigest) error {
	err := s.write(ctx, false, func(t tx) error {
		if err := t.fenced(ctx, f.Node, f.Incarnation, nil); err != nil {
			return err
		}
		if _, err := t.exec(ctx, `DELETE FROM node_templates WHERE node_id = ?`, string(f.Node)); err != nil {
			return err
		}
		for _, d := range slices.Compact(slices.Sorted(slices.Values(digests))) { // a set
			if _, err := model.ParseTemplateDigest(string(d)); err != nil {
				return err
			}
			if _, err := t.exec(ctx, `INSERT INTO node_templates (node_id, digest) VALUES (?, ?)`, string(f.Node), string(d)); err != nil {
				return fmt.Errorf("insert %s: %w", d, s.insertErr(err))
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("set templates of node %s: %w", f.Node, err)
	}
	return nil
}

// NodesWithTemplate implements store.Nodes.
func (s *Store) NodesWithTemplate(ctx context.Context, digest model.TemplateDigest) ([]model.NodeID, error) {
	rows, err := s.query(ctx, `SELECT node_id FROM node_templates WHERE digest = ? ORDER BY node_id`, string(digest))
	if err != nil {
		return nil, fmt.Errorf("nodes with template %s: %w", digest, err)
	}
	defer rows.Close()
	var out []model.NodeID
	for rows.Next() {
		var raw string
		if err := rows.Scan(&raw); err != nil {
			return nil, fmt.Errorf("nodes with template %s: %w", digest, err)
		}
		id, err := model.ParseNodeID(raw)
		if err != nil {
			return nil, fmt.Errorf("nodes with template %s: %w", digest, err)
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// DeclareDeadNodes implements store.Nodes. A cheap read first says whether
// there is anything to do (every process calls this after every
// heartbeat): no transaction, no lock and no notification when not. Then,
// in one transaction, stale nodes become dead and the sandboxes to settle
// are locked in ID order (the store locks a sandbox before its operations:
// FinishOperation, RequestDelete) and read once, so that each statement
// below works on exactly that set, whatever commits meanwhile (on
// PostgreSQL each statement reads a new snapshot): a delete requested
// later is settled by the next call.
func (s *Store) DeclareDeadNodes(ctx context.Context, after time.Duration, self model.NodeID) (store.NodeLoss, error) {
	if after <= 0 {
		return store.NodeLoss{}, fmt.Errorf("declare dead nodes: %w: the limit %s must be positive", model.ErrInvalid, after)
	}
	stale := `SELECT 1 FROM nodes WHERE state <> 'dead' AND heartbeat_at < (` + s.dbNow() + `) - ? AND id <> ?`
	var todo int
	if err := s.queryRow(ctx, `SELECT CASE WHEN EXISTS (`+stale+`) OR EXISTS (`+unsettledSQL+`) THEN 1 ELSE 0 END`,
		after.Microseconds(), string(self)).Scan(&todo); err != nil {
		return store.NodeLoss{}, fmt.Errorf("declare dead nodes: %w", err)
	}
	if todo == 0 {
		return store.NodeLoss{}, nil
	}
	var loss store.NodeLoss
	err := s.write(ctx, true, func(t tx) error {
		t.concernsAll() // sandboxes of dead nodes wait to be placed anew
		loss = store.NodeLoss{}
		var now int64
		if err := t.queryRow(ctx, `SELECT `+s.dbNow()).Scan(&now); err != nil {
			return err
		}
		rows, err := t.tx.QueryContext(ctx, s.q(`UPDATE nodes SET state = 'dead', state_reason = ?
			WHERE state <> 'dead' AND heartbeat_at < ? AND id <> ? RETURNING id`),
			fmt.Sprintf("no heartbeat for %s", after), now-after.Microseconds(), string(self))
		if err != nil {
			return fmt.Errorf("mark nodes dead: %w", err)
		}
		for rows.Next() {
			var raw string
			if err := rows.Scan(&raw); err != nil {
				rows.Close()
				return err
			}
			loss.Nodes = append(loss.Nodes, model.NodeID(raw))
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		set, err := t.unsettled(ctx)
		if err != nil {
			return fmt.Errorf("lock the sandboxes of dead nodes: %w", err)
		}
		// Creates that had not started: placed again elsewhere.
		if err := t.inIDs(ctx, `UPDATE operations SET lease_owner = '', lease_incarnation = '', lease_expires_at = 0, updated_at = ?
			WHERE state IN ('pending', 'running') AND sandbox_id IN`, set.unstarted, now); err != nil {
			return fmt.Errorf("release creates: %w", err)
		}
		if err := t.inIDs(ctx, `UPDATE sandboxes SET node_id = '', runtime = '', updated_at = ? WHERE id IN`, set.unstarted, now); err != nil {
			return fmt.Errorf("unplace creates: %w", err)
		}
		loss.Replaced = len(set.unstarted)
		// Deletes complete: nothing of the sandbox is reachable any more.
		// Any other unfinished operation of the sandbox (a create still
		// under way when the delete was requested) fails: no node will
		// finish it.
		if err := t.inIDs(ctx, `UPDATE operations SET state = 'succeeded', updated_at = ?, finished_at = ?
			WHERE state IN ('pending', 'running') AND kind = 'delete' AND sandbox_id IN`, set.deleting, now, now); err != nil {
			return fmt.Errorf("complete deletes: %w", err)
		}
		if err := t.inIDs(ctx, `UPDATE operations SET state = 'failed', error_code = ?, error_message = ?,
			updated_at = ?, finished_at = ?
			WHERE state IN ('pending', 'running') AND kind <> 'delete' AND sandbox_id IN`, set.deleting,
			model.OpErrNodeLost, "the sandbox's node was declared dead", now, now); err != nil {
			return fmt.Errorf("fail operations of deleted sandboxes: %w", err)
		}
		if err := t.inIDs(ctx, `UPDATE sandboxes SET state = 'deleted', state_reason = ?, updated_at = ? WHERE id IN`,
			set.deleting, model.NodeLostReason, now); err != nil {
			return fmt.Errorf("delete sandboxes: %w", err)
		}
		loss.Deleted = len(set.deleting)
		// Everything else that lived there is lost.
		if err := t.inIDs(ctx, `UPDATE operations SET state = 'failed', error_code = ?, error_message = ?,
			updated_at = ?, finished_at = ?
			WHERE state IN ('pending', 'running') AND sandbox_id IN`, set.lost,
			model.OpErrNodeLost, "the sandbox's node was declared dead", now, now); err != nil {
			return fmt.Errorf("fail operations: %w", err)
		}
		if err := t.inIDs(ctx, `UPDATE sandboxes SET state = 'failed', state_reason = ?, updated_at = ? WHERE id IN`,
			set.lost, model.NodeLostReason, now); err != nil {
			return fmt.Errorf("fail sandboxes: %w", err)
		}
		loss.Failed = len(set.lost)
		return nil
	})
	if err != nil {
		return store.NodeLoss{}, fmt.Errorf("declare dead nodes: %w", err)
	}
	return loss, nil
}

// unsettledSQL selects the sandboxes DeclareDeadNodes settles: every live
// one (not deleted, not failed) on a dead node, and deletes of sandboxes
// that have no node (nothing of them exists anywhere; no node would claim
// their delete).
const unsettledSQL = `SELECT s.id, s.state, s.pool_id FROM sandboxes s
	WHERE (s.node_id IN (SELECT id FROM nodes WHERE state = 'dead')
	       AND (s.state NOT IN ('deleted', 'failed') OR (s.pool_id <> '' AND s.state = 'failed')))
	   OR (s.node_id = '' AND s.state = 'deleting')`

// unsettledSet is what DeclareDeadNodes does to which sandboxes.
type unsettledSet struct {
	unstarted, deleting, lost []string
}

// unsettled locks the sandboxes to settle, in ID order, and sorts them.
func (t tx) unsettled(ctx context.Context) (unsettledSet, error) {
	var set unsettledSet
	rows, err := t.tx.QueryContext(ctx, t.s.q(unsettledSQL+` ORDER BY s.id `+t.s.d.RowLock))
	if err != nil {
		return set, err
	}
	defer rows.Close()
	for rows.Next() {
		var id, state, pool string
		if err := rows.Scan(&id, &state, &pool); err != nil {
			return set, err
		}
		switch model.SandboxState(state) {
		case model.StatePending, model.StateFailed, model.StateCreating, model.StateRunning:
			if pool != "" {
				// An unclaimed pool sandbox is nobody's: gone with its
				// node, never placed again (the pools of the live nodes
				// make their own).
				set.deleting = append(set.deleting, id)
				continue
			}
		}
		switch model.SandboxState(state) {
		case model.StatePending:
			set.unstarted = append(set.unstarted, id)
		case model.StateDeleting:
			set.deleting = append(set.deleting, id)
		default:
			set.lost = append(set.lost, id)
		}
	}
	return set, rows.Err()
}

// inIDs runs an UPDATE whose text ends in "IN" for ids, in batches (args
// come before the IDs).
func (t tx) inIDs(ctx context.Context, update string, ids []string, args ...any) error {
	const batch = 500
	for len(ids) > 0 {
		n := min(len(ids), batch)
		all := append(append([]any{}, args...), toAny(ids[:n])...)
		if _, err := t.exec(ctx, update+` (`+placeholders(n)+`)`, all...); err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}

func toAny(ids []string) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}

// TransitionOnNode implements store.Nodes: the sandbox row is locked, its
// node and state compared, the fence checked (share-locking the node's
// row), and the state changed, in one transaction.
func (s *Store) TransitionOnNode(ctx context.Context, id model.SandboxID, f store.Fence, from, to model.SandboxState, reason, runtime string, now time.Time) error {
	if err := model.CheckTransition(from, to); err != nil {
		return fmt.Errorf("transition sandbox %s: %w", id, err)
	}
	err := s.write(ctx, true, func(t tx) error {
		var state, node string
		if err := t.queryRow(ctx, `SELECT state, node_id FROM sandboxes WHERE id = ? `+s.d.RowLock, string(id)).Scan(&state, &node); err != nil {
			return errNotFound(err)
		}
		t.concerns(model.NodeID(node))
		if node != string(f.Node) {
			if node == "" {
				return fmt.Errorf("%w: the sandbox has no node (its node was declared dead; it waits to be placed again)", store.ErrFenced)
			}
			return fmt.Errorf("%w: the sandbox is placed on %s", store.ErrFenced, node)
		}
		if err := t.fenced(ctx, f.Node, f.Incarnation, nil); err != nil {
			return err
		}
		if model.SandboxState(state) != from {
			return fmt.Errorf("%w: sandbox is %s, expected %s", store.ErrStateChanged, state, from)
		}
		_, err := t.exec(ctx, `UPDATE sandboxes SET state = ?, state_reason = ?, updated_at = ?,
			runtime = CASE WHEN runtime = '' THEN ? ELSE runtime END WHERE id = ?`,
			string(to), reason, micro(now), runtime, string(id))
		return err
	})
	if err != nil {
		return fmt.Errorf("transition sandbox %s from %s to %s on %s: %w", id, from, to, f.Node, err)
	}
	return nil
}

// ListUnplaced implements store.Nodes.
func (s *Store) ListUnplaced(ctx context.Context, limit int) ([]model.Sandbox, error) {
	if limit < MinListLimit || limit > MaxListLimit {
		return nil, fmt.Errorf("list unplaced sandboxes: %w: limit %d must be between %d and %d", model.ErrInvalid, limit, MinListLimit, MaxListLimit)
	}
	rows, err := s.query(ctx, `SELECT `+sandboxColumns+` FROM sandboxes s WHERE s.node_id = '' AND s.state = 'pending'
		ORDER BY s.created_at, s.id LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("list unplaced sandboxes: %w", err)
	}
	defer rows.Close()
	list, err := collectSandboxes(rows)
	if err != nil {
		return nil, fmt.Errorf("list unplaced sandboxes: %w", err)
	}
	return list, nil
}

// AssignNode implements store.Nodes.
func (s *Store) AssignNode(ctx context.Context, id model.SandboxID, node model.NodeID) error {
	err := s.write(ctx, true, func(t tx) error {
		t.concerns(node)
		var cpus, mem, pids int
		if err := t.queryRow(ctx, `SELECT s.cpus, s.memory_mib, s.host_pids FROM sandboxes s WHERE s.id = ? AND s.node_id = '' AND s.state = 'pending' `+s.d.RowLock,
			string(id)).Scan(&cpus, &mem, &pids); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return store.ErrStateChanged
			}
			return err
		}
		if err := t.checkRoom(ctx, node, model.Resources{CPUs: cpus, MemoryMiB: mem, HostPids: pids}, id); err != nil {
			return err
		}
		_, err := t.exec(ctx, `UPDATE sandboxes SET node_id = ? WHERE id = ?`, string(node), string(id))
		return err
	})
	if err != nil {
		return fmt.Errorf("assign sandbox %s to %s: %w", id, node, err)
	}
	return nil
}

// checkRoom locks the node's row (placements on one node serialize) and
// refuses with store.ErrNodeFull a node that does not run sandboxes, takes
// no new ones, or has no room for one more of r besides its live
// sandboxes other than self (the sandbox being placed, which the
// transaction may have inserted already). The count is a statement of its
// own after the lock, so that under READ COMMITTED it sees every placement
// committed while this one waited for the lock.
func (t tx) checkRoom(ctx context.Context, node model.NodeID, r model.Resources, self model.SandboxID) error {
	var role, state string
	var slots, memory, pids int
	err := t.queryRow(ctx, `SELECT role, state, slots, memory_mib, pids_budget FROM nodes WHERE id = ? `+t.s.d.RowLock, string(node)).
		Scan(&role, &state, &slots, &memory, &pids)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: node %s is not registered", store.ErrNodeFull, node)
	}
	if err != nil {
		return err
	}
	if !model.NodeRole(role).RunsSandboxes() {
		return fmt.Errorf("%w: node %s has role %s", store.ErrNodeFull, node, role)
	}
	if model.NodeState(state) != model.NodeActive {
		return fmt.Errorf("%w: node %s is %s", store.ErrNodeFull, node, state)
	}
	var u model.NodeUsage
	if err := t.queryRow(ctx, `SELECT COUNT(*), COALESCE(SUM(s.cpus), 0), COALESCE(SUM(s.memory_mib), 0), COALESCE(SUM(s.host_pids), 0)
		FROM sandboxes s WHERE s.node_id = ? AND s.id <> ? AND `+liveStatesSQL, string(node), string(self)).Scan(&u.Sandboxes, &u.CPUs, &u.MemoryMiB, &u.Pids); err != nil {
		return err
	}
	st := model.NodeStatus{Node: model.Node{Slots: slots, MemoryMiB: memory, PidsBudget: pids}, Usage: u}
	if lacks := st.Lacks(r); lacks != "" {
		return fmt.Errorf("%w: node %s is full (%s)", store.ErrNodeFull, node, lacks)
	}
	return nil
}

// fenceArgs are the arguments of fenceSQL.
func fenceArgs(f store.Fence) []any {
	return []any{string(f.Node), string(f.Incarnation)}
}

// selectorJSON encodes a sandbox's node selector.
func selectorJSON(l model.NodeLabels) (string, error) {
	s, err := encodeLabels(l)
	if err != nil {
		return "", fmt.Errorf("node selector: %w", err)
	}
	return s, nil
}
