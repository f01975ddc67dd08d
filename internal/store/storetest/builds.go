package storetest

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

func buildTests() []namedTest {
	return []namedTest{
		{"BuildLifecycle", testBuildLifecycle},
		{"BuildFailed", testBuildFailed},
		{"BuildListOrderAndFilters", testBuildList},
		{"BuildLeaseRecovery", testBuildLeaseRecovery},
		{"BuildConcurrentClaims", testBuildConcurrentClaims},
		{"BuildClaimable", testBuildClaimable},
		{"BuildProjectScope", testBuildProjectScope},
	}
}

func (e *env) newBuild(name string) model.TemplateBuild {
	e.t.Helper()
	b := model.TemplateBuild{
		ID: model.NewBuildID(), Kind: model.BuildRecipe, Source: "recipe", Recipe: "suite: bookworm\n",
		Context: "/srv/ctx", Name: tagged(e.t, name), CreatedAt: e.now(),
	}
	if err := e.s.CreateBuild(e.ctx, b, nil); err != nil {
		e.t.Fatalf("CreateBuild: %v", err)
	}
	return b
}

func testBuildLifecycle(e *env) {
	b := e.newBuild("py")
	got, err := e.s.GetBuild(e.ctx, b.ID)
	if err != nil {
		e.t.Fatalf("GetBuild: %v", err)
	}
	if got.State != model.BuildPending || got.Recipe != b.Recipe || got.Context != b.Context || got.Name.String() != "py:latest" ||
		!got.CreatedAt.Equal(us(b.CreatedAt)) || got.FinishedAt != nil || got.Error != nil || got.Digest != "" {
		e.t.Fatalf("stored build = %+v", got)
	}
	if err := e.s.CreateBuild(e.ctx, b, nil); !errors.Is(err, store.ErrAlreadyExists) {
		e.t.Fatalf("duplicate CreateBuild: %v, want ErrAlreadyExists", err)
	}
	if _, err := e.s.GetBuild(e.ctx, model.NewBuildID()); !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("GetBuild(unknown): %v", err)
	}
	c := store.Claim{Owner: "node-a", Lease: time.Minute, Now: e.now()}
	claimed, err := e.s.ClaimBuild(e.ctx, c)
	if err != nil || claimed.ID != b.ID || claimed.State != model.BuildRunning || claimed.Attempts != 1 {
		e.t.Fatalf("ClaimBuild = %+v, %v", claimed, err)
	}
	if _, err := e.s.ClaimBuild(e.ctx, store.Claim{Owner: "node-b", Lease: time.Minute, Now: e.now()}); !errors.Is(err, store.ErrNoWork) {
		e.t.Fatalf("second ClaimBuild: %v, want ErrNoWork", err)
	}
	if err := e.s.RenewBuildLease(e.ctx, b.ID, store.Claim{Owner: "node-b", Lease: time.Minute, Now: e.now()}); !errors.Is(err, store.ErrLeaseLost) {
		e.t.Fatalf("RenewBuildLease by another owner: %v", err)
	}
	if err := e.s.RenewBuildLease(e.ctx, b.ID, store.Claim{Owner: "node-a", Lease: time.Minute, Now: e.now()}); err != nil {
		e.t.Fatalf("RenewBuildLease: %v", err)
	}
	if err := e.s.SetBuildProgress(e.ctx, b.ID, "node-a", 2, 1, 5, e.now()); err != nil {
		e.t.Fatalf("SetBuildProgress: %v", err)
	}
	if err := e.s.SetBuildProgress(e.ctx, b.ID, "node-b", 3, 1, 5, e.now()); !errors.Is(err, store.ErrLeaseLost) {
		e.t.Fatalf("SetBuildProgress by another owner: %v", err)
	}
	got, _ = e.s.GetBuild(e.ctx, b.ID)
	if got.StepsDone != 2 || got.StepsCached != 1 || got.StepsTotal != 5 {
		e.t.Fatalf("progress = %+v", got)
	}
	// The build's template is recorded by its finish, in the transaction
	// that names it: it is unknown until then.
	manifest := []byte(fmt.Sprintf(`{"rootfs":"%x"}`, randomBytes(8)))
	tpl := model.Template{Digest: model.DigestFromSHA256(sha256.Sum256(manifest)), SizeBytes: 1 << 20, Manifest: manifest, CreatedAt: e.now()}
	if _, err := e.s.GetTemplate(e.ctx, tpl.Digest); !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("the build's template before its finish: %v", err)
	}
	other := tpl
	other.Digest = model.DigestFromSHA256(sha256.Sum256([]byte("other")))
	if err := e.s.FinishBuild(e.ctx, store.BuildFinish{ID: b.ID, Owner: "node-a", State: model.BuildSucceeded, Digest: tpl.Digest, Template: &other, Now: e.now()}); !errors.Is(err, model.ErrInvalid) {
		e.t.Fatalf("FinishBuild recording another digest: %v", err)
	}
	if err := e.s.FinishBuild(e.ctx, store.BuildFinish{ID: b.ID, Owner: "node-a", State: model.BuildSucceeded, Now: e.now()}); !errors.Is(err, model.ErrInvalid) {
		e.t.Fatalf("FinishBuild without digest: %v", err)
	}
	if err := e.s.FinishBuild(e.ctx, store.BuildFinish{ID: b.ID, Owner: "node-b", State: model.BuildSucceeded, Digest: tpl.Digest, Now: e.now()}); !errors.Is(err, store.ErrLeaseLost) {
		e.t.Fatalf("FinishBuild by another owner: %v", err)
	}
	end := e.now()
	if err := e.s.FinishBuild(e.ctx, store.BuildFinish{ID: b.ID, Owner: "node-a", State: model.BuildSucceeded, Digest: tpl.Digest, Template: &tpl, Now: end}); err != nil {
		e.t.Fatalf("FinishBuild: %v", err)
	}
	got, _ = e.s.GetBuild(e.ctx, b.ID)
	if got.State != model.BuildSucceeded || got.Digest != tpl.Digest || got.FinishedAt == nil || !got.FinishedAt.Equal(us(end)) {
		e.t.Fatalf("finished build = %+v", got)
	}
	named, err := e.s.ResolveTemplate(e.ctx, model.RefByName(tagged(e.t, "py")))
	if err != nil || named.Digest != tpl.Digest {
		e.t.Fatalf("name py after the build = %v, %v", named.Digest, err)
	}
	if err := e.s.FinishBuild(e.ctx, store.BuildFinish{ID: b.ID, Owner: "node-a", State: model.BuildFailed, Now: e.now()}); !errors.Is(err, store.ErrLeaseLost) {
		e.t.Fatalf("second FinishBuild: %v", err)
	}
}

