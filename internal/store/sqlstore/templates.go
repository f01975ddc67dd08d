package sqlstore

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/airlockdev/airlock/internal/model"
)

// PutTemplate implements store.Store. It inserts the digest's row and does
// nothing if the digest exists. t.Names is ignored: names are set with
// SetTemplateName.
func (s *Store) PutTemplate(ctx context.Context, t model.Template) error {
	if _, err := model.ParseTemplateDigest(string(t.Digest)); err != nil {
		return fmt.Errorf("put template: %w", err)
	}
	_, err := s.exec(ctx, `INSERT INTO templates (digest, size_bytes, manifest, created_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (digest) DO NOTHING`,
		string(t.Digest), t.SizeBytes, nonNil(t.Manifest), micro(t.CreatedAt))
	if err != nil {
		return fmt.Errorf("put template %s: %w", t.Digest, err)
	}
	return nil
}

// SetTemplateName implements store.Store: it points name at digest, creating
// or moving the name. An unknown digest gives store.ErrNotFound.
func (s *Store) SetTemplateName(ctx context.Context, name model.TemplateName, digest model.TemplateDigest, now time.Time) error {
	_, err := s.exec(ctx, `INSERT INTO template_names (name, digest, updated_at) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET digest = excluded.digest, updated_at = excluded.updated_at`,
		string(name), string(digest), micro(now))
	if err != nil {
		return fmt.Errorf("set template name %s to %s: %w", name, digest, s.insertErr(err))
	}
	return nil
}

func scanTemplate(row interface{ Scan(...any) error }) (model.Template, error) {
	var (
		t       model.Template
		digest  string
		created int64
	)
	if err := row.Scan(&digest, &t.SizeBytes, &t.Manifest, &created); err != nil {
		return model.Template{}, err
	}
	c := columns{row: "template " + digest}
	t.Digest = c.digest("digest", digest)
	if c.err != nil {
		return model.Template{}, c.err
	}
	t.CreatedAt = fromMicro(created)
	return t, nil
}

// templateNames returns the sorted names of each digest; digest "" means all.
func (s *Store) templateNames(ctx context.Context, digest model.TemplateDigest) (map[model.TemplateDigest][]model.TemplateName, error) {
	query, args := `SELECT digest, name FROM template_names ORDER BY digest, name`, []any(nil)
	if digest != "" {
		query, args = `SELECT digest, name FROM template_names WHERE digest = ? ORDER BY digest, name`, []any{string(digest)}
	}
	rows, err := s.query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[model.TemplateDigest][]model.TemplateName{}
	for rows.Next() {
		var d, n string
		if err := rows.Scan(&d, &n); err != nil {
			return nil, err
		}
		c := columns{row: "template name " + n}
		digest, name := c.digest("digest", d), c.templateName("name", n)
		if c.err != nil {
			return nil, c.err
		}
		out[digest] = append(out[digest], name)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, names := range out {
		// The database's collation may differ from byte order; names are ASCII
		// but sort here so the order is the same on every dialect.
		sort.Slice(names, func(i, j int) bool { return names[i] < names[j] })
	}
	return out, nil
}

// GetTemplate implements store.Store.
func (s *Store) GetTemplate(ctx context.Context, digest model.TemplateDigest) (model.Template, error) {
	t, err := scanTemplate(s.queryRow(ctx, `SELECT digest, size_bytes, manifest, created_at FROM templates WHERE digest = ?`, string(digest)))
	if err != nil {
		return model.Template{}, fmt.Errorf("get template %s: %w", digest, errNotFound(err))
	}
	names, err := s.templateNames(ctx, digest)
	if err != nil {
		return model.Template{}, fmt.Errorf("get template %s names: %w", digest, err)
	}
	t.Names = names[digest]
	return t, nil
}

// ResolveTemplate implements store.Store: by digest it is GetTemplate, by
// name it follows template_names. The zero reference is invalid.
func (s *Store) ResolveTemplate(ctx context.Context, ref model.TemplateRef) (model.Template, error) {
	if d, ok := ref.Digest(); ok {
		return s.GetTemplate(ctx, d)
	}
	name, ok := ref.Name()
	if !ok {
		return model.Template{}, fmt.Errorf("resolve template: %w: empty template reference", model.ErrInvalid)
	}
	var digest string
	if err := s.queryRow(ctx, `SELECT digest FROM template_names WHERE name = ?`, string(name)).Scan(&digest); err != nil {
		return model.Template{}, fmt.Errorf("resolve template %s: %w", name, errNotFound(err))
	}
	c := columns{row: "template name " + string(name)}
	d := c.digest("digest", digest)
	if c.err != nil {
		return model.Template{}, fmt.Errorf("resolve template %s: %w", name, c.err)
	}
	return s.GetTemplate(ctx, d)
}

// ListTemplates implements store.Store, in (created_at, digest) order.
func (s *Store) ListTemplates(ctx context.Context) ([]model.Template, error) {
	rows, err := s.query(ctx, `SELECT digest, size_bytes, manifest, created_at FROM templates ORDER BY created_at, digest`)
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	defer rows.Close()
	var out []model.Template
	for rows.Next() {
		t, err := scanTemplate(rows)
		if err != nil {
			return nil, fmt.Errorf("list templates: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	rows.Close()
	names, err := s.templateNames(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("list template names: %w", err)
	}
	for i := range out {
		out[i].Names = names[out[i].Digest]
	}
	return out, nil
}
