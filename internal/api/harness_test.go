package api

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/api/openapitest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/placement"
	"github.com/airlockdev/airlock/internal/sandboxes"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/store/migrations"
	"github.com/airlockdev/airlock/internal/store/sqlite"
	"github.com/airlockdev/airlock/internal/template"
	"github.com/airlockdev/airlock/internal/template/build"
)

// testEnv is a real API on a real SQLite store and a real template store,
// behind an httptest server, with a client that validates every exchange
// against the OpenAPI document.
type testEnv struct {
	t       *testing.T
	st      *sqlite.Store
	api     *API
	srv     *httptest.Server
	client  *http.Client
	clock   *testClock
	tpl     *template.Store
	ring    *auth.Keyring // attachment-token signing keys
	tplDir  string        // a small root filesystem the tests import
	digest  model.TemplateDigest
	admin   string // admin key of project "default"
	adminPj model.ProjectID
	// Two tenant projects with a member key each.
	keyA, keyB   string
	projA, projB model.ProjectID
}

// testClock is a settable clock; it advances 1 ms per reading so that
// creation times are distinct and ordered.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

// loadValidator loads and validates the OpenAPI document once per test
// process (about a tenth of the package's time under -race when every
// testEnv did it); the Validator is read-only, so the tests share it.
var loadValidator = sync.OnceValues(func() (*openapitest.Validator, error) {
	return openapitest.New(context.Background(), openAPIDocument)
})

func docValidator(t testing.TB) *openapitest.Validator {
	t.Helper()
	v, err := loadValidator()
	if err != nil {
		t.Fatalf("OpenAPI document: %v", err)
	}
	return v
}

// migratedDB is an empty SQLite database with every store migration
// applied: the bytes of a VACUUM INTO copy of one migrated store, made once
// per test process. Migrating a fresh database for each testEnv was the
// largest cost of the package under -race (SQLite is C translated to Go, and
// parsing the schema's DDL is checkptr- and race-instrumented).
var migratedDB = sync.OnceValues(func() ([]byte, error) {
	dir, err := os.MkdirTemp("", "airlock-api-test-db-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "migrated.db"), nil)
	if err != nil {
		return nil, err
	}
	// VACUUM INTO writes one self-contained file, a consistent snapshot
	// whatever is still in the WAL.
	copyPath := filepath.Join(dir, "template.db")
	_, err = st.DB().ExecContext(ctx, `VACUUM INTO ?`, copyPath)
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return os.ReadFile(copyPath)
})

// openStore opens a SQLite store at path (which must not exist) as
// sqlite.Open does, but on a copy of migratedDB: each caller has a database
// of its own, with no migration left to apply.
func openStore(ctx context.Context, path string, logger *slog.Logger) (*sqlite.Store, error) {
	b, err := migratedDB()
	if err != nil {
		return nil, fmt.Errorf("migrated template database: %w", err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, err
	}
	return sqlite.Open(ctx, path, logger)
}

// TestOpenStoreMigrated: a store openStore opens is fully migrated and
// sqlite.Open applies no migration to it.
func TestOpenStoreMigrated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var applied recordHandler
	st, err := openStore(ctx, filepath.Join(t.TempDir(), "db"), slog.New(&applied))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if msgs := applied.messages(); len(msgs) != 0 {
		t.Fatalf("opening the migrated copy logged %q, want nothing (no migration applied)", msgs)
	}
	all, err := migrations.Load()
	if err != nil {
		t.Fatal(err)
	}
	var n, newest int
	if err := st.DB().QueryRowContext(ctx, `SELECT COUNT(*), MAX(version) FROM schema_migrations`).Scan(&n, &newest); err != nil {
		t.Fatal(err)
	}
	if n != len(all) || newest != all[len(all)-1].Version {
		t.Fatalf("schema_migrations has %d rows up to version %d, want %d up to %d", n, newest, len(all), all[len(all)-1].Version)
	}
}

// recordHandler is a slog.Handler that keeps the messages of the records it
// handles.
type recordHandler struct {
	mu   sync.Mutex
	msgs []string
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordHandler) WithGroup(string) slog.Handler            { return h }

func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, r.Message)
	return nil
}

