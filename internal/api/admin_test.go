package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func TestAdminEndpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var projects apiv1.ProjectList
	e.do("GET", "/v1/admin/projects", e.admin, "").want(t, http.StatusOK).decode(t, &projects)
	names := map[string]string{}
	for _, p := range projects.Projects {
		names[p.Name] = p.ID
	}
	if names["default"] != e.adminPj.String() || names["tenant-a"] != e.projA.String() || names["tenant-b"] != e.projB.String() {
		t.Fatalf("projects = %+v", projects.Projects)
	}

	// A second admin, in project A, can administer; its key works at once.
	var k apiv1.APIKey
	e.do("POST", "/v1/admin/keys", e.admin, fmt.Sprintf(`{"project_id": %q, "role": "admin"}`, e.projA)).
		want(t, http.StatusCreated).decode(t, &k)
	if k.Role != "admin" || k.ProjectID != e.projA.String() || k.Token == "" || k.RevokedAt != nil {
		t.Fatalf("new key %+v", k)
	}
	id, secret, err := auth.ParseAPIKey(k.Token)
	if err != nil || id.String() != k.ID {
		t.Fatalf("token %q does not carry key ID %s: %v", k.Token, k.ID, err)
	}
	stored, err := e.st.GetAPIKey(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if !auth.VerifySecret(stored.SecretHash, secret) {
		t.Fatal("stored hash does not verify the token's secret")
	}
	e.do("GET", "/v1/admin/projects", k.Token, "").want(t, http.StatusOK)

	// Listing shows keys without tokens: the caller's project by default.
	var keys apiv1.APIKeyList
	e.do("GET", "/v1/admin/keys", k.Token, "").want(t, http.StatusOK).decode(t, &keys)
	if len(keys.Keys) != 2 {
		t.Fatalf("project A keys = %+v, want the member key and the new admin", keys.Keys)
	}
	for _, kk := range keys.Keys {
		if kk.Token != "" {
			t.Fatal("a listed key shows its token")
		}
		if kk.ProjectID != e.projA.String() {
			t.Fatalf("key of %s listed for project A", kk.ProjectID)
		}
	}
	e.do("GET", "/v1/admin/keys?project_id="+e.adminPj.String(), k.Token, "").want(t, http.StatusOK).decode(t, &keys)
	if len(keys.Keys) != 1 || keys.Keys[0].Role != "admin" {
		t.Fatalf("default project keys = %+v", keys.Keys)
	}

	// Revoke the member key of A: refused from the next request on.
	memberID, _, _ := auth.ParseAPIKey(e.keyA)
	e.do("GET", "/v1/sandboxes", e.keyA, "").want(t, http.StatusOK)
	var revoked apiv1.APIKey
	e.do("DELETE", "/v1/admin/keys/"+memberID.String(), k.Token, "").want(t, http.StatusOK).decode(t, &revoked)
	if revoked.RevokedAt == nil || revoked.ID != memberID.String() {
		t.Fatalf("revoked = %+v", revoked)
	}
	e.do("GET", "/v1/sandboxes", e.keyA, "").wantError(t, http.StatusUnauthorized, apiv1.CodeUnauthenticated)
	// Revoking again is harmless and keeps the first time.
	var again apiv1.APIKey
	e.do("DELETE", "/v1/admin/keys/"+memberID.String(), e.admin, "").want(t, http.StatusOK).decode(t, &again)
	if !again.RevokedAt.Equal(*revoked.RevokedAt) {
		t.Fatalf("revoked_at moved from %s to %s", revoked.RevokedAt, again.RevokedAt)
	}

	// Templates: listed for members, with the alias.
	var tl apiv1.TemplateList
	e.do("GET", "/v1/templates", e.keyB, "").want(t, http.StatusOK).decode(t, &tl)
	if len(tl.Templates) != 1 || tl.Templates[0].Digest != e.digest.String() || len(tl.Templates[0].Names) != 1 || tl.Templates[0].Names[0] != "default:latest" {
		t.Fatalf("templates = %+v", tl.Templates)
	}
	// A tar archive of a different tree, named: a second template.
	tarPath := filepath.Join(t.TempDir(), "other.tar")
	writeTar(t, tarPath, map[string]string{"etc/os-release": "ID=test\n"})
	b := e.importWait(t, fmt.Sprintf(`{"source": %q, "name": "other"}`, tarPath), model.BuildSucceeded)
	if b.Digest == e.digest.String() || b.Name != "other:latest" || b.Kind != "import" || b.FinishedAt == nil {
		t.Fatalf("build %+v", b)
	}
	e.do("GET", "/v1/templates", e.keyB, "").want(t, http.StatusOK).decode(t, &tl)
	var imported apiv1.Template
	for _, tpl := range tl.Templates {
		if tpl.Digest == b.Digest {
			imported = tpl
		}
	}
	if len(imported.Names) != 1 || imported.Names[0] != "other:latest" || imported.SizeBytes != 8 {
		t.Fatalf("imported %+v", imported)
	}
	var sb apiv1.SandboxWithOperation
	e.do("POST", "/v1/sandboxes", e.keyB, `{"template": "other"}`).want(t, http.StatusAccepted).decode(t, &sb)
	if sb.Sandbox.Template != imported.Digest {
		t.Fatalf("sandbox template %s, want %s", sb.Sandbox.Template, imported.Digest)
	}
}

func TestEnsureAdminKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := openStore(ctx, filepath.Join(dir, "db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	logger := slog.New(slog.DiscardHandler)
	path := filepath.Join(dir, "admin.key")
	// A stale file from a crash before the key was inserted is replaced.
	if err := os.WriteFile(path, []byte("stale\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	created, err := EnsureAdminKey(ctx, st, path, logger)
	if err != nil || !created {
		t.Fatalf("EnsureAdminKey = %v, %v", created, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	b, _ := os.ReadFile(path)
	token := string(b)
	if token[len(token)-1] != '\n' {
		t.Fatal("key file does not end in a newline")
	}
	token = token[:len(token)-1]
	id, secret, err := auth.ParseAPIKey(token)
	if err != nil {
		t.Fatal(err)
	}
	k, err := st.GetAPIKey(ctx, id)
	if err != nil || k.Role != model.RoleAdmin || !auth.VerifySecret(k.SecretHash, secret) {
		t.Fatalf("stored key %+v, %v", k, err)
	}
	p, err := st.GetProject(ctx, k.ProjectID)
	if err != nil || p.Name != "default" {
		t.Fatalf("project %+v, %v", p, err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if filepath.Ext(e.Name()) != "" && e.Name() != "admin.key" && e.Name()[0] == '.' {
			t.Fatalf("temporary file left behind: %s", e.Name())
		}
	}

	// Second start: nothing happens, the file stays.
	created, err = EnsureAdminKey(ctx, st, path, logger)
	if err != nil || created {
		t.Fatalf("second EnsureAdminKey = %v, %v", created, err)
	}
	if b2, _ := os.ReadFile(path); string(b2) != string(b) {
		t.Fatal("the key file changed on the second start")
	}
	if n, _ := st.CountAPIKeys(ctx); n != 1 {
		t.Fatalf("%d keys, want 1", n)
	}
}

// TestEnsureAdminKeyFileFirst: when the file cannot be written, no key is
// created (a key nobody holds would lock the operator out forever).
func TestEnsureAdminKeyFileFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := openStore(ctx, filepath.Join(dir, "db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, err = EnsureAdminKey(ctx, st, filepath.Join(dir, "missing-dir", "admin.key"), slog.New(slog.DiscardHandler))
	if err == nil {
		t.Fatal("EnsureAdminKey succeeded without a writable key file")
	}
	if n, _ := st.CountAPIKeys(ctx); n != 0 {
		t.Fatalf("%d keys after a failed bootstrap, want 0", n)
	}
	// An existing project "default" is reused, not duplicated.
	if _, err := EnsureAdminKey(ctx, st, filepath.Join(dir, "admin.key"), slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	ps, _ := st.ListProjects(ctx)
	if len(ps) != 1 || ps[0].Name != "default" {
		t.Fatalf("projects %+v", ps)
	}
	if _, err := st.GetProject(ctx, model.NewProjectID()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetProject of an unknown ID = %v", err)
	}
}

// TestEnsureAdminKeyImports: a key an operator wrote into the file (a
// Kubernetes Secret, read-only) is imported on a fresh database, the file
// left as it is; processes starting together import it once.
func TestEnsureAdminKeyImports(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := openStore(ctx, filepath.Join(dir, "db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	token, id, _ := auth.GenerateAPIKey()
	path := filepath.Join(dir, "admin.key")
	if err := os.WriteFile(path, []byte(token+"\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	created, err := EnsureAdminKey(ctx, st, path, logger)
	if err != nil || !created {
		t.Fatalf("EnsureAdminKey = %v, %v", created, err)
	}
	k, err := st.GetAPIKey(ctx, id)
	if err != nil || k.Role != model.RoleAdmin {
		t.Fatalf("imported key %+v, %v", k, err)
	}
	_, secret, err := auth.ParseAPIKey(token)
	if err != nil || !auth.VerifySecret(k.SecretHash, secret) {
		t.Fatalf("the imported key does not verify the token: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != token+"\n" {
		t.Fatalf("the operator's file was changed: %q", b)
	}
	if created, err := EnsureAdminKey(ctx, st, path, logger); err != nil || created {
		t.Fatalf("second EnsureAdminKey = %v, %v; want nothing done", created, err)
	}
	if n, err := st.CountAPIKeys(ctx); err != nil || n != 1 {
		t.Fatalf("%d keys, %v; want 1", n, err)
	}
}
