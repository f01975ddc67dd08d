package storetest

import (
	"errors"
	"reflect"
	"sync"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func egressTests() []namedTest {
	return []namedTest{
		{"EgressPolicyAtCreateAndSet", testEgressPolicy},
		{"EgressUnknownProfileWritesNothing", testEgressUnknownProfile},
		{"EgressProfiles", testEgressProfiles},
		{"EgressProfileInUse", testEgressProfileInUse},
		{"EgressProfileDeleteRacesCreate", testEgressProfileRace},
		{"Secrets", testSecrets},
	}
}

func spec(t interface{ Fatal(...any) }, text string) policy.Spec {
	s, err := policy.ParseSpec([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (e *env) profile(name, text string) store.EgressProfile {
	e.t.Helper()
	now := e.now()
	p := store.EgressProfile{Name: policy.ProfileName(name), Spec: spec(e.t, text), CreatedAt: now, UpdatedAt: now}
	created, err := e.s.PutEgressProfile(e.ctx, p)
	must(e.t, err)
	if !created {
		e.t.Fatalf("profile %s: created = false", name)
	}
	return p
}

func sameSpec(e *env, got, want policy.Spec) {
	e.t.Helper()
	if !reflect.DeepEqual(got, want) {
		e.t.Fatalf("egress policy = %+v, want %+v", got, want)
	}
}

func testEgressPolicy(e *env) {
	t := e.t
	p, other := e.project(), e.project()
	tpl := e.template()
	e.profile("pypi", `{"allow": ["pypi.org", "files.pythonhosted.org:443"]}`)

	// No policy given: the empty Spec.
	plain, _ := e.sandbox(p.ID, tpl.Digest, nil)
	got, err := e.s.GetSandboxEgress(e.ctx, p.ID, plain.ID)
	must(t, err)
	sameSpec(e, got, policy.Spec{})

	want := spec(t, `{"default": "none", "allow": ["*.github.com", "203.0.113.0/24:22"], "deny": ["evil.example"],
		"profiles": ["pypi"], "tls_exempt": ["bank.example"]}`)
	sb, op := e.newSandbox(p.ID, tpl.Digest, nil)
	must(t, e.s.CreateSandbox(e.ctx, sb, want, op, nil))
	got, err = e.s.GetSandboxEgress(e.ctx, p.ID, sb.ID)
	must(t, err)
	sameSpec(e, got, want)
	got, err = e.s.GetSandboxEgressByID(e.ctx, sb.ID)
	must(t, err)
	sameSpec(e, got, want)

	// Another project sees nothing and changes nothing.
	_, err = e.s.GetSandboxEgress(e.ctx, other.ID, sb.ID)
	mustIs(t, err, store.ErrNotFound)
	mustIs(t, e.s.SetSandboxEgress(e.ctx, other.ID, sb.ID, policy.Spec{}, e.now()), store.ErrNotFound)
	_, err = e.s.GetSandboxEgressByID(e.ctx, model.NewSandboxID())
	mustIs(t, err, store.ErrNotFound)

	next := spec(t, `{"allow": ["example.com:443"]}`)
	must(t, e.s.SetSandboxEgress(e.ctx, p.ID, sb.ID, next, e.now()))
	got, err = e.s.GetSandboxEgress(e.ctx, p.ID, sb.ID)
	must(t, err)
	sameSpec(e, got, next)

	// A deleted sandbox's policy is read but no longer changed.
	e.deleteSandbox(plain)
	mustIs(t, e.s.SetSandboxEgress(e.ctx, p.ID, plain.ID, next, e.now()), model.ErrInvalidTransition)
}

func testEgressUnknownProfile(e *env) {
	t := e.t
	p := e.project()
	tpl := e.template()
	sb, op := e.newSandbox(p.ID, tpl.Digest, nil)
	err := e.s.CreateSandbox(e.ctx, sb, spec(t, `{"profiles": ["nope"]}`), op, nil)
	mustIs(t, err, policy.ErrUnknownProfile)
	_, err = e.s.GetSandbox(e.ctx, p.ID, sb.ID)
	mustIs(t, err, store.ErrNotFound)
	_, err = e.s.GetOperation(e.ctx, p.ID, op.ID)
	mustIs(t, err, store.ErrNotFound)

	ok, _ := e.sandbox(p.ID, tpl.Digest, nil)
	mustIs(t, e.s.SetSandboxEgress(e.ctx, p.ID, ok.ID, spec(t, `{"profiles": ["nope"]}`), e.now()), policy.ErrUnknownProfile)
	got, err := e.s.GetSandboxEgress(e.ctx, p.ID, ok.ID)
	must(t, err)
	sameSpec(e, got, policy.Spec{})
}

func testEgressProfiles(e *env) {
	t := e.t
	list, err := e.s.ListEgressProfiles(e.ctx)
	must(t, err)
	if len(list) != 0 {
		t.Fatalf("fresh store lists %d profiles", len(list))
	}
	b := e.profile("b-prof", `{"allow": ["b.example"]}`)
	a := e.profile("a-prof", `{"deny": ["10.0.0.0/8"], "tls_exempt": ["*.bank.example"]}`)
	got, err := e.s.GetEgressProfile(e.ctx, "a-prof")
	must(t, err)
	sameSpec(e, got.Spec, a.Spec)
	if !got.CreatedAt.Equal(us(a.CreatedAt)) || !got.UpdatedAt.Equal(us(a.UpdatedAt)) {
		t.Fatalf("times %v %v, want %v", got.CreatedAt, got.UpdatedAt, us(a.CreatedAt))
	}
	_, err = e.s.GetEgressProfile(e.ctx, "zzz")
	mustIs(t, err, store.ErrNotFound)

	// Replace keeps the creation time.
	later := e.now()
	repl := store.EgressProfile{Name: "b-prof", Spec: spec(t, `{"allow": ["c.example:443"]}`), CreatedAt: later, UpdatedAt: later}
	created, err := e.s.PutEgressProfile(e.ctx, repl)
	must(t, err)
	if created {
		t.Fatal("replace reported created")
	}
	list, err = e.s.ListEgressProfiles(e.ctx)
	must(t, err)
	if len(list) != 2 || list[0].Name != "a-prof" || list[1].Name != "b-prof" {
		t.Fatalf("list = %+v", list)
	}
	sameSpec(e, list[1].Spec, repl.Spec)
	if !list[1].CreatedAt.Equal(us(b.CreatedAt)) || !list[1].UpdatedAt.Equal(us(later)) {
		t.Fatalf("replaced profile times %v %v", list[1].CreatedAt, list[1].UpdatedAt)
	}

	// A profile body holds rules only.
	_, err = e.s.PutEgressProfile(e.ctx, store.EgressProfile{Name: "bad", Spec: policy.Spec{Default: policy.None}, CreatedAt: later, UpdatedAt: later})
	mustIs(t, err, model.ErrInvalid)

	must(t, e.s.DeleteEgressProfile(e.ctx, "a-prof"))
	mustIs(t, e.s.DeleteEgressProfile(e.ctx, "a-prof"), store.ErrNotFound)
	_, err = e.s.GetEgressProfile(e.ctx, "a-prof")
	mustIs(t, err, store.ErrNotFound)
}

func testEgressProfileInUse(e *env) {
	t := e.t
	p := e.project()
	tpl := e.template()
	e.profile("used", `{"allow": ["a.example"]}`)
	e.profile("later", `{"allow": ["b.example"]}`)
	sb, op := e.newSandbox(p.ID, tpl.Digest, nil)
	must(t, e.s.CreateSandbox(e.ctx, sb, spec(t, `{"profiles": ["used", "used"]}`), op, nil))
	mustIs(t, e.s.DeleteEgressProfile(e.ctx, "used"), store.ErrInUse)

	// A PUT moves the reference.
	must(t, e.s.SetSandboxEgress(e.ctx, p.ID, sb.ID, spec(t, `{"profiles": ["later"]}`), e.now()))
	must(t, e.s.DeleteEgressProfile(e.ctx, "used"))
	mustIs(t, e.s.DeleteEgressProfile(e.ctx, "later"), store.ErrInUse)

	// A deleted sandbox no longer holds it.
	sb.State = model.StatePending
	e.deleteSandbox(sb)
	must(t, e.s.DeleteEgressProfile(e.ctx, "later"))
}

// testEgressProfileRace: a profile delete racing creates that name it
// either fails (in use, some create won) or wins, and then every create
// fails: no sandbox ends up naming a missing profile.
func testEgressProfileRace(e *env) {
	t := e.t
	p := e.project()
	tpl := e.template()
	for round := range 5 {
		name := policy.ProfileName("race-" + string(rune('a'+round)))
		e.profile(string(name), `{"allow": ["x.example"]}`)
		const n = 4
		sbs := make([]model.Sandbox, n)
		ops := make([]model.Operation, n)
		for i := range n {
			sbs[i], ops[i] = e.newSandbox(p.ID, tpl.Digest, nil)
		}
		errs := make([]error, n)
		var delErr error
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = e.s.CreateSandbox(e.ctx, sbs[i], policy.Spec{Profiles: []policy.ProfileName{name}}, ops[i], nil)
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			delErr = e.s.DeleteEgressProfile(e.ctx, name)
		}()
		wg.Wait()
		created := 0
		for _, err := range errs {
			switch {
			case err == nil:
				created++
			case errors.Is(err, policy.ErrUnknownProfile):
			default:
				t.Fatalf("create: %v", err)
			}
		}
		switch {
		case delErr == nil && created > 0:
			t.Fatalf("round %d: profile deleted while %d sandboxes were created naming it", round, created)
		case delErr != nil && !errors.Is(delErr, store.ErrInUse):
			t.Fatalf("delete: %v", delErr)
		case delErr != nil && created == 0:
			t.Fatalf("round %d: delete refused as in use, yet no create succeeded", round)
		}
	}
}

func testSecrets(e *env) {
	t := e.t
	p, other := e.project(), e.project()
	list, err := e.s.ListSecrets(e.ctx, p.ID)
	must(t, err)
	if len(list) != 0 {
		t.Fatalf("fresh project lists %d secrets", len(list))
	}
	now := e.now()
	rec := model.SealedSecret{ProjectID: p.ID, Name: "gh-token", Sealed: []byte{1, 2, 3, 0, 255},
		Hosts: []string{"api.github.com", "*.githubusercontent.com"}, Header: "Authorization", Format: "Bearer {value}",
		CreatedAt: now, UpdatedAt: now}
	created, err := e.s.PutSecret(e.ctx, rec)
	must(t, err)
	if !created {
		t.Fatal("created = false")
	}
	got, err := e.s.GetSecret(e.ctx, p.ID, "gh-token")
	must(t, err)
	rec.CreatedAt, rec.UpdatedAt, rec.Version = us(now), us(now), 1
	if !reflect.DeepEqual(got, rec) {
		t.Fatalf("secret = %+v, want %+v", got, rec)
	}
	_, err = e.s.GetSecret(e.ctx, other.ID, "gh-token")
	mustIs(t, err, store.ErrNotFound)
	mustIs(t, e.s.DeleteSecret(e.ctx, other.ID, "gh-token"), store.ErrNotFound)

	// The same name in another project is another secret.
	o := rec
	o.ProjectID, o.Sealed, o.Hosts = other.ID, []byte{9}, []string{"x.example"}
	created, err = e.s.PutSecret(e.ctx, o)
	must(t, err)
	if !created {
		t.Fatal("other project's secret: created = false")
	}

	later := e.now()
	upd := rec
	upd.Sealed, upd.Hosts, upd.Header, upd.Format, upd.UpdatedAt = []byte{7, 7}, []string{"api.example.com"}, "X-Api-Key", "{value}", later
	upd.Metadata = map[string]string{"env": "test"}
	upd.Version = 99 // the store counts, whatever the caller says
	created, err = e.s.PutSecret(e.ctx, upd)
	must(t, err)
	if created {
		t.Fatal("replace reported created")
	}
	list, err = e.s.ListSecrets(e.ctx, p.ID)
	must(t, err)
	upd.UpdatedAt, upd.Version = us(later), 2
	if len(list) != 1 || !reflect.DeepEqual(list[0], upd) {
		t.Fatalf("list = %+v, want [%+v]", list, upd)
	}
	_, err = e.s.PutSecret(e.ctx, model.SealedSecret{ProjectID: p.ID, Name: "empty", CreatedAt: later, UpdatedAt: later})
	mustIs(t, err, model.ErrInvalid)

	// CreateSecret creates only: a taken name is ErrAlreadyExists and the
	// secret stays as it was; a secret without hosts is kept as one.
	dup := upd
	dup.Sealed, dup.Metadata = []byte{1}, nil
	mustIs(t, e.s.CreateSecret(e.ctx, dup), store.ErrAlreadyExists)
	if got, err := e.s.GetSecret(e.ctx, p.ID, "gh-token"); err != nil || !reflect.DeepEqual(got, upd) {
		t.Fatalf("after a refused create: %+v, %v", got, err)
	}
	bare := model.SealedSecret{ProjectID: p.ID, Name: "bare", Sealed: []byte{5}, CreatedAt: later, UpdatedAt: later}
	must(t, e.s.CreateSecret(e.ctx, bare))
	if got, err := e.s.GetSecret(e.ctx, p.ID, "bare"); err != nil || len(got.Hosts) != 0 || got.Version != 1 || got.ID() != bare.ID() {
		t.Fatalf("bare secret: %+v, %v", got, err)
	}
	must(t, e.s.DeleteSecret(e.ctx, p.ID, "bare"))
	must(t, e.s.DeleteSecret(e.ctx, p.ID, "gh-token"))
	mustIs(t, e.s.DeleteSecret(e.ctx, p.ID, "gh-token"), store.ErrNotFound)
	list, err = e.s.ListSecrets(e.ctx, other.ID)
	must(t, err)
	if len(list) != 1 {
		t.Fatalf("other project lists %d secrets", len(list))
	}
}
