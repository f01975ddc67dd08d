package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// Egress policies, profiles and secrets.
//
// A sandbox's profiles are listed in sandbox_egress_profiles. Race freedom
// between a sandbox that starts naming a profile and the profile's delete
// follows the templates' scheme (gc.go): the writer that names a
// profile takes a share lock on its row (TemplateUseLock) and holds it until
// it commits; the delete locks the row exclusively (RowLock) and only then
// looks for live sandboxes naming it. SQLite's immediate transactions
// serialize all writers.

// encodeSpec is the stored form of a policy.
func encodeSpec(spec policy.Spec) (string, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return "", fmt.Errorf("encode egress policy: %w", err)
	}
	return string(b), nil
}

func decodeSpec(what, text string) (policy.Spec, error) {
	spec, err := policy.ParseSpec([]byte(text))
	if err != nil {
		return policy.Spec{}, fmt.Errorf("stored egress policy of %s: %w", what, err)
	}
	return spec, nil
}

// setSandboxProfiles records the profiles spec names for sandbox id,
// replacing what was recorded, after checking (and share-locking) that each
// exists.
func (t tx) setSandboxProfiles(ctx context.Context, id model.SandboxID, spec policy.Spec) error {
	for _, name := range spec.Profiles {
		var one int
		err := t.queryRow(ctx, `SELECT 1 FROM egress_profiles WHERE name = ? `+t.s.d.TemplateUseLock, string(name)).Scan(&one)
		if err != nil {
			if errors.Is(errNotFound(err), store.ErrNotFound) {
				return fmt.Errorf("%w: %w %q", model.ErrInvalid, policy.ErrUnknownProfile, name)
			}
			return fmt.Errorf("lock egress profile %s: %w", name, err)
		}
	}
	if _, err := t.exec(ctx, `DELETE FROM sandbox_egress_profiles WHERE sandbox_id = ?`, string(id)); err != nil {
		return fmt.Errorf("clear egress profiles: %w", err)
	}
	seen := map[policy.ProfileName]bool{}
	for _, name := range spec.Profiles {
		if seen[name] {
			continue
		}
		seen[name] = true
		if _, err := t.exec(ctx, `INSERT INTO sandbox_egress_profiles (sandbox_id, profile) VALUES (?, ?)`,
			string(id), string(name)); err != nil {
			return fmt.Errorf("record egress profile %s: %w", name, err)
		}
	}
	return nil
}

// GetSandboxEgress implements store.Store.
func (s *Store) GetSandboxEgress(ctx context.Context, project model.ProjectID, id model.SandboxID) (policy.Spec, error) {
	var text string
	if err := s.queryRow(ctx, `SELECT egress FROM sandboxes WHERE id = ? AND project_id = ?`,
		string(id), string(project)).Scan(&text); err != nil {
		return policy.Spec{}, fmt.Errorf("get egress of sandbox %s: %w", id, errNotFound(err))
	}
	return decodeSpec("sandbox "+string(id), text)
}

// GetSandboxEgressByID implements store.Store.
func (s *Store) GetSandboxEgressByID(ctx context.Context, id model.SandboxID) (policy.Spec, error) {
	var text string
	if err := s.queryRow(ctx, `SELECT egress FROM sandboxes WHERE id = ?`, string(id)).Scan(&text); err != nil {
		return policy.Spec{}, fmt.Errorf("get egress of sandbox %s: %w", id, errNotFound(err))
	}
	return decodeSpec("sandbox "+string(id), text)
}

// SetSandboxEgress implements store.Store.
func (s *Store) SetSandboxEgress(ctx context.Context, project model.ProjectID, id model.SandboxID, spec policy.Spec, now time.Time) error {
	if err := spec.Check(); err != nil {
		return fmt.Errorf("set egress of sandbox %s: %w", id, err)
	}
	text, err := encodeSpec(spec)
	if err != nil {
		return err
	}
	err = s.write(ctx, true, func(t tx) error {
		state, err := t.lockSandboxState(ctx, id, project)
		if err != nil {
			return err
		}
		if state == model.StateDeleted {
			return fmt.Errorf("%w: sandbox %s is deleted", model.ErrInvalidTransition, id)
		}
		if err := t.setSandboxProfiles(ctx, id, spec); err != nil {
			return err
		}
		_, err = t.exec(ctx, `UPDATE sandboxes SET egress = ?, updated_at = ? WHERE id = ?`, text, micro(now), string(id))
		return err
	})
	if err != nil {
		return fmt.Errorf("set egress of sandbox %s: %w", id, err)
	}
	return nil
}

