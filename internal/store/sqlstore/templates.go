package sqlstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/airlockdev/airlock/internal/model"
)

// Every read here skips tombstoned templates (deleted_at set); see
// gc.go for deletion and collection.

// PutTemplate implements store.Store. It inserts the digest's row; if the
// digest exists it does nothing, unless the row is tombstoned: then the
// tombstone is cleared and created_at set, as for a fresh import. t.Names
// is ignored: tags are set with SetTemplateName.
func (s *Store) PutTemplate(ctx context.Context, t model.Template) error {
	if err := s.write(ctx, false, func(tx tx) error { return tx.putTemplate(ctx, t) }); err != nil {
		return fmt.Errorf("put template %s: %w", t.Digest, err)
	}
	return nil
}

// putTemplate inserts the digest's row, or brings back a tombstoned one,
// inside a transaction (PutTemplate, a build's finish).
func (t tx) putTemplate(ctx context.Context, tpl model.Template) error {
	if _, err := model.ParseTemplateDigest(string(tpl.Digest)); err != nil {
		return err
	}
	_, err := t.exec(ctx, `INSERT INTO templates (digest, size_bytes, manifest, created_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (digest) DO UPDATE SET deleted_at = NULL, created_at = excluded.created_at
		WHERE templates.deleted_at IS NOT NULL`,
		string(tpl.Digest), tpl.SizeBytes, nonNil(tpl.Manifest), micro(tpl.CreatedAt))
	return err
}

// SetTemplateName implements store.Store: it points the tag at digest,
// creating or moving it. An unknown or tombstoned digest gives
// store.ErrNotFound. The share lock on the template row keeps a concurrent
// delete or collection from tombstoning it before the tag is in.
func (s *Store) SetTemplateName(ctx context.Context, name model.TaggedName, digest model.TemplateDigest, now time.Time) error {
	err := s.write(ctx, false, func(t tx) error {
		return t.setTemplateTag(ctx, name, digest, now)
	})
	if err != nil {
		return fmt.Errorf("set template tag %s to %s: %w", name, digest, err)
	}
	return nil
}

// setTemplateTag points a tag at a live digest inside a transaction, for
// every writer of tags (SetTemplateName, a build's finish).
func (t tx) setTemplateTag(ctx context.Context, name model.TaggedName, digest model.TemplateDigest, now time.Time) error {
	if err := t.lockLiveTemplate(ctx, digest); err != nil {
		return err
	}
	_, err := t.exec(ctx, `INSERT INTO template_tags (name, tag, digest, updated_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (name, tag) DO UPDATE SET digest = excluded.digest, updated_at = excluded.updated_at`,
		string(name.Name), string(name.Tag), string(digest), micro(now))
	return t.s.insertErr(err)
}

// lockLiveTemplate takes the share lock on a live template's row until the
// transaction ends, or answers store.ErrNotFound.
func (t tx) lockLiveTemplate(ctx context.Context, digest model.TemplateDigest) error {
	var one int
	err := t.queryRow(ctx, `SELECT 1 FROM templates WHERE digest = ? AND deleted_at IS NULL `+t.s.d.TemplateUseLock,
		string(digest)).Scan(&one)
	if err != nil {
		return fmt.Errorf("template %s: %w", digest, errNotFound(err))
	}
	return nil
}

const templateColumns = `digest, size_bytes, manifest, created_at`

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

// templateTags returns the sorted tags of each digest; digest "" means all.
func (s *Store) templateTags(ctx context.Context, digest model.TemplateDigest) (map[model.TemplateDigest][]model.TaggedName, error) {
	query, args := `SELECT digest, name, tag FROM template_tags`, []any(nil)
	if digest != "" {
		query, args = `SELECT digest, name, tag FROM template_tags WHERE digest = ?`, []any{string(digest)}
	}
	rows, err := s.query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[model.TemplateDigest][]model.TaggedName{}
	for rows.Next() {
		var d, n, tag string
		if err := rows.Scan(&d, &n, &tag); err != nil {
			return nil, err
		}
		c := columns{row: "template tag " + n + ":" + tag}
		digest, name, tg := c.digest("digest", d), c.templateName("name", n), c.templateTag("tag", tag)
		if c.err != nil {
			return nil, c.err
		}
		out[digest] = append(out[digest], model.TaggedName{Name: name, Tag: tg})
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, names := range out {
		// The database's collation may differ from byte order; sort here so
		// the order is the same on every dialect.
		slices.SortFunc(names, model.TaggedName.Compare)
	}
	return out, nil
}

// GetTemplate implements store.Store; a tombstoned template is
// store.ErrNotFound.
func (s *Store) GetTemplate(ctx context.Context, digest model.TemplateDigest) (model.Template, error) {
	t, err := scanTemplate(s.queryRow(ctx, `SELECT `+templateColumns+` FROM templates WHERE digest = ? AND deleted_at IS NULL`, string(digest)))
	if err != nil {
		return model.Template{}, fmt.Errorf("get template %s: %w", digest, errNotFound(err))
	}
	tags, err := s.templateTags(ctx, digest)
	if err != nil {
		return model.Template{}, fmt.Errorf("get template %s tags: %w", digest, err)
	}
	t.Names = tags[digest]
	return t, nil
}

// ResolveTemplate implements store.Store: by digest it is GetTemplate, by
// name it follows template_tags. The zero reference is invalid.
func (s *Store) ResolveTemplate(ctx context.Context, ref model.TemplateRef) (model.Template, error) {
	if d, ok := ref.Digest(); ok {
		return s.GetTemplate(ctx, d)
	}
	name, ok := ref.Name()
	if !ok {
		return model.Template{}, fmt.Errorf("resolve template: %w: empty template reference", model.ErrInvalid)
	}
	var digest string
	if err := s.queryRow(ctx, `SELECT digest FROM template_tags WHERE name = ? AND tag = ?`,
		string(name.Name), string(name.Tag)).Scan(&digest); err != nil {
		return model.Template{}, fmt.Errorf("resolve template %s: %w", name, errNotFound(err))
	}
	c := columns{row: "template tag " + name.String()}
	d := c.digest("digest", digest)
	if c.err != nil {
		return model.Template{}, fmt.Errorf("resolve template %s: %w", name, c.err)
	}
	return s.GetTemplate(ctx, d)
}

// ListTemplates implements store.Store: the live templates in (created_at,
// digest) order.
func (s *Store) ListTemplates(ctx context.Context) ([]model.Template, error) {
	rows, err := s.query(ctx, `SELECT `+templateColumns+` FROM templates WHERE deleted_at IS NULL ORDER BY created_at, digest`)
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
	tags, err := s.templateTags(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("list template tags: %w", err)
	}
	for i := range out {
		out[i].Names = tags[out[i].Digest]
	}
	return out, nil
}
