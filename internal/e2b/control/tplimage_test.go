package control

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// TestAdvancePullWithoutItsSteps: a build whose fromImage was pulled, but
// whose steps this server does not hold, is answered from its record: one
// another call moved on to its steps is building (a stale read never
// ends it), one this server took and forgot (it restarted) ends in error
// saying so, one being queued by another call or taken by another server
// is building.
func TestAdvancePullWithoutItsSteps(t *testing.T) {
	ctx := context.Background()
	const self = model.NodeID("node_aaaaaaaaaaaaaaaaaaaaaaaaaa")
	builds := newMemBuilds()
	h := &Handler{cfg: Config{Builds: builds, Node: self}, log: slog.New(slog.DiscardHandler)}
	project := model.NewProjectID()
	name, err := model.ParseTaggedName("from-image:latest")
	if err != nil {
		t.Fatal(err)
	}
	pulled := apiv1.Build{Kind: "import", Source: "docker://example.test/app:1", State: "succeeded", Digest: "sha256:" + strings.Repeat("a", 64)}
	newBuild := func(node model.NodeID) model.E2BBuild {
		t.Helper()
		b := model.E2BBuild{ID: model.NewE2BBuildID(), ProjectID: project, TemplateID: name.Name, Name: name, Status: model.E2BBuildWaiting, CreatedAt: time.Now()}
		if err := builds.CreateE2BBuild(ctx, b); err != nil {
			t.Fatal(err)
		}
		if _, err := builds.StartE2BBuild(ctx, project, b.ID, node, nil, time.Now()); err != nil {
			t.Fatal(err)
		}
		b.Native, b.Node, b.Status = model.NewBuildID(), node, model.E2BBuildBuilding
		if err := builds.SetE2BBuildNative(ctx, b.ID, b.Native, time.Now()); err != nil {
			t.Fatal(err)
		}
		return b
	}

	// Moved on by another call: the stale read answers building.
	moved := newBuild(self)
	if err := builds.ReplaceE2BBuildNative(ctx, moved.ID, moved.Native, model.NewBuildID(), time.Now()); err != nil {
		t.Fatal(err)
	}
	if st, why, err := h.advancePull(ctx, nil, moved, pulled); err != nil || st != model.E2BBuildBuilding {
		t.Fatalf("a build another call moved on: %s %q %v, want building", st, why, err)
	}

	// Taken here and forgotten: error, naming the image.
	forgotten := newBuild(self)
	st, why, err := h.advancePull(ctx, nil, forgotten, pulled)
	if err != nil || st != model.E2BBuildError || !strings.Contains(why, "example.test/app:1") || !strings.Contains(why, "restarted") {
		t.Fatalf("a build this server forgot: %s %q %v", st, why, err)
	}
	if cur, _ := builds.GetE2BBuild(ctx, project, forgotten.ID); cur.Status != model.E2BBuildError {
		t.Fatalf("recorded %s", cur.Status)
	}

	// Being queued by another call here, or taken by another server.
	queueing := newBuild(self)
	h.pulls.put(queueing.ID, pendingPull{})
	if _, ok, _ := h.pulls.claim(queueing.ID); !ok {
		t.Fatal("claim")
	}
	elsewhere := newBuild("node_bbbbbbbbbbbbbbbbbbbbbbbbbb")
	for _, b := range []model.E2BBuild{queueing, elsewhere} {
		if st, why, err := h.advancePull(ctx, nil, b, pulled); err != nil || st != model.E2BBuildBuilding {
			t.Fatalf("%s: %s %q %v, want building", b.ID, st, why, err)
		}
	}

	// A failed pull ends the build, naming the image and the reason.
	failed := newBuild(self)
	st, why, err = h.advancePull(ctx, nil, failed, apiv1.Build{Kind: "import", Source: pulled.Source, State: "failed",
		Error: &apiv1.Error{Code: apiv1.CodeRegistryUnavailable, Message: "the registry answered 404"}})
	if err != nil || st != model.E2BBuildError || !strings.Contains(why, "could not be pulled: the registry answered 404") {
		t.Fatalf("a failed pull: %s %q %v", st, why, err)
	}
}
