package storetest

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func projectTests() []namedTest {
	return []namedTest{
		{"Projects", testProjects},
		{"APIKeys", testAPIKeys},
		{"APIKeyIdempotency", testAPIKeyIdempotency},
		{"Templates", testTemplates},
		{"Idempotency", testIdempotency},
	}
}

func testProjects(e *env) {
	t := e.t
	if list, err := e.s.ListProjects(e.ctx); err != nil || len(list) != 0 {
		t.Fatalf("ListProjects on an empty store = %v, %v", list, err)
	}
	a, b := e.project(), e.project()
	got, err := e.s.GetProject(e.ctx, a.ID)
	must(t, err)
	if got.ID != a.ID || got.Name != a.Name || !got.CreatedAt.Equal(us(a.CreatedAt)) || got.CreatedAt.Location() != time.UTC {
		t.Fatalf("GetProject = %+v, want %+v", got, a)
	}
	list, err := e.s.ListProjects(e.ctx)
	must(t, err)
	if len(list) != 2 || list[0].ID != a.ID || list[1].ID != b.ID {
		t.Fatalf("ListProjects = %+v, want [a b]", list)
	}
	for _, tc := range []struct {
		name string
		p    model.Project
	}{
		{"duplicate ID", model.Project{ID: a.ID, Name: "other-name", CreatedAt: e.now()}},
		{"duplicate name", model.Project{ID: model.NewProjectID(), Name: a.Name, CreatedAt: e.now()}},
	} {
		mustIs(t, e.s.CreateProject(e.ctx, tc.p), store.ErrAlreadyExists)
	}
	_, err = e.s.GetProject(e.ctx, model.NewProjectID())
	mustIs(t, err, store.ErrNotFound)
	if list, _ := e.s.ListProjects(e.ctx); len(list) != 2 {
		t.Fatalf("refused creates wrote rows: %+v", list)
	}
}

func (e *env) newKey(p model.ProjectID, role model.Role) model.APIKey {
	return model.APIKey{ID: model.NewAPIKeyID(), ProjectID: p, Role: role, Name: "ci", SecretHash: randomBytes(32), CreatedAt: e.now()}
}

func checkKey(t *testing.T, got, want model.APIKey) {
	t.Helper()
	want.CreatedAt, want.RevokedAt = us(want.CreatedAt), usPtr(want.RevokedAt)
	if !bytes.Equal(got.SecretHash, want.SecretHash) {
		t.Fatalf("secret hash = %x, want %x", got.SecretHash, want.SecretHash)
	}
	got.SecretHash, want.SecretHash = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("API key mismatch\n got: %+v\nwant: %+v", got, want)
	}
}