func (h *recordHandler) messages() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.msgs...)
}

// envConfig is what an envOption may change: the API's Config, with the
// test's template store at hand.
type envConfig struct {
	*Config
	svc *sandboxes.Config // the sandboxes service's (Config.Sandboxes)
	tpl *template.Store
}

type envOption func(*envConfig)

func newEnv(t *testing.T, opts ...envOption) *testEnv {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	st, err := openStore(ctx, filepath.Join(dir, "airlock.db"), logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	tpl, err := template.Open(filepath.Join(dir, "templates"), logger)
	if err != nil {
		t.Fatal(err)
	}
	e := &testEnv{t: t, st: st, tpl: tpl, clock: &testClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}}
	if e.ring, err = auth.OpenKeyring(filepath.Join(dir, "keys", "attach"), auth.KeyringOptions{Now: e.clock.Now}); err != nil {
		t.Fatal(err)
	}
	// One node hosts every sandbox; it can pull any template.
	if _, err := st.RegisterNode(ctx, model.Node{ID: testNode, Incarnation: testIncarnation, Role: model.RoleAll,
		AdvertiseURL: "http://127.0.0.1:1", CanPull: true}); err != nil {
		t.Fatal(err)
	}
	placer, err := placement.New(placement.Config{Store: st, DeadAfter: time.Hour, Self: testNode})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Store: st, Logger: logger, Now: e.clock.Now, Attach: e.ring.Issuer(), AttachKeys: e.ring, Self: testNode,
		SandboxTokens: e.ring.Verifier()}
	svc := sandboxes.Config{Store: st, Logger: logger, Now: e.clock.Now, Placer: placer, Self: testNode}
	for _, o := range opts {
		o(&envConfig{Config: &cfg, svc: &svc, tpl: tpl})
	}
	// As the server wires them: what the API and the service both take.
	if cfg.Egress != nil {
		svc.Egress = cfg.Egress
	}
	svc.EgressDefault, svc.Metrics = cfg.EgressDefault, cfg.Metrics
	if cfg.Sandboxes, err = sandboxes.New(svc); err != nil {
		t.Fatal(err)
	}
	ownRunner := cfg.Builds == nil
	if ownRunner {
		rc := build.Config{Store: st, Templates: tpl, LogDir: filepath.Join(dir, "builds"), Owner: "node-test", Logger: logger}
		if cfg.Distribution != nil {
			rc.Distribution = cfg.Distribution
		}
		runner, err := build.New(rc)
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stopRunner := context.WithCancel(ctx)
		runnerDone := make(chan struct{})
		go func() {
			defer close(runnerDone)
			_ = runner.Run(runCtx)
		}()
		t.Cleanup(func() { stopRunner(); <-runnerDone })
		cfg.Builds = runner
	}
	e.api, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(e.api.Handler())
	t.Cleanup(e.srv.Close)
	e.client = docValidator(t).Client(t, e.srv.Client().Transport)

	// First start: the bootstrap admin key.
	keyFile := filepath.Join(dir, "admin.key")
	if created, err := EnsureAdminKey(ctx, st, keyFile, logger); err != nil || !created {
		t.Fatalf("EnsureAdminKey = %v, %v", created, err)
	}
	b, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	e.admin = strings.TrimSpace(string(b))

	// The default template, imported through the API.
	e.tplDir = filepath.Join(dir, "rootfs")
	writeTree(t, e.tplDir, map[string]string{"bin/hello": "#!/bin/sh\necho hello\n", "etc/motd": "hi\n"})
	if ownRunner {
		imported := e.importWait(t, fmt.Sprintf(`{"source": %q, "name": "default"}`, e.tplDir), model.BuildSucceeded)
		e.digest = model.TemplateDigest(imported.Digest)
	} else {
		// No runner runs builds: import it directly.
		imp, err := tpl.ImportPath(ctx, e.tplDir, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.PutTemplate(ctx, model.Template{Digest: imp.Digest, SizeBytes: imp.SizeBytes, Manifest: imp.Manifest, CreatedAt: e.clock.Now()}); err != nil {
			t.Fatal(err)
		}
		if err := st.SetTemplateName(ctx, model.DefaultTemplate, imp.Digest, e.clock.Now()); err != nil {
			t.Fatal(err)
		}
		e.digest = imp.Digest
	}

	var me apiv1.APIKeyList
	e.do("GET", "/v1/admin/keys", e.admin, "").want(t, http.StatusOK).decode(t, &me)
	e.adminPj = model.ProjectID(me.Keys[0].ProjectID)
	e.projA, e.keyA = e.newProject("tenant-a", "member")
	e.projB, e.keyB = e.newProject("tenant-b", "member")
	return e
}

