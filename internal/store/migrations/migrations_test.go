package migrations

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	_ "modernc.org/sqlite"

	"github.com/airlockdev/airlock/internal/model"
)

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		file string
		want int
		ok   bool
	}{
		{"001_init.sql", 1, true},
		{"dir/042_add_nodes.sql", 42, true},
		{"1_x.sql", 1, true},
		{"000_zero.sql", 0, false},
		{"001_init.SQL", 0, false},
		{"001init.sql", 0, false},
		{"_init.sql", 0, false},
		{"001_.sql", 0, false},
		{"0x1_init.sql", 0, false},
		{"001_Init.sql", 0, false},
		{"001_in-it.sql", 0, false},
		{"1234567890_big.sql", 0, false},
		{"001_init.sql.bak", 0, false},
	} {
		got, err := ParseVersion(tc.file)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("ParseVersion(%q) = %d, %v; want %d, ok=%v", tc.file, got, err, tc.want, tc.ok)
		}
	}
}

func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"001_init.sql", "9_x.sql", "", "_.sql", "001_a b.sql", "\x00_a.sql"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseVersion(s)
		if err != nil {
			return
		}
		if v < 1 || !strings.HasSuffix(s, ".sql") {
			t.Fatalf("ParseVersion(%q) = %d accepted", s, v)
		}
	})
}

func TestLoadEmbedded(t *testing.T) {
	all, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) == 0 || all[0].Version != 1 || all[0].Name != "001_init" {
		t.Fatalf("Load = %+v", all)
	}
	for _, m := range all {
		for _, d := range []Dialect{{Name: "sqlite", BytesType: "BLOB"}, {Name: "postgres", BytesType: "BYTEA"}} {
			out, err := d.Render(m)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(out, "{{") {
				t.Fatalf("%s for %s still has a placeholder", m.Name, d.Name)
			}
		}
	}
}

func TestLoadRejectsBadSets(t *testing.T) {
	for name, fsys := range map[string]fstest.MapFS{
		"gap":       {"001_a.sql": {}, "003_c.sql": {}},
		"duplicate": {"001_a.sql": {}, "001_b.sql": {}},
		"no one":    {"002_b.sql": {}},
		"bad name":  {"001_a.sql": {}, "two_b.sql": {}},
	} {
		if _, err := load(fsys); err == nil {
			t.Errorf("%s: load accepted %v", name, fsys)
		}
	}
}

func TestRenderRejectsUnknownPlaceholder(t *testing.T) {
	_, err := Dialect{Name: "x", BytesType: "BLOB"}.Render(Migration{Name: "001_a", SQL: "CREATE TABLE t (v {{JSON}})"})
	if err == nil {
		t.Fatal("unknown placeholder accepted")
	}
	if _, err := (Dialect{Name: "x"}).Render(Migration{Name: "001_a", SQL: "SELECT 1"}); err == nil {
		t.Fatal("dialect without BytesType accepted")
	}
}

