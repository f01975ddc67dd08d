package server

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/sandboxes"
	"github.com/airlockdev/airlock/internal/store/sqlite"
)

// At a start, the build sandboxes a previous run of this node left are
// deleted; other sandboxes are not.
func TestReapOrphanBuildSandboxes(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "airlock.db"), log)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	node := model.NewNodeID()
	if _, err := st.RegisterNode(ctx, model.Node{ID: node, Incarnation: model.NewIncarnation(), Role: model.RoleAll, AdvertiseURL: "http://127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	project := model.NewProjectID()
	now := time.Now().UTC().Truncate(time.Microsecond)
	if err := st.CreateProject(ctx, model.Project{ID: project, Name: "p", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	d := model.TemplateDigest("sha256:" + strings.Repeat("a", 64))
	if err := st.PutTemplate(ctx, model.Template{Digest: d, Manifest: []byte(`{}`), CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	svc, err := sandboxes.New(sandboxes.Config{Store: st, Self: node, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	create := func(md map[string]string) model.SandboxID {
		t.Helper()
		m, err := model.ParseMetadata(md)
		if err != nil {
			t.Fatal(err)
		}
		c, err := svc.Create(ctx, sandboxes.CreateRequest{Project: project, Template: model.RefByDigest(d), Resources: svc.DefaultResources(),
			Metadata: m, Local: true, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return c.Sandbox.ID
	}
	orphan := create(map[string]string{model.BuildSandboxMetadata: "bld_x"})
	other := create(map[string]string{"purpose": "user"})
	if err := reapOrphans(ctx, st, svc, node, log); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[model.SandboxID]model.SandboxState{orphan: model.StateDeleting, other: model.StatePending} {
		sb, err := st.GetSandboxByID(ctx, id)
		if err != nil || sb.State != want || sb.NodeID != node {
			t.Errorf("%s: %s on %s, %v; want %s on %s", id, sb.State, sb.NodeID, err, want, node)
		}
	}
	// Again: nothing more to do.
	if err := reapOrphans(ctx, st, svc, node, log); err != nil {
		t.Fatal(err)
	}
}
