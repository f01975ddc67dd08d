package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// storedSpec is the JSON form of a model.ProcessSpec in command_sessions.spec.
type storedSpec struct {
	Args []string          `json:"args"`
	Env  map[string]string `json:"env,omitempty"`
	Cwd  string            `json:"cwd,omitempty"`
}

const sessionColumns = `id, project_id, sandbox_id, process_id, spec, token_hash, created_at, expires_at, attached_at`

func scanSession(row interface{ Scan(...any) error }) (model.CommandSession, error) {
	var (
		cs                                   model.CommandSession
		id, project, sandbox, process, specJ string
		created, expires                     int64
		attached                             sql.NullInt64
	)
	if err := row.Scan(&id, &project, &sandbox, &process, &specJ, &cs.TokenHash, &created, &expires, &attached); err != nil {
		return model.CommandSession{}, err
	}
	var spec storedSpec
	if err := json.Unmarshal([]byte(specJ), &spec); err != nil {
		return model.CommandSession{}, fmt.Errorf("stored command session %s: spec: %w", id, err)
	}
	c := columns{row: "command session " + id}
	cs.ID = c.sessionID("id", id)
	cs.ProjectID = c.projectID("project_id", project)
	cs.SandboxID = c.sandboxID("sandbox_id", sandbox)
	cs.ProcessID = c.processID("process_id", process)
	cwd := c.guestPath("spec.cwd", spec.Cwd)
	if c.err != nil {
		return model.CommandSession{}, c.err
	}
	var env model.Env
	if spec.Env != nil {
		var err error
		if env, err = model.ParseEnv(spec.Env); err != nil {
			return model.CommandSession{}, fmt.Errorf("stored command session %s: spec.env: %w", id, err)
		}
	}
	cs.Spec = model.ProcessSpec{Args: spec.Args, Env: env, Cwd: cwd}
	cs.CreatedAt = fromMicro(created)
	cs.ExpiresAt = fromMicro(expires)
	cs.AttachedAt = fromMicroPtr(attached)
	return cs, nil
}

// CreateCommandSession implements store.Store. A duplicate ID or process ID
// gives store.ErrAlreadyExists, an unknown sandbox store.ErrNotFound, a used
// idempotency key *store.IdempotencyConflictError.
func (s *Store) CreateCommandSession(ctx context.Context, cs model.CommandSession, idem *store.IdempotencyRecord) error {
	spec, err := json.Marshal(storedSpec{Args: cs.Spec.Args, Env: cs.Spec.Env, Cwd: string(cs.Spec.Cwd)})
	if err != nil {
		return fmt.Errorf("create command session %s: spec: %w", cs.ID, err)
	}
	err = s.write(ctx, false, func(t tx) error {
		if err := t.insertIdempotency(ctx, idem); err != nil {
			return err
		}
		_, err := t.exec(ctx, `INSERT INTO command_sessions (`+sessionColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			string(cs.ID), string(cs.ProjectID), string(cs.SandboxID), string(cs.ProcessID), string(spec),
			nonNil(cs.TokenHash), micro(cs.CreatedAt), micro(cs.ExpiresAt), microPtr(cs.AttachedAt))
		if err != nil {
			return s.insertErr(err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("create command session %s: %w", cs.ID, err)
	}
	return nil
}

// GetCommandSessionByProcess implements store.Store.
func (s *Store) GetCommandSessionByProcess(ctx context.Context, id model.ProcessID) (model.CommandSession, error) {
	cs, err := scanSession(s.queryRow(ctx, `SELECT `+sessionColumns+` FROM command_sessions WHERE process_id = ?`, string(id)))
	if err != nil {
		return model.CommandSession{}, fmt.Errorf("get command session of process %s: %w", id, errNotFound(err))
	}
	return cs, nil
}

// MarkCommandSessionAttached implements store.Store: a compare-and-swap on
// attached_at IS NULL, so exactly one caller sees first == true.
func (s *Store) MarkCommandSessionAttached(ctx context.Context, id model.CommandSessionID, at time.Time) (bool, error) {
	res, err := s.exec(ctx, `UPDATE command_sessions SET attached_at = ? WHERE id = ? AND attached_at IS NULL`, micro(at), string(id))
	if err != nil {
		return false, fmt.Errorf("mark command session %s attached: %w", id, err)
	}
	if err := oneRow(res); err == nil {
		return true, nil
	}
	var n int
	if err := s.queryRow(ctx, `SELECT COUNT(*) FROM command_sessions WHERE id = ?`, string(id)).Scan(&n); err != nil {
		return false, fmt.Errorf("mark command session %s attached: %w", id, err)
	}
	if n == 0 {
		return false, fmt.Errorf("mark command session %s attached: %w", id, store.ErrNotFound)
	}
	return false, nil
}