func testBuildFailed(e *env) {
	b := e.newBuild("")
	if _, err := e.s.ClaimBuild(e.ctx, store.Claim{Owner: "n", Lease: time.Minute, Now: e.now()}); err != nil {
		e.t.Fatal(err)
	}
	if err := e.s.FinishBuild(e.ctx, store.BuildFinish{ID: b.ID, Owner: "n", State: model.BuildFailed,
		Error: &model.BuildError{Code: "build_failed", Message: "step 2: exit 1"}, Now: e.now()}); err != nil {
		e.t.Fatal(err)
	}
	got, _ := e.s.GetBuild(e.ctx, b.ID)
	if got.State != model.BuildFailed || got.Error == nil || got.Error.Code != "build_failed" || got.Error.Message != "step 2: exit 1" {
		e.t.Fatalf("failed build = %+v", got)
	}
}

func testBuildList(e *env) {
	var ids []model.BuildID
	for i := 0; i < 5; i++ {
		name := "a"
		if i%2 == 1 {
			name = "b"
		}
		ids = append(ids, e.newBuild(name).ID)
	}
	var seen []model.BuildID
	q := store.BuildQuery{Scope: store.AllProjects(), Limit: 2}
	for {
		page, err := e.s.ListBuilds(e.ctx, q)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, b := range page.Builds {
			seen = append(seen, b.ID)
		}
		if page.Next == nil {
			break
		}
		q.Before = page.Next
	}
	if len(seen) != 5 {
		e.t.Fatalf("listed %d builds, want 5", len(seen))
	}
	for i := range seen {
		if seen[i] != ids[4-i] {
			e.t.Fatalf("listing %v is not newest first (%v)", seen, ids)
		}
	}
	page, err := e.s.ListBuilds(e.ctx, store.BuildQuery{Scope: store.AllProjects(), Name: tagged(e.t, "b"), States: []model.BuildState{model.BuildPending, model.BuildRunning}, Limit: 10})
	if err != nil || len(page.Builds) != 2 || page.Builds[0].ID != ids[3] {
		e.t.Fatalf("filtered listing = %+v, %v", page, err)
	}
	page, err = e.s.ListBuilds(e.ctx, store.BuildQuery{Scope: store.AllProjects(), States: []model.BuildState{model.BuildSucceeded}, Limit: 10})
	if err != nil || len(page.Builds) != 0 {
		e.t.Fatalf("succeeded builds = %+v, %v", page, err)
	}
	if _, err := e.s.ListBuilds(e.ctx, store.BuildQuery{Scope: store.AllProjects()}); !errors.Is(err, model.ErrInvalid) {
		e.t.Fatalf("limit 0: %v", err)
	}
	if _, err := e.s.ListBuilds(e.ctx, store.BuildQuery{Limit: 10}); !errors.Is(err, model.ErrInvalid) {
		e.t.Fatalf("no scope: %v", err)
	}
}