// TestApplyIsIncrementalAndAtomic runs the runner against SQLite with a
// synthetic set: a failing migration leaves no trace and stops the run, and
// a rerun applies only what is pending.
func TestApplyIsIncrementalAndAtomic(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+t.TempDir()+"/m.db?_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d := Dialect{Name: "sqlite", BytesType: "BLOB"}
	first := []Migration{{1, "001_a", "CREATE TABLE a (v {{BYTES}});"}}
	got, err := apply(ctx, db, d, first, nil)
	if err != nil || len(got) != 1 {
		t.Fatalf("first apply = %v, %v", got, err)
	}
	broken := append(first,
		Migration{2, "002_b", "CREATE TABLE b (v INTEGER); INSERT INTO a VALUES (x'00');"},
		Migration{3, "003_c", "CREATE TABLE c (v INTEGER); THIS IS NOT SQL;"},
		Migration{4, "004_d", "CREATE TABLE d (v INTEGER);"},
	)
	got, err = apply(ctx, db, d, broken, nil)
	if err == nil || len(got) != 1 || got[0] != 2 {
		t.Fatalf("broken apply = %v, %v; want [2] and an error", got, err)
	}
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE name IN ('c', 'd')`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("failed migration left tables behind (%d, %v)", n, err)
	}
	if err := db.QueryRow(`SELECT MAX(version) FROM schema_migrations`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("schema version = %d, %v; want 2", n, err)
	}
	got, err = apply(ctx, db, d, first, nil)
	if !errors.Is(err, ErrTooNew) {
		t.Fatalf("older binary: %v, %v; want ErrTooNew", got, err)
	}
	fixed := broken[:2]
	got, err = apply(ctx, db, d, fixed, nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("rerun = %v, %v; want nothing applied", got, err)
	}
}

// TestDiskMiBOfExistingSandboxes: migration 2 gives the sandboxes stored
// before it the default writable layer (10240 MiB) and their projects no
// quota.
func TestDiskMiBOfExistingSandboxes(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+t.TempDir()+"/m.db?_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d := Dialect{Name: "sqlite", BytesType: "BLOB"}
	all, err := Load()
	if err != nil || len(all) < 2 || all[1].Name != "002_disk_and_quotas" {
		t.Fatalf("Load = %v, %v", all, err)
	}
	if _, err := apply(ctx, db, d, all[:1], nil); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO projects (id, name, created_at) VALUES ('prj_1', 'p', 0)`,
		`INSERT INTO templates (digest, size_bytes, manifest, created_at) VALUES ('sha256:00', 0, x'', 0)`,
		`INSERT INTO sandboxes (id, project_id, template_digest, cpus, memory_mib, env, metadata, state, state_reason,
			node_id, runtime, created_at, updated_at) VALUES ('sbx_1', 'prj_1', 'sha256:00', 1, 512, '{}', '{}', 'running', '', '', '', 0, 0)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := apply(ctx, db, d, all[:2], nil); err != nil {
		t.Fatal(err)
	}
	var disk int
	var quota sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT s.disk_mib, p.quota_sandboxes FROM sandboxes s, projects p`).Scan(&disk, &quota); err != nil {
		t.Fatal(err)
	}
	if disk != 10240 || quota.Valid {
		t.Fatalf("existing sandbox: disk_mib %d, quota %v; want 10240 and none", disk, quota)
	}
}