// importWait starts a build with body (POST /v1/templates), waits for it to
// finish in state want and returns it.
func (e *testEnv) importWait(t *testing.T, body string, want model.BuildState) apiv1.Build {
	t.Helper()
	var b apiv1.Build
	e.do("POST", "/v1/templates", e.admin, body).want(t, http.StatusAccepted).decode(t, &b)
	return e.waitBuild(t, b.ID, want)
}

// importTemplate imports with body (POST /v1/templates), waits for the
// build to succeed and returns the template it made.
func (e *testEnv) importTemplate(t *testing.T, body string) apiv1.Template {
	t.Helper()
	b := e.importWait(t, body, model.BuildSucceeded)
	var tpl apiv1.Template
	e.do("GET", "/v1/templates/"+b.Digest, e.admin, "").want(t, http.StatusOK).decode(t, &tpl)
	return tpl
}

// waitBuild polls build id until it finishes, which must be in state want.
func (e *testEnv) waitBuild(t *testing.T, id string, want model.BuildState) apiv1.Build {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var b apiv1.Build
		e.do("GET", "/v1/builds/"+id, e.admin, "").want(t, http.StatusOK).decode(t, &b)
		if model.BuildState(b.State).Done() {
			if b.State != string(want) {
				t.Fatalf("build %s ended %s, want %s: %+v", id, b.State, want, b.Error)
			}
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("build %s did not finish: %+v", id, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// newProject creates a project and a key with the given role in it.
func (e *testEnv) newProject(name, role string) (model.ProjectID, string) {
	e.t.Helper()
	var p apiv1.Project
	e.do("POST", "/v1/admin/projects", e.admin, fmt.Sprintf(`{"name": %q}`, name)).want(e.t, http.StatusCreated).decode(e.t, &p)
	var k apiv1.APIKey
	e.do("POST", "/v1/admin/keys", e.admin, fmt.Sprintf(`{"project_id": %q, "role": %q, "name": "test"}`, p.ID, role)).
		want(e.t, http.StatusCreated).decode(e.t, &k)
	return model.ProjectID(p.ID), k.Token
}

func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// req describes one request; do() sends it.
type req struct {
	method, path, key, body string
	header                  http.Header
	invalid                 bool // the OpenAPI document must reject it
	ctx                     context.Context
	t                       testing.TB // where failures go; nil: the env's test
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

// do sends a JSON request (Content-Type application/json when body != "").
func (e *testEnv) do(method, path, key, body string) *resp {
	return e.send(req{method: method, path: path, key: key, body: body})
}

func (e *testEnv) send(r req) *resp {
	var t testing.TB = e.t
	if r.t != nil {
		t = r.t
	}
	t.Helper()
	ctx := r.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	ctx = openapitest.WithTest(ctx, t)
	if r.invalid {
		ctx = openapitest.ExpectInvalidRequest(ctx)
	}
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	hr, err := http.NewRequestWithContext(ctx, r.method, e.srv.URL+r.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if r.body != "" {
		hr.Header.Set("Content-Type", "application/json")
	}
	if r.key != "" {
		hr.Header.Set("Authorization", "Bearer "+r.key)
	}
	for k, vs := range r.header {
		hr.Header.Del(k)
		for _, v := range vs {
			hr.Header.Add(k, v)
		}
	}
	res, err := e.client.Do(hr)
	if err != nil {
		t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.Header.Get("X-Request-Id") == "" {
		t.Errorf("%s %s: no X-Request-Id", r.method, r.path)
	}
	return &resp{status: res.StatusCode, header: res.Header, body: b}
}

func (r *resp) want(t testing.TB, status int) *resp {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body: %s", r.status, status, r.body)
	}
	return r
}

// wantError checks an error response's status and code.
func (r *resp) wantError(t testing.TB, status int, code string) *resp {
	t.Helper()
	r.want(t, status)
	var e apiv1.Error
	r.decode(t, &e)
	if e.Code != code {
		t.Fatalf("code %q, want %q (message %q)", e.Code, code, e.Message)
	}
	if e.Message == "" {
		t.Fatal("error without message")
	}
	return r
}

func (r *resp) decode(t testing.TB, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %T from %s: %v", v, r.body, err)
	}
}

// createSandbox creates a sandbox with the key and returns it and its operation.
func (e *testEnv) createSandbox(key, body string) apiv1.SandboxWithOperation {
	e.t.Helper()
	var out apiv1.SandboxWithOperation
	e.do("POST", "/v1/sandboxes", key, body).want(e.t, http.StatusAccepted).decode(e.t, &out)
	return out
}

const (
	testNode        model.NodeID      = "node_aaaaaaaaaaaaaaaaaaaaaaaaaa"
	testIncarnation model.Incarnation = "inc_aaaaaaaaaaaaaaaaaaaaaaaaaa"
)

// finishCreate drives a sandbox's create operation to success through the
// store, as the reconciler would: pending → creating → running. The
// operation must be the oldest unfinished one (the one a claim takes).
func (e *testEnv) finishCreate(id model.SandboxID) {
	e.t.Helper()
	ctx := context.Background()
	now := time.Now()
	op, err := e.st.ClaimOperation(ctx, store.Claim{Owner: testNode, Incarnation: testIncarnation, Lease: time.Minute, Now: now})
	if err != nil {
		e.t.Fatalf("claim: %v", err)
	}
	if op.SandboxID != id || op.Kind != model.OpCreate {
		e.t.Fatalf("claimed %s %s of %s, want the create of %s", op.ID, op.Kind, op.SandboxID, id)
	}
	if err := e.st.TransitionSandbox(ctx, id, model.StatePending, model.StateCreating, "", now); err != nil {
		e.t.Fatal(err)
	}
	if err := e.st.FinishOperation(ctx, store.Finish{
		OperationID: op.ID, Owner: testNode, Incarnation: testIncarnation, State: model.OpSucceeded,
		SandboxFrom: model.StateCreating, SandboxTo: model.StateRunning, Now: now,
	}); err != nil {
		e.t.Fatalf("finish: %v", err)
	}
}

// dump returns every row of every table of the SQLite database, to prove
// that a refused request changed nothing.
func (e *testEnv) dump() string {
	e.t.Helper()
	ctx := context.Background()
	db := e.st.DB()
	// The audit log records refused requests too: it is not state a refusal
	// may not change (audit_test.go checks it).
	rows, err := db.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT IN ('audit', 'audit_seq') ORDER BY name`)
	if err != nil {
		e.t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			e.t.Fatal(err)
		}
		tables = append(tables, n)
	}
	rows.Close()
	var b strings.Builder
	for _, tbl := range tables {
		fmt.Fprintf(&b, "== %s\n", tbl)
		r, err := db.QueryContext(ctx, `SELECT * FROM "`+tbl+`" ORDER BY 1`)
		if err != nil {
			e.t.Fatal(err)
		}
		cols, _ := r.Columns()
		for r.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := r.Scan(ptrs...); err != nil {
				e.t.Fatal(err)
			}
			fmt.Fprintf(&b, "%v\n", vals)
		}
		r.Close()
	}
	return b.String()
}

// writeTar writes an uncompressed tar archive of regular files.
func writeTar(t *testing.T, path string, files map[string]string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