// testBuildProjectScope: a build keeps the project it was queued for
// (none for the server's own); a listing scoped to a project holds only
// that project's builds, AllProjects every build.
func testBuildProjectScope(e *env) {
	pa, pb := e.project(), e.project()
	mk := func(p model.ProjectID) model.TemplateBuild {
		b := model.TemplateBuild{ID: model.NewBuildID(), Kind: model.BuildImport, Source: "/srv/t", Project: p, CreatedAt: e.now()}
		must(e.t, e.s.CreateBuild(e.ctx, b, nil))
		return b
	}
	server, a1, b1, a2 := mk(""), mk(pa.ID), mk(pb.ID), mk(pa.ID)
	for _, b := range []model.TemplateBuild{server, a1, b1} {
		got, err := e.s.GetBuild(e.ctx, b.ID)
		if err != nil || got.Project != b.Project {
			e.t.Fatalf("GetBuild(%s) = project %q, %v; want %q", b.ID, got.Project, err, b.Project)
		}
	}
	ids := func(q store.BuildQuery) []model.BuildID {
		e.t.Helper()
		q.Limit = 100
		page, err := e.s.ListBuilds(e.ctx, q)
		must(e.t, err)
		var out []model.BuildID
		for _, b := range page.Builds {
			out = append(out, b.ID)
		}
		return out
	}
	if got := ids(store.BuildQuery{Scope: store.OnlyProject(pa.ID)}); !reflect.DeepEqual(got, []model.BuildID{a2.ID, a1.ID}) {
		e.t.Fatalf("project A's builds = %v, want %v", got, []model.BuildID{a2.ID, a1.ID})
	}
	if got := ids(store.BuildQuery{Scope: store.OnlyProject(pb.ID)}); !reflect.DeepEqual(got, []model.BuildID{b1.ID}) {
		e.t.Fatalf("project B's builds = %v", got)
	}
	if got := ids(store.BuildQuery{Scope: store.AllProjects()}); len(got) < 4 || !slices.Contains(got, server.ID) {
		e.t.Fatalf("every build = %v, want the server's %s among them", got, server.ID)
	}
	if _, err := e.s.ListBuilds(e.ctx, store.BuildQuery{Scope: store.OnlyProject(""), Limit: 10}); !errors.Is(err, model.ErrInvalid) {
		e.t.Fatalf("OnlyProject(\"\"): %v, want ErrInvalid", err)
	}
	bad := model.TemplateBuild{ID: model.NewBuildID(), Kind: model.BuildImport, Source: "/x", Project: "not a project", CreatedAt: e.now()}
	if err := e.s.CreateBuild(e.ctx, bad, nil); !errors.Is(err, model.ErrInvalid) {
		e.t.Fatalf("CreateBuild with a malformed project: %v, want ErrInvalid", err)
	}
}