// TestPublicPortsOfExistingSandboxes: 016 gives public ports to the
// sandboxes the E2B API made before (the ones carrying its template-id
// metadata key, the rule until then), and to no other.
func TestPublicPortsOfExistingSandboxes(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+t.TempDir()+"/m.db?_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d := Dialect{Name: "sqlite", BytesType: "BLOB"}
	all, err := Load()
	if err != nil || len(all) < 16 || all[15].Name != "016_sandbox_public_ports" {
		t.Fatalf("Load = %v, %v", all, err)
	}
	if _, err := apply(ctx, db, d, all[:15], nil); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO projects (id, name, created_at) VALUES ('prj_1', 'p', 0)`,
		`INSERT INTO templates (digest, size_bytes, manifest, created_at) VALUES ('sha256:00', 0, x'', 0)`,
		`INSERT INTO sandboxes (id, project_id, template_digest, cpus, memory_mib, env, metadata, state, state_reason,
			node_id, runtime, created_at, updated_at) VALUES ('sbx_e2b', 'prj_1', 'sha256:00', 1, 512, '{}', '{"e2b.airlock/template-id":"base"}', 'running', '', '', '', 0, 0)`,
		`INSERT INTO sandbox_metadata (sandbox_id, key, value) VALUES ('sbx_e2b', 'e2b.airlock/template-id', 'base')`,
		`INSERT INTO sandboxes (id, project_id, template_digest, cpus, memory_mib, env, metadata, state, state_reason,
			node_id, runtime, created_at, updated_at) VALUES ('sbx_native', 'prj_1', 'sha256:00', 1, 512, '{}', '{"team":"x"}', 'running', '', '', '', 0, 0)`,
		`INSERT INTO sandbox_metadata (sandbox_id, key, value) VALUES ('sbx_native', 'team', 'x')`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := apply(ctx, db, d, all[:16], nil); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	rows, err := db.QueryContext(ctx, `SELECT id, public_ports FROM sandboxes`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var public int
		if err := rows.Scan(&id, &public); err != nil {
			t.Fatal(err)
		}
		got[id] = public
	}
	if got["sbx_e2b"] != 1 || got["sbx_native"] != 0 || len(got) != 2 {
		t.Fatalf("public_ports after 016: %v", got)
	}
}

// TestHostPidsOfExistingSandboxes: 018 charges each live sandbox stored
// before it what its environment let it hold with the guest limit of the
// time (1024): runc and crun 1088, qemu 256, runsc and unknown 4352, named
// by its environment's definition or else by its runtime; deleted and
// failed ones hold nothing.
func TestHostPidsOfExistingSandboxes(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+t.TempDir()+"/m.db?_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d := Dialect{Name: "sqlite", BytesType: "BLOB"}
	all, err := Load()
	if err != nil || len(all) < 18 || all[17].Name != "018_pids_budget" {
		t.Fatalf("Load = %v, %v", all, err)
	}
	if _, err := apply(ctx, db, d, all[:17], nil); err != nil {
		t.Fatal(err)
	}
	qs := []string{
		`INSERT INTO projects (id, name, created_at) VALUES ('prj_1', 'p', 0)`,
		`INSERT INTO templates (digest, size_bytes, manifest, created_at) VALUES ('sha256:00', 0, x'', 0)`,
		`INSERT INTO environments (ref, name, schema_version, definition, first_seen) VALUES ('env:runc', 'runc', 1, '{}', 0), ('env:qemu', 'qemu', 1, '{}', 0)`,
		`INSERT INTO nodes (id, incarnation, role, advertise_url, slots, cpus, memory_mib, labels, can_pull, state, state_reason, started_at, heartbeat_at)
			VALUES ('node_1', 'inc_1', 'all', 'http://n', 0, 0, 0, '', 0, 'active', '', 0, 0)`,
	}
	for _, sb := range []struct{ id, state, env, runtime string }{
		{"sbx_runc", "running", "env:runc", "runc"},
		{"sbx_qemu", "paused", "env:qemu", ""},
		{"sbx_crun_rt", "running", "", "crun"},
		{"sbx_runsc_rt", "running", "", "runsc"},
		{"sbx_pending", "pending", "", ""},
		{"sbx_deleted", "deleted", "env:runc", "runc"},
		{"sbx_failed", "failed", "env:runc", "runc"},
	} {
		qs = append(qs, `INSERT INTO sandboxes (id, project_id, template_digest, cpus, memory_mib, env, metadata, state, state_reason,
			node_id, runtime, created_at, updated_at, environment) VALUES ('`+sb.id+`', 'prj_1', 'sha256:00', 1, 512, '{}', '{}', '`+sb.state+`', '', '', '`+sb.runtime+`', 0, 0, '`+sb.env+`')`)
	}
	for _, q := range qs {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := apply(ctx, db, d, all[:18], nil); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	rows, err := db.QueryContext(ctx, `SELECT id, host_pids FROM sandboxes`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var pids int
		if err := rows.Scan(&id, &pids); err != nil {
			t.Fatal(err)
		}
		got[id] = pids
	}
	want := map[string]int{"sbx_runc": 1088, "sbx_qemu": 256, "sbx_crun_rt": 1088, "sbx_runsc_rt": 4352, "sbx_pending": 4352, "sbx_deleted": 0, "sbx_failed": 0}
	if !maps.Equal(got, want) {
		t.Fatalf("host_pids after 018: %v, want %v", got, want)
	}
	var budget int
	if err := db.QueryRowContext(ctx, `SELECT pids_budget FROM nodes WHERE id = 'node_1'`).Scan(&budget); err != nil || budget != 0 {
		t.Fatalf("pids_budget of a node stored before: %d, %v", budget, err)
	}
}

// kindCheck finds a CHECK on operations.kind: `kind IN ('a', 'b')`.
var kindCheck = regexp.MustCompile(`(?is)\bkind\s+IN\s*\(([^)]*)\)`)

// TestKindChecksMatchLifecycleTable: the schema holds no list of operation
// kinds today (the store checks kinds against model's lifecycle table). If a
// migration adds a CHECK on kind, the newest one must list exactly the
// table's kinds.
func TestKindChecksMatchLifecycleTable(t *testing.T) {
	all, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	var last []string
	for _, m := range all {
		for _, match := range kindCheck.FindAllStringSubmatch(m.SQL, -1) {
			last = last[:0]
			for _, v := range strings.Split(match[1], ",") {
				last = append(last, strings.Trim(strings.TrimSpace(v), "'"))
			}
		}
	}
	if last == nil {
		return
	}
	var want []string
	for _, k := range model.AllOperationKinds() {
		want = append(want, string(k))
	}
	slices.Sort(last)
	slices.Sort(want)
	if !slices.Equal(last, want) {
		t.Fatalf("the schema's CHECK on operations.kind lists %v; the lifecycle table has %v", last, want)
	}
}

// TestHeaderNamesTheFile: each migration's first line is "-- NNN_name:",
// its own file name (migrations renumbered at a merge kept their old
// names in it). The runner keys applied migrations by version only and
// hashes no content, so the comment may be mended after the fact.
func TestHeaderNamesTheFile(t *testing.T) {
	ms, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if first, _, _ := strings.Cut(m.SQL, "\n"); !strings.HasPrefix(first, "-- "+m.Name+":") {
			t.Errorf("%s.sql begins %q, want \"-- %s: …\"", m.Name, first, m.Name)
		}
	}
}