func testAPIKeys(e *env) {
	t := e.t
	if n, err := e.s.CountAPIKeys(e.ctx); err != nil || n != 0 {
		t.Fatalf("CountAPIKeys = %d, %v; want 0", n, err)
	}
	a, b := e.project(), e.project()
	ka1, ka2, kb := e.newKey(a.ID, model.RoleAdmin), e.newKey(a.ID, model.RoleMember), e.newKey(b.ID, model.RoleMember)
	for _, k := range []model.APIKey{ka1, ka2, kb} {
		must(t, e.s.CreateAPIKey(e.ctx, k, nil))
	}
	got, err := e.s.GetAPIKey(e.ctx, ka1.ID)
	must(t, err)
	checkKey(t, got, ka1)
	listA, err := e.s.ListAPIKeys(e.ctx, a.ID)
	must(t, err)
	if len(listA) != 2 || listA[0].ID != ka1.ID || listA[1].ID != ka2.ID {
		t.Fatalf("ListAPIKeys(a) = %+v, want [ka1 ka2]", listA)
	}
	listB, err := e.s.ListAPIKeys(e.ctx, b.ID)
	must(t, err)
	if len(listB) != 1 || listB[0].ID != kb.ID {
		t.Fatalf("ListAPIKeys(b) = %+v: project isolation broken", listB)
	}
	if n, err := e.s.CountAPIKeys(e.ctx); err != nil || n != 3 {
		t.Fatalf("CountAPIKeys = %d, %v; want 3", n, err)
	}

	revokedAt := e.now()
	must(t, e.s.RevokeAPIKey(e.ctx, ka2.ID, revokedAt))
	must(t, e.s.RevokeAPIKey(e.ctx, ka2.ID, e.now())) // idempotent, keeps the first time
	got, err = e.s.GetAPIKey(e.ctx, ka2.ID)
	must(t, err)
	ka2.RevokedAt = &revokedAt
	checkKey(t, got, ka2)
	if n, _ := e.s.CountAPIKeys(e.ctx); n != 3 {
		t.Fatalf("CountAPIKeys after revoke = %d, want 3 (revoked keys count)", n)
	}

	mustIs(t, e.s.RevokeAPIKey(e.ctx, model.NewAPIKeyID(), e.now()), store.ErrNotFound)
	_, err = e.s.GetAPIKey(e.ctx, model.NewAPIKeyID())
	mustIs(t, err, store.ErrNotFound)
	dup := e.newKey(b.ID, model.RoleMember)
	dup.ID = ka1.ID
	mustIs(t, e.s.CreateAPIKey(e.ctx, dup, nil), store.ErrAlreadyExists)
	mustIs(t, e.s.CreateAPIKey(e.ctx, e.newKey(model.NewProjectID(), model.RoleMember), nil), store.ErrNotFound)
	if err := e.s.CreateAPIKey(e.ctx, e.newKey(a.ID, model.Role("root")), nil); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("CreateAPIKey with role root: %v, want ErrInvalid", err)
	}
	if n, _ := e.s.CountAPIKeys(e.ctx); n != 3 {
		t.Fatalf("refused creates wrote keys: count %d", n)
	}
}

func testAPIKeyIdempotency(e *env) {
	t := e.t
	a := e.project()
	rec := e.idem(a.ID, "key-1")
	k1 := e.newKey(a.ID, model.RoleMember)
	must(t, e.s.CreateAPIKey(e.ctx, k1, rec))
	stored, err := e.s.GetIdempotency(e.ctx, a.ID, rec.KeyHash)
	must(t, err)
	checkIdem(t, stored, rec)

	k2 := e.newKey(a.ID, model.RoleMember)
	conflict(t, e.s.CreateAPIKey(e.ctx, k2, e.idem(a.ID, "key-1")), rec)
	_, err = e.s.GetAPIKey(e.ctx, k2.ID)
	mustIs(t, err, store.ErrNotFound)

	// A failed mutation leaves no idempotency record behind.
	dup := e.newKey(a.ID, model.RoleMember)
	dup.ID = k1.ID
	rec2 := e.idem(a.ID, "key-2")
	mustIs(t, e.s.CreateAPIKey(e.ctx, dup, rec2), store.ErrAlreadyExists)
	_, err = e.s.GetIdempotency(e.ctx, a.ID, rec2.KeyHash)
	mustIs(t, err, store.ErrNotFound)
}

