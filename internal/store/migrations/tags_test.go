package migrations

import (
	"context"
	"database/sql"
	"testing"
)

// Migration 004 turns every template name into name:latest (a reserved
// name into NAME-name:latest) and leaves existing templates live (no
// tombstone).
func TestTemplateTagsMigration(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+t.TempDir()+"/db.sqlite")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d := Dialect{Name: "sqlite", BytesType: "BLOB"}
	all, err := Load()
	if err != nil || len(all) < 4 || all[3].Name != "004_template_tags_gc" {
		t.Fatalf("Load = %v, %v", all, err)
	}
	if _, err := apply(ctx, db, d, all[:3], nil); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO templates (digest, size_bytes, manifest, created_at) VALUES ('sha256:00', 0, x'', 0)`,
		`INSERT INTO template_names (name, digest, updated_at) VALUES ('default', 'sha256:00', 7), ('python', 'sha256:00', 8), ('sha256', 'sha256:00', 9)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := apply(ctx, db, d, all[:4], nil); err != nil {
		t.Fatal(err)
	}
	rows, err := db.QueryContext(ctx, `SELECT name || ':' || tag || '=' || digest FROM template_tags ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	// The reserved name sha256 stays reachable under another.
	if len(got) != 3 || got[0] != "default:latest=sha256:00" || got[1] != "python:latest=sha256:00" || got[2] != "sha256-name:latest=sha256:00" {
		t.Fatalf("tags after migration: %v", got)
	}
	var deleted sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT deleted_at FROM templates`).Scan(&deleted); err != nil {
		t.Fatal(err)
	}
	if deleted.Valid {
		t.Fatalf("template after migration: deleted_at %v", deleted)
	}
}