func testBuildLeaseRecovery(e *env) {
	b := e.newBuild("x")
	if _, err := e.s.ClaimBuild(e.ctx, store.Claim{Owner: "dead", Lease: time.Hour, Now: e.now()}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.s.ClaimBuild(e.ctx, store.Claim{Owner: "dead", Lease: time.Hour, Now: e.now()}); !errors.Is(err, store.ErrNoWork) {
		e.t.Fatalf("claim of a leased build: %v", err)
	}
	n, err := e.s.ReleaseBuildLeases(e.ctx, "dead", e.now())
	if err != nil || n != 1 {
		e.t.Fatalf("ReleaseBuildLeases = %d, %v", n, err)
	}
	again, err := e.s.ClaimBuild(e.ctx, store.Claim{Owner: "dead", Lease: time.Hour, Now: e.now()})
	if err != nil || again.ID != b.ID || again.Attempts != 2 {
		e.t.Fatalf("re-claim = %+v, %v", again, err)
	}
	// An expired lease is claimable by another owner too.
	later := e.now().Add(2 * time.Hour)
	if _, err := e.s.ClaimBuild(e.ctx, store.Claim{Owner: "other", Lease: time.Hour, Now: later}); err != nil {
		e.t.Fatalf("claim of an expired lease: %v", err)
	}
}

// testBuildClaimable: BuildClaimable answers what ClaimBuild at the same
// time would find, without claiming.
func testBuildClaimable(e *env) {
	t := e.t
	claimable := func(now time.Time) bool {
		t.Helper()
		ok, err := e.s.BuildClaimable(e.ctx, now)
		must(t, err)
		return ok
	}
	if claimable(e.now()) {
		t.Fatal("claimable with no build")
	}
	b := e.newBuild("x")
	now := e.now()
	if !claimable(now) || !claimable(now) {
		t.Fatal("a pending build is not claimable")
	}
	if got, err := e.s.GetBuild(e.ctx, b.ID); err != nil || got.State != model.BuildPending || got.Attempts != 0 {
		t.Fatalf("BuildClaimable changed the build: %+v, %v", got, err)
	}
	if _, err := e.s.ClaimBuild(e.ctx, store.Claim{Owner: "n1", Lease: time.Hour, Now: now}); err != nil {
		t.Fatal(err)
	}
	if claimable(now.Add(time.Minute)) {
		t.Fatal("a build under a lease is claimable")
	}
	if !claimable(now.Add(time.Hour)) {
		t.Fatal("a build whose lease expired is not claimable")
	}
	must(t, e.s.FinishBuild(e.ctx, store.BuildFinish{ID: b.ID, Owner: "n1", State: model.BuildFailed,
		Error: &model.BuildError{Code: "x", Message: "y"}, Now: now.Add(time.Minute)}))
	if claimable(now.Add(2 * time.Hour)) {
		t.Fatal("a finished build is claimable")
	}
}

// testBuildConcurrentClaims: concurrent claimers never take the same build.
func testBuildConcurrentClaims(e *env) {
	const n = 8
	want := map[model.BuildID]bool{}
	for range n {
		want[e.newBuild("").ID] = true
	}
	now := e.now()
	got := make(chan model.BuildID, 2*n)
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				b, err := e.s.ClaimBuild(e.ctx, store.Claim{Owner: model.NodeID(fmt.Sprintf("node-%d", w)), Lease: time.Hour, Now: now})
				if errors.Is(err, store.ErrNoWork) {
					return
				}
				if err != nil {
					errs <- err
					return
				}
				got <- b.ID
			}
		}()
	}
	wg.Wait()
	close(got)
	close(errs)
	for err := range errs {
		e.t.Fatalf("ClaimBuild: %v", err)
	}
	seen := map[model.BuildID]bool{}
	for id := range got {
		if seen[id] || !want[id] {
			e.t.Fatalf("build %s claimed twice or unknown", id)
		}
		seen[id] = true
	}
	if len(seen) != n {
		e.t.Fatalf("claimed %d of %d builds", len(seen), n)
	}
}

// tagged parses a tagged template name that the test knows to be valid;
// "" is none.
func tagged(t testing.TB, s string) model.TaggedName {
	t.Helper()
	if s == "" {
		return model.TaggedName{}
	}
	n, err := model.ParseTaggedName(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