// PutEgressProfile implements store.Store.
func (s *Store) PutEgressProfile(ctx context.Context, p store.EgressProfile) (bool, error) {
	if _, err := policy.ParseProfileName(string(p.Name)); err != nil {
		return false, fmt.Errorf("put egress profile: %w", err)
	}
	if err := p.Spec.CheckProfile(); err != nil {
		return false, fmt.Errorf("put egress profile %s: %w", p.Name, err)
	}
	text, err := encodeSpec(p.Spec)
	if err != nil {
		return false, err
	}
	created := false
	err = s.write(ctx, false, func(t tx) error {
		res, err := t.exec(ctx, `UPDATE egress_profiles SET spec = ?, updated_at = ? WHERE name = ?`,
			text, micro(p.UpdatedAt), string(p.Name))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n > 0 {
			return err
		}
		created = true
		_, err = t.exec(ctx, `INSERT INTO egress_profiles (name, spec, created_at, updated_at) VALUES (?, ?, ?, ?)`,
			string(p.Name), text, micro(p.CreatedAt), micro(p.UpdatedAt))
		return s.insertErr(err)
	})
	if err != nil {
		return false, fmt.Errorf("put egress profile %s: %w", p.Name, err)
	}
	return created, nil
}

func scanProfile(row interface{ Scan(...any) error }) (store.EgressProfile, error) {
	var (
		name, text       string
		created, updated int64
	)
	if err := row.Scan(&name, &text, &created, &updated); err != nil {
		return store.EgressProfile{}, err
	}
	n, err := policy.ParseProfileName(name)
	if err != nil {
		return store.EgressProfile{}, fmt.Errorf("stored egress profile %q: %w", name, err)
	}
	spec, err := decodeSpec("profile "+name, text)
	if err != nil {
		return store.EgressProfile{}, err
	}
	return store.EgressProfile{Name: n, Spec: spec, CreatedAt: fromMicro(created), UpdatedAt: fromMicro(updated)}, nil
}

// GetEgressProfile implements store.Store.
func (s *Store) GetEgressProfile(ctx context.Context, name policy.ProfileName) (store.EgressProfile, error) {
	p, err := scanProfile(s.queryRow(ctx, `SELECT name, spec, created_at, updated_at FROM egress_profiles WHERE name = ?`, string(name)))
	if err != nil {
		return store.EgressProfile{}, fmt.Errorf("get egress profile %s: %w", name, errNotFound(err))
	}
	return p, nil
}

