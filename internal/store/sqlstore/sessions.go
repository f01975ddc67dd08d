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
	Args      []string          `json:"args"`
	Env       map[string]string `json:"env,omitempty"`
	Cwd       string            `json:"cwd,omitempty"`
	Stdin     bool              `json:"stdin,omitempty"`
	PTY       *[2]int           `json:"pty,omitempty"`  // rows, cols
	User      *[2]int64         `json:"user,omitempty"` // uid, gid
	TimeoutMS int64             `json:"timeout_ms,omitempty"`
}

func toStoredSpec(p model.ProcessSpec) storedSpec {
	s := storedSpec{Args: p.Args, Env: p.Env, Cwd: string(p.Cwd), Stdin: p.Stdin, TimeoutMS: p.Timeout.Milliseconds()}
	if p.PTY != nil {
		s.PTY = &[2]int{int(p.PTY.Rows), int(p.PTY.Cols)}
	}
	if p.User != nil {
		s.User = &[2]int64{int64(p.User.UID), int64(p.User.GID)}
	}
	return s
}

// parse turns a stored spec back into domain types.
func (s storedSpec) parse(id string) (model.ProcessSpec, error) {
	p := model.ProcessSpec{Args: s.Args, Stdin: s.Stdin, Timeout: time.Duration(s.TimeoutMS) * time.Millisecond}
	if s.Env != nil {
		env, err := model.ParseEnv(s.Env)
		if err != nil {
			return p, fmt.Errorf("stored command session %s: spec.env: %w", id, err)
		}
		p.Env = env
	}
	if s.PTY != nil {
		ts, err := model.ParseTermSize(s.PTY[0], s.PTY[1])
		if err != nil {
			return p, fmt.Errorf("stored command session %s: spec.pty: %w", id, err)
		}
		p.PTY = &ts
	}
	if s.User != nil {
		u, err := model.ParseUserIDs(s.User[0], s.User[1])
		if err != nil {
			return p, fmt.Errorf("stored command session %s: spec.user: %w", id, err)
		}
		p.User = &u
	}
	if s.TimeoutMS < 0 || p.Timeout > model.MaxProcessTimeout {
		return p, fmt.Errorf("stored command session %s: spec.timeout_ms %d out of range", id, s.TimeoutMS)
	}
	return p, nil
}

const sessionColumns = `id, project_id, sandbox_id, process_id, spec, token_hash, created_at, expires_at, attached_at`

// joinedSessionColumns are sessionColumns of the table aliased c.
const joinedSessionColumns = `c.id, c.project_id, c.sandbox_id, c.process_id, c.spec, c.token_hash, c.created_at, c.expires_at, c.attached_at`

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
	ps, err := spec.parse(id)
	if err != nil {
		return model.CommandSession{}, err
	}
	ps.Cwd = cwd
	cs.Spec = ps
	cs.CreatedAt = fromMicro(created)
	cs.ExpiresAt = fromMicro(expires)
	cs.AttachedAt = fromMicroPtr(attached)
	return cs, nil
}

// CreateCommandSession implements store.Store. A duplicate ID or process ID
// gives store.ErrAlreadyExists, an unknown sandbox store.ErrNotFound, a used
// idempotency key *store.IdempotencyConflictError.
func (s *Store) CreateCommandSession(ctx context.Context, cs model.CommandSession, idem *store.IdempotencyRecord) error {
	spec, err := json.Marshal(toStoredSpec(cs.Spec))
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

// GetAttachTarget implements store.Store.
func (s *Store) GetAttachTarget(ctx context.Context, id model.ProcessID) (model.CommandSession, model.SandboxState, error) {
	var state string
	row := s.queryRow(ctx, `SELECT `+joinedSessionColumns+`, s.state FROM command_sessions c
		JOIN sandboxes s ON s.id = c.sandbox_id WHERE c.process_id = ?`, string(id))
	cs, err := scanSession(scanWithExtra{row, []any{&state}})
	if err != nil {
		return model.CommandSession{}, "", fmt.Errorf("get attach target of process %s: %w", id, errNotFound(err))
	}
	st, err := model.ParseSandboxState(state)
	if err != nil {
		return model.CommandSession{}, "", fmt.Errorf("stored sandbox %s: %w", cs.SandboxID, err)
	}
	return cs, st, nil
}

// scanWithExtra scans a row's leading columns into what Scan is given and
// its trailing ones into extra.
type scanWithExtra struct {
	row   interface{ Scan(...any) error }
	extra []any
}

func (r scanWithExtra) Scan(dest ...any) error { return r.row.Scan(append(dest, r.extra...)...) }

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
