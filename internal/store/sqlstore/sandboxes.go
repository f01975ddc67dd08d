package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// Listing bounds of SandboxQuery.Limit.
const (
	MinListLimit = 1
	MaxListLimit = 1000
)

const sandboxColumns = `s.id, s.project_id, s.template_digest, s.cpus, s.memory_mib, s.disk_mib, s.env, s.metadata,
	s.state, s.state_reason, s.node_id, s.runtime, s.created_at, s.updated_at,
	s.environment, s.snapshot, s.idle_timeout_ms, s.deadline, s.on_timeout, s.timeout_snapshot_kind, s.last_activity_at, s.node_selector,
	s.pool_id, s.source, s.public_ports, s.host_pids, s.volume_mounts, s.from_snapshot`

func scanSandbox(row interface{ Scan(...any) error }) (model.Sandbox, error) {
	var (
		sb                             model.Sandbox
		id, project, digest            string
		env, metadata, state, node, rt string
		created, updated               int64
		envRef, onTimeout, selector    string
		timeoutKind                    string
		pool, source, fromSnapshot     string
		snapshot                       sql.NullString
		idleMS, deadline, activity     int64
		public                         int
		volumes                        string
	)
	err := row.Scan(&id, &project, &digest, &sb.Resources.CPUs, &sb.Resources.MemoryMiB, &sb.Resources.DiskMiB, &env, &metadata,
		&state, &sb.StateReason, &node, &rt, &created, &updated,
		&envRef, &snapshot, &idleMS, &deadline, &onTimeout, &timeoutKind, &activity, &selector,
		&pool, &source, &public, &sb.Resources.HostPids, &volumes, &fromSnapshot)
	if err != nil {
		return model.Sandbox{}, err
	}
	if sb.VolumeMounts, err = decodeVolumeMounts(volumes); err != nil {
		return model.Sandbox{}, fmt.Errorf("stored sandbox %s: volume mounts: %w", id, err)
	}
	sb.PublicPorts = public != 0
	if fromSnapshot != "" {
		if sb.FromSnapshot, err = model.ParseSnapshotID(fromSnapshot); err != nil {
			return model.Sandbox{}, fmt.Errorf("stored sandbox %s: %w", id, err)
		}
	}
	if pool != "" {
		if sb.Pool, err = model.ParsePoolID(pool); err != nil {
			return model.Sandbox{}, fmt.Errorf("stored sandbox %s: %w", id, err)
		}
	}
	if source != "" {
		if sb.Source, err = model.ParseSource(source); err != nil {
			return model.Sandbox{}, fmt.Errorf("stored sandbox %s: %w", id, err)
		}
	}
	if envRef != "" {
		if sb.Environment, err = model.ParseEnvironmentRef(envRef); err != nil {
			return model.Sandbox{}, fmt.Errorf("stored sandbox %s: %w", id, err)
		}
	}
	if snapshot.Valid {
		if sb.Snapshot, err = decodeSnapshot(snapshot.String); err != nil {
			return model.Sandbox{}, fmt.Errorf("stored sandbox %s: %w", id, err)
		}
	}
	if sb.Timeouts.OnTimeout, err = model.ParseOnTimeout(onTimeout); err != nil {
		return model.Sandbox{}, fmt.Errorf("stored sandbox %s: %w", id, err)
	}
	if timeoutKind != "" {
		if sb.Timeouts.SnapshotKind, err = model.ParseSnapshotKind(timeoutKind); err != nil {
			return model.Sandbox{}, fmt.Errorf("stored sandbox %s: timeout snapshot kind: %w", id, err)
		}
	}
	if sb.NodeSelector, err = decodeLabels(selector); err != nil {
		return model.Sandbox{}, fmt.Errorf("stored sandbox %s: node selector: %w", id, err)
	}
	sb.Timeouts.Idle = time.Duration(idleMS) * time.Millisecond
	sb.Timeouts.Deadline = fromMicroOrZero(deadline)
	sb.LastActivity = fromMicroOrZero(activity)
	st, err := model.ParseSandboxState(state)
	if err != nil {
		return model.Sandbox{}, fmt.Errorf("stored sandbox %s: %w", id, err)
	}
	if err := json.Unmarshal([]byte(env), &sb.Env); err != nil {
		return model.Sandbox{}, fmt.Errorf("stored sandbox %s: env: %w", id, err)
	}
	if err := json.Unmarshal([]byte(metadata), &sb.Metadata); err != nil {
		return model.Sandbox{}, fmt.Errorf("stored sandbox %s: metadata: %w", id, err)
	}
	if sb.Env == nil {
		sb.Env = model.Env{}
	}
	if sb.Metadata == nil {
		sb.Metadata = model.Metadata{}
	}
	c := columns{row: "sandbox " + id}
	sb.ID = c.sandboxID("id", id)
	sb.ProjectID = c.projectID("project_id", project)
	sb.Template = c.digest("template", digest)
	sb.NodeID = c.nodeID("node_id", node)
	if c.err != nil {
		return model.Sandbox{}, c.err
	}
	sb.State = st
	sb.Runtime = rt
	sb.CreatedAt = fromMicro(created)
	sb.UpdatedAt = fromMicro(updated)
	return sb, nil
}