func testTemplates(e *env) {
	t := e.t
	if list, err := e.s.ListTemplates(e.ctx); err != nil || len(list) != 0 {
		t.Fatalf("ListTemplates on an empty store = %v, %v", list, err)
	}
	t1, t2 := e.template(), e.template()
	again := t1
	again.SizeBytes, again.Manifest, again.CreatedAt = 7, []byte(`{}`), e.now()
	must(t, e.s.PutTemplate(e.ctx, again)) // no-op: digests are immutable
	mustIs(t, e.s.PutTemplate(e.ctx, model.Template{Digest: "sha256:nothex"}), model.ErrInvalid)

	must(t, e.s.SetTemplateName(e.ctx, tn("python"), t1.Digest, e.now()))
	must(t, e.s.SetTemplateName(e.ctx, tn("default"), t1.Digest, e.now()))
	must(t, e.s.SetTemplateName(e.ctx, tn("beta:1.0"), t2.Digest, e.now()))
	check := func(tpl model.Template, names ...string) {
		t.Helper()
		got, err := e.s.GetTemplate(e.ctx, tpl.Digest)
		must(t, err)
		want := tpl
		want.Names, want.CreatedAt = tns(names...), us(tpl.CreatedAt)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("GetTemplate = %+v\nwant %+v", got, want)
		}
	}
	check(t1, "default", "python")
	check(t2, "beta:1.0")

	for _, tc := range []struct {
		ref  model.TemplateRef
		want model.TemplateDigest
		err  error
	}{
		{model.RefByName(tn("python")), t1.Digest, nil},
		{model.RefByName(tn("beta:1.0")), t2.Digest, nil},
		{model.RefByName(tn("beta")), "", store.ErrNotFound},
		{model.RefByDigest(t2.Digest), t2.Digest, nil},
		{model.RefByName(tn("missing")), "", store.ErrNotFound},
		{model.RefByDigest(model.DigestFromSHA256([32]byte{1})), "", store.ErrNotFound},
		{model.TemplateRef{}, "", model.ErrInvalid},
	} {
		got, err := e.s.ResolveTemplate(e.ctx, tc.ref)
		if tc.err != nil {
			mustIs(t, err, tc.err)
			continue
		}
		must(t, err)
		if got.Digest != tc.want {
			t.Fatalf("ResolveTemplate(%s) = %s, want %s", tc.ref, got.Digest, tc.want)
		}
	}

	// Tags move.
	must(t, e.s.SetTemplateName(e.ctx, tn("python"), t2.Digest, e.now()))
	check(t1, "default")
	check(t2, "beta:1.0", "python")
	mustIs(t, e.s.SetTemplateName(e.ctx, tn("ghost"), model.DigestFromSHA256([32]byte{2}), e.now()), store.ErrNotFound)
	_, err := e.s.GetTemplate(e.ctx, model.DigestFromSHA256([32]byte{3}))
	mustIs(t, err, store.ErrNotFound)

	list, err := e.s.ListTemplates(e.ctx)
	must(t, err)
	if len(list) != 2 || list[0].Digest != t1.Digest || list[1].Digest != t2.Digest {
		t.Fatalf("ListTemplates = %+v, want [t1 t2]", list)
	}
	if !reflect.DeepEqual(list[1].Names, tns("beta:1.0", "python")) || !bytes.Equal(list[0].Manifest, t1.Manifest) {
		t.Fatalf("ListTemplates = %+v", list)
	}
}

func testIdempotency(e *env) {
	t := e.t
	a, b := e.project(), e.project()
	old, young := e.idem(a.ID, "old"), e.idem(a.ID, "young")
	must(t, e.s.PutIdempotency(e.ctx, *old))
	must(t, e.s.PutIdempotency(e.ctx, *young))
	conflict(t, e.s.PutIdempotency(e.ctx, *e.idem(a.ID, "old")), old)
	// Keys are scoped per project.
	otherProject := e.idem(b.ID, "old")
	must(t, e.s.PutIdempotency(e.ctx, *otherProject))
	got, err := e.s.GetIdempotency(e.ctx, b.ID, sha("old"))
	must(t, err)
	checkIdem(t, got, otherProject)
	_, err = e.s.GetIdempotency(e.ctx, a.ID, sha("never"))
	mustIs(t, err, store.ErrNotFound)

	n, err := e.s.DeleteIdempotencyBefore(e.ctx, young.CreatedAt)
	must(t, err)
	if n != 1 {
		t.Fatalf("DeleteIdempotencyBefore removed %d, want 1", n)
	}
	_, err = e.s.GetIdempotency(e.ctx, a.ID, old.KeyHash)
	mustIs(t, err, store.ErrNotFound)
	got, err = e.s.GetIdempotency(e.ctx, a.ID, young.KeyHash)
	must(t, err)
	checkIdem(t, got, young)
	// A key whose record expired can be used again.
	must(t, e.s.PutIdempotency(e.ctx, *e.idem(a.ID, "old")))
}