// ListEgressProfiles implements store.Store.
func (s *Store) ListEgressProfiles(ctx context.Context) ([]store.EgressProfile, error) {
	rows, err := s.query(ctx, `SELECT name, spec, created_at, updated_at FROM egress_profiles ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list egress profiles: %w", err)
	}
	defer rows.Close()
	out := []store.EgressProfile{}
	for rows.Next() {
		p, err := scanProfile(rows)
		if err != nil {
			return nil, fmt.Errorf("list egress profiles: %w", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list egress profiles: %w", err)
	}
	return out, nil
}

// DeleteEgressProfile implements store.Store.
func (s *Store) DeleteEgressProfile(ctx context.Context, name policy.ProfileName) error {
	err := s.write(ctx, false, func(t tx) error {
		var one int
		if err := t.queryRow(ctx, `SELECT 1 FROM egress_profiles WHERE name = ? `+t.s.d.RowLock, string(name)).Scan(&one); err != nil {
			return errNotFound(err)
		}
		var n int
		if err := t.queryRow(ctx, `SELECT COUNT(*) FROM sandbox_egress_profiles p JOIN sandboxes s ON s.id = p.sandbox_id
			WHERE p.profile = ? AND s.`+liveSandboxes, string(name)).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("%w: %d sandboxes that are not deleted name it", store.ErrInUse, n)
		}
		if _, err := t.exec(ctx, `DELETE FROM sandbox_egress_profiles WHERE profile = ?`, string(name)); err != nil {
			return err
		}
		_, err := t.exec(ctx, `DELETE FROM egress_profiles WHERE name = ?`, string(name))
		return err
	})
	if err != nil {
		return fmt.Errorf("delete egress profile %s: %w", name, err)
	}
	return nil
}

// PutSecret implements store.Store.
func (s *Store) PutSecret(ctx context.Context, rec model.SealedSecret) (bool, error) {
	return s.putSecret(ctx, rec, false)
}

// CreateSecret implements store.Store.
func (s *Store) CreateSecret(ctx context.Context, rec model.SealedSecret) error {
	_, err := s.putSecret(ctx, rec, true)
	return err
}

func (s *Store) putSecret(ctx context.Context, rec model.SealedSecret, createOnly bool) (bool, error) {
	if rec.Name == "" || len(rec.Sealed) == 0 {
		return false, fmt.Errorf("put secret: %w: a secret needs a name and a sealed value", model.ErrInvalid)
	}
	hosts, err := json.Marshal(slices.Clip(rec.Hosts))
	if err != nil {
		return false, fmt.Errorf("put secret %s: %w", rec.Name, err)
	}
	if rec.Hosts == nil {
		hosts = []byte("[]")
	}
	md := []byte("{}")
	if len(rec.Metadata) > 0 {
		if md, err = json.Marshal(rec.Metadata); err != nil {
			return false, fmt.Errorf("put secret %s: %w", rec.Name, err)
		}
	}
	created := false
	err = s.write(ctx, false, func(t tx) error {
		if !createOnly {
			res, err := t.exec(ctx, `UPDATE secrets SET sealed = ?, hosts = ?, header = ?, format = ?, metadata = ?, version = version + 1, updated_at = ?
			WHERE project_id = ? AND name = ?`,
				rec.Sealed, string(hosts), rec.Header, rec.Format, string(md), micro(rec.UpdatedAt), string(rec.ProjectID), rec.Name)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n > 0 {
				return err
			}
		}
		created = true
		_, err := t.exec(ctx, `INSERT INTO secrets (project_id, name, sealed, hosts, header, format, metadata, version, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?)`,
			string(rec.ProjectID), rec.Name, rec.Sealed, string(hosts), rec.Header, rec.Format, string(md), micro(rec.CreatedAt), micro(rec.UpdatedAt))
		return s.insertErr(err)
	})
	if err != nil {
		return false, fmt.Errorf("put secret %s: %w", rec.Name, err)
	}
	return created, nil
}

const secretColumns = `project_id, name, sealed, hosts, header, format, metadata, version, created_at, updated_at`

func scanSecret(row interface{ Scan(...any) error }) (model.SealedSecret, error) {
	var (
		rec                model.SealedSecret
		project, hosts, md string
		created, updated   int64
	)
	if err := row.Scan(&project, &rec.Name, &rec.Sealed, &hosts, &rec.Header, &rec.Format, &md, &rec.Version, &created, &updated); err != nil {
		return model.SealedSecret{}, err
	}
	if err := json.Unmarshal([]byte(hosts), &rec.Hosts); err != nil {
		return model.SealedSecret{}, fmt.Errorf("stored secret %s: hosts: %w", rec.Name, err)
	}
	if err := json.Unmarshal([]byte(md), &rec.Metadata); err != nil {
		return model.SealedSecret{}, fmt.Errorf("stored secret %s: metadata: %w", rec.Name, err)
	}
	if len(rec.Metadata) == 0 {
		rec.Metadata = nil
	}
	c := columns{row: "secret " + rec.Name}
	rec.ProjectID = c.projectID("project_id", project)
	if c.err != nil {
		return model.SealedSecret{}, c.err
	}
	rec.CreatedAt, rec.UpdatedAt = fromMicro(created), fromMicro(updated)
	return rec, nil
}

// GetSecret implements store.Store.
func (s *Store) GetSecret(ctx context.Context, project model.ProjectID, name string) (model.SealedSecret, error) {
	rec, err := scanSecret(s.queryRow(ctx, `SELECT `+secretColumns+` FROM secrets WHERE project_id = ? AND name = ?`,
		string(project), name))
	if err != nil {
		return model.SealedSecret{}, fmt.Errorf("get secret %s: %w", name, errNotFound(err))
	}
	return rec, nil
}

// ListSecrets implements store.Store.
func (s *Store) ListSecrets(ctx context.Context, project model.ProjectID) ([]model.SealedSecret, error) {
	rows, err := s.query(ctx, `SELECT `+secretColumns+` FROM secrets WHERE project_id = ? ORDER BY name`, string(project))
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	defer rows.Close()
	out := []model.SealedSecret{}
	for rows.Next() {
		rec, err := scanSecret(rows)
		if err != nil {
			return nil, fmt.Errorf("list secrets: %w", err)
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	return out, nil
}

// DeleteSecret implements store.Store.
func (s *Store) DeleteSecret(ctx context.Context, project model.ProjectID, name string) error {
	res, err := s.db.ExecContext(ctx, s.q(`DELETE FROM secrets WHERE project_id = ? AND name = ?`), string(project), name)
	if err != nil {
		return fmt.Errorf("delete secret %s: %w", name, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("delete secret %s: %w", name, err)
	} else if n == 0 {
		return fmt.Errorf("delete secret %s: %w", name, store.ErrNotFound)
	}
	return nil
}