// onTimeoutColumns checks what a deadline does and the kind of snapshot
// its suspend writes ("" for a delete): the on_timeout and
// timeout_snapshot_kind columns.
func onTimeoutColumns(to model.Timeouts) (model.OnTimeout, model.SnapshotKind, error) {
	on, err := model.ParseOnTimeout(string(to.OnTimeout))
	if err != nil {
		return "", "", err
	}
	if to.SnapshotKind == "" {
		return on, "", nil
	}
	if on != model.OnTimeoutSuspend {
		return "", "", fmt.Errorf("%w: a snapshot kind for the deadline needs on_timeout suspend, not %s", model.ErrInvalid, on)
	}
	kind, err := model.ParseSnapshotKind(string(to.SnapshotKind))
	return on, kind, err
}

// jsonMap encodes a string map as a JSON object ("{}" for nil).
func jsonMap(m map[string]string) (string, error) {
	if m == nil {
		return "{}", nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// CreateSandbox implements store.Store. The sandbox must be pending (or have
// no state yet) and op must be its pending create operation. A used
// idempotency key gives *store.IdempotencyConflictError, an unknown project
// or template store.ErrNotFound, a duplicate ID store.ErrAlreadyExists, a
// sandbox over its project's quota a *model.QuotaExceededError; in every
// error case nothing is written. The idempotency record goes first, so a
// retry of a create that took the last slot is answered as a replay, not
// as over quota.
func (s *Store) CreateSandbox(ctx context.Context, sb model.Sandbox, egress policy.Spec, op model.Operation, idem *store.IdempotencyRecord) error {
	err := s.write(ctx, true, func(t tx) error {
		t.concerns(sb.NodeID) // none when unplaced: the duty pass places it
		if err := t.insertIdempotency(ctx, idem); err != nil {
			return err
		}
		return t.insertSandbox(ctx, sb, egress, op)
	})
	if err != nil {
		return fmt.Errorf("create sandbox %s: %w", sb.ID, err)
	}
	return nil
}

// CreateSandboxes implements store.Store: CreateSandbox of several
// sandboxes in one transaction, the quota checked for each after the ones
// before it are inserted, so all are admitted or none.
func (s *Store) CreateSandboxes(ctx context.Context, sbs []model.Sandbox, egress policy.Spec, ops []model.Operation, idem *store.IdempotencyRecord) error {
	if len(sbs) == 0 || len(sbs) != len(ops) {
		return fmt.Errorf("create sandboxes: %w: %d sandboxes and %d operations", model.ErrInvalid, len(sbs), len(ops))
	}
	err := s.write(ctx, true, func(t tx) error {
		if err := t.insertIdempotency(ctx, idem); err != nil {
			return err
		}
		for i, sb := range sbs {
			t.concerns(sb.NodeID)
			if err := t.insertSandbox(ctx, sb, egress, ops[i]); err != nil {
				return fmt.Errorf("sandbox %s: %w", sb.ID, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("create %d sandboxes: %w", len(sbs), err)
	}
	return nil
}

// insertSandbox is CreateSandbox's insert of one sandbox, its create
// operation and its egress policy inside t, after its quota and its node's
// room are checked.
func (t tx) insertSandbox(ctx context.Context, sb model.Sandbox, egress policy.Spec, op model.Operation) error {
	if err := checkCreate(sb, op); err != nil {
		return err
	}
	if err := egress.Check(); err != nil {
		return err
	}
	egressText, err := encodeSpec(egress)
	if err != nil {
		return err
	}
	env, err := jsonMap(sb.Env)
	if err != nil {
		return fmt.Errorf("env: %w", err)
	}
	metadata, err := jsonMap(sb.Metadata)
	if err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	onTimeout, timeoutKind, err := onTimeoutColumns(sb.Timeouts) // "": delete
	if err != nil {
		return err
	}
	selector, err := selectorJSON(sb.NodeSelector)
	if err != nil {
		return err
	}
	volumes, err := encodeVolumeMounts(sb.VolumeMounts)
	if err != nil {
		return fmt.Errorf("volume mounts: %w", err)
	}
	if err := t.admit(ctx, sb.ProjectID, sb.Resources); err != nil {
		return err
	}
	// The template must be live, and stays so until this commits.
	if err := t.lockLiveTemplate(ctx, sb.Template); err != nil {
		return err
	}
	if sb.FromSnapshot != "" {
		// The snapshot must be ready, and stays so until this commits
		// (a delete waits for the sandboxes being made from it).
		if err := t.lockReadySnapshot(ctx, sb.ProjectID, sb.FromSnapshot); err != nil {
			return err
		}
	}
	_, err = t.exec(ctx, `INSERT INTO sandboxes (id, project_id, template_digest, cpus, memory_mib, disk_mib, env, metadata,
		state, state_reason, node_id, runtime, created_at, updated_at, egress,
		environment, idle_timeout_ms, deadline, on_timeout, timeout_snapshot_kind, last_activity_at, node_selector, pool_id, public_ports, host_pids, volume_mounts, from_snapshot)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		string(sb.ID), string(sb.ProjectID), string(sb.Template), sb.Resources.CPUs, sb.Resources.MemoryMiB,
		sb.Resources.DiskMiB, env, metadata, string(model.StatePending), sb.StateReason, string(sb.NodeID), sb.Runtime,
		micro(sb.CreatedAt), micro(sb.UpdatedAt), egressText,
		string(sb.Environment), sb.Timeouts.Idle.Milliseconds(), microOrZero(sb.Timeouts.Deadline), string(onTimeout), string(timeoutKind),
		microOrZero(sb.LastActivity), selector, string(sb.Pool), boolInt(sb.PublicPorts), sb.Resources.HostPids, volumes, string(sb.FromSnapshot))
	if err != nil {
		return fmt.Errorf("insert sandbox: %w", t.s.insertErr(err))
	}
	if err := t.mountVolumes(ctx, sb); err != nil {
		return err
	}
	if err := t.setSandboxProfiles(ctx, sb.ID, egress); err != nil {
		return err
	}
	for k, v := range sb.Metadata {
		if _, err := t.exec(ctx, `INSERT INTO sandbox_metadata (sandbox_id, key, value) VALUES (?, ?, ?)`,
			string(sb.ID), k, v); err != nil {
			return fmt.Errorf("insert metadata %q: %w", k, err)
		}
	}
	if err := t.insertOperation(ctx, op); err != nil {
		return err
	}
	if sb.NodeID == "" {
		return nil
	}
	// The node's room is checked last: its row lock serializes the
	// placements on the node until commit, so it is held for as few
	// statements as possible (the count of its sandboxes, the notify,
	// the commit), not for every insert above.
	return t.checkRoom(ctx, sb.NodeID, sb.Resources, sb.ID)
}

func checkCreate(sb model.Sandbox, op model.Operation) error {
	switch {
	case sb.State != "" && sb.State != model.StatePending:
		return fmt.Errorf("%w: a new sandbox must be pending, not %s", model.ErrInvalid, sb.State)
	case sb.Snapshot != nil:
		return fmt.Errorf("%w: a new sandbox has no snapshot", model.ErrInvalid)
	case sb.Timeouts.Idle < 0 || sb.Timeouts.Idle > model.MaxIdleTimeout:
		return fmt.Errorf("%w: idle timeout %s must be between 0 and %s", model.ErrInvalid, sb.Timeouts.Idle, model.MaxIdleTimeout)
	case op.Kind != model.OpCreate:
		return fmt.Errorf("%w: the operation of a new sandbox must be a create, not %q", model.ErrInvalid, op.Kind)
	case op.State != "" && op.State != model.OpPending:
		return fmt.Errorf("%w: a new operation must be pending, not %s", model.ErrInvalid, op.State)
	case op.SandboxID != sb.ID || op.ProjectID != sb.ProjectID:
		return fmt.Errorf("%w: operation %s belongs to another sandbox or project", model.ErrInvalid, op.ID)
	}
	return nil
}

// GetSandbox implements store.Store; another project's sandbox is
// store.ErrNotFound.
func (s *Store) GetSandbox(ctx context.Context, project model.ProjectID, id model.SandboxID) (model.Sandbox, error) {
	sb, err := scanSandbox(s.queryRow(ctx, `SELECT `+sandboxColumns+` FROM sandboxes s WHERE s.id = ? AND s.project_id = ?`,
		string(id), string(project)))
	if err != nil {
		return model.Sandbox{}, fmt.Errorf("get sandbox %s: %w", id, errNotFound(err))
	}
	return sb, nil
}

// GetSandboxByID implements store.Store.
func (s *Store) GetSandboxByID(ctx context.Context, id model.SandboxID) (model.Sandbox, error) {
	sb, err := scanSandbox(s.queryRow(ctx, `SELECT `+sandboxColumns+` FROM sandboxes s WHERE s.id = ?`, string(id)))
	if err != nil {
		return model.Sandbox{}, fmt.Errorf("get sandbox %s: %w", id, errNotFound(err))
	}
	return sb, nil
}

// ListSandboxes implements store.Store. A Limit outside 1..1000 gives an
// error wrapping model.ErrInvalid.
func (s *Store) ListSandboxes(ctx context.Context, q store.SandboxQuery) (store.SandboxPage, error) {
	if q.Limit < MinListLimit || q.Limit > MaxListLimit {
		return store.SandboxPage{}, fmt.Errorf("list sandboxes: %w: limit %d must be between %d and %d",
			model.ErrInvalid, q.Limit, MinListLimit, MaxListLimit)
	}
	var (
		where = []string{"s.project_id = ?"}
		args  = []any{string(q.ProjectID)}
	)
	if len(q.States) > 0 {
		where = append(where, "s.state IN ("+placeholders(len(q.States))+")")
		for _, st := range q.States {
			args = append(args, string(st))
		}
	}
	keys := make([]string, 0, len(q.Metadata))
	for k := range q.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		where = append(where, "EXISTS (SELECT 1 FROM sandbox_metadata m WHERE m.sandbox_id = s.id AND m.key = ? AND m.value = ?)")
		args = append(args, k, q.Metadata[k])
	}
	if q.After != nil {
		where = append(where, "(s.created_at > ? OR (s.created_at = ? AND s.id > ?))")
		c := micro(q.After.CreatedAt)
		args = append(args, c, c, string(q.After.ID))
	}
	args = append(args, q.Limit+1)
	rows, err := s.query(ctx, `SELECT `+sandboxColumns+` FROM sandboxes s WHERE `+strings.Join(where, " AND ")+
		` ORDER BY s.created_at, s.id LIMIT ?`, args...)
	if err != nil {
		return store.SandboxPage{}, fmt.Errorf("list sandboxes of project %s: %w", q.ProjectID, err)
	}
	defer rows.Close()
	list, err := collectSandboxes(rows)
	if err != nil {
		return store.SandboxPage{}, fmt.Errorf("list sandboxes of project %s: %w", q.ProjectID, err)
	}
	page := store.SandboxPage{Sandboxes: list}
	if len(list) > q.Limit {
		page.Sandboxes = list[:q.Limit]
		last := page.Sandboxes[q.Limit-1]
		page.Next = &store.SandboxCursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	return page, nil
}

func collectSandboxes(rows *sql.Rows) ([]model.Sandbox, error) {
	var out []model.Sandbox
	for rows.Next() {
		sb, err := scanSandbox(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, sb)
	}
	return out, rows.Err()
}

// ListSandboxesOnNode implements store.Store, in (created_at, id) order.
func (s *Store) ListSandboxesOnNode(ctx context.Context, node model.NodeID) ([]model.Sandbox, error) {
	if node == "" {
		return nil, fmt.Errorf("list sandboxes on node: %w: empty node ID", model.ErrInvalid)
	}
	rows, err := s.query(ctx, `SELECT `+sandboxColumns+` FROM sandboxes s WHERE s.node_id = ? AND s.state <> ?
		ORDER BY s.created_at, s.id`, string(node), string(model.StateDeleted))
	if err != nil {
		return nil, fmt.Errorf("list sandboxes on node %s: %w", node, err)
	}
	defer rows.Close()
	list, err := collectSandboxes(rows)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes on node %s: %w", node, err)
	}
	return list, nil
}

// oneRow returns store.ErrNotFound unless res changed exactly one row.
func oneRow(res sql.Result) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n != 1 {
		return store.ErrNotFound
	}
	return nil
}
